// Package gitexec is the one way snapd runs git. Every git child process
// outside tests starts here, under one policy, the strictest the
// callers had before:
//
//   - Environment: the parent's environment without any GIT_* variable
//     (GIT_DIR, GIT_OBJECT_DIRECTORY, GIT_EXTERNAL_DIFF and the like would
//     redirect or change what git does), plus what the caller sets
//     explicitly (Options.Env). A caller that means to pass one of the
//     user's own GIT_* settings on names it (Options.Inherit); Options.Drop
//     removes further inherited variables (askpass programs, secrets).
//   - Process group: git runs in a group of its own (Setpgid) and, on
//     Linux, dies with snapd (Pdeathsig). When the context ends, the
//     timeout passes, the stall watchdog fires or the caller kills it, the
//     whole group is killed (SIGKILL to -pgid), so no helper git started
//     (git-remote-http, ssh, index-pack) survives it; whatever is left of
//     the group when git has exited is killed too. Pipes a leftover still
//     holds are closed WaitDelay after git ended (default 5 s).
//   - Output: stderr is captured up to StderrCap bytes (default 64 KiB),
//     keeping the tail, where git's reason is; it also goes to
//     Options.Stderr when set. Errors carry the subcommand, the exit
//     status, why snapd stopped git and that tail, never the arguments
//     (they may hold URLs and paths) nor stdout.
//   - Watchdogs: Options.Timeout kills git after a fixed time,
//     Options.Stall when neither stdout nor stderr shows new output for
//     that long. Both run on an injectable Clock.
//
// Off Linux there is no Pdeathsig; on Windows there are no process groups:
// cancelling kills git itself, and a helper it started may outlive it
// (docs/PLATFORMS.md).
package gitexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"time"
)

// Defaults for Options' zero values.
const (
	DefaultStderrCap = 64 << 10
	DefaultWaitDelay = 5 * time.Second
)

// ErrStalled marks a git run killed by the stall watchdog (Options.Stall).
var ErrStalled = errors.New("git made no progress")

// ErrTimeout marks a git run killed by Options.Timeout.
var ErrTimeout = errors.New("git ran out of time")

// Options configure one git child. The zero value runs "git" from PATH in
// the current directory with the stripped environment and no watchdog.
type Options struct {
	// Git is the executable ("" = "git", looked up on PATH).
	Git string
	// Dir is the child's working directory ("" = snapd's).
	Dir string
	// Env holds KEY=VALUE variables set for the child, GIT_* ones
	// included, after the inherited environment (a later entry wins).
	Env []string
	// Inherit names GIT_* variables passed on from snapd's environment
	// (the user's own settings for a command the user runs against the
	// user's remote: UserTransport); every other GIT_* variable is
	// dropped. An entry ending in "*" is a prefix.
	Inherit []string
	// Drop names further variables not inherited; an entry ending in "*"
	// is a prefix.
	Drop []string
	// Stdin is the child's standard input (nil: none).
	Stdin io.Reader
	// Stdout receives standard output (nil: discarded; Output captures
	// it). Stderr also receives standard error, beside the captured tail.
	Stdout, Stderr io.Writer
	// StderrCap bounds the captured stderr tail (<= 0: DefaultStderrCap).
	StderrCap int
	// Timeout kills the group this long after Start (0: never).
	Timeout time.Duration
	// Stall kills the group when neither stdout nor stderr had new output
	// for this long (0: no watchdog). Git writes --progress to stderr.
	Stall time.Duration
	// WaitDelay bounds how long Wait waits for pipes a leftover of the
	// group still holds after git ended or was killed (<= 0:
	// DefaultWaitDelay).
	WaitDelay time.Duration
	// Clock runs the timeout and the watchdog (nil: the real clock).
	Clock Clock
	// OnStart, when set, is called with git's pid (its group's id where
	// there are groups) right after it started.
	OnStart func(pid int)
}

// Clock schedules the timeout and the stall watchdog; tests pass a fake.
type Clock interface {
	// AfterFunc calls f in its own goroutine after d, as time.AfterFunc.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is what Clock.AfterFunc returns; *time.Timer is one.
type Timer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

type realClock struct{}

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Error is a git child that failed: it did not start, exited with a
// non-zero status, or was killed.
type Error struct {
	Op       string // the git subcommand ("push", "cat-file", ...)
	ExitCode int    // -1 when git did not exit by itself or did not start
	// Reason says why snapd stopped git: "timeout after 5m0s", "no
	// progress for 2m0s", "cancelled" (the context ended), "killed" (Kill);
	// "" when it exited by itself or did not start.
	Reason string
	// Stderr is the captured tail of git's stderr, trimmed.
	Stderr string
	// Err is the cause: an *exec.ExitError, the start failure, or the
	// context's error.
	Err error

	kind error // ErrStalled, ErrTimeout or nil
}

// Error returns "git OP: <what happened>[: <last line of stderr>]".
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "git %s: ", e.Op)
	switch {
	case e.Reason != "":
		fmt.Fprintf(&b, "killed (%s)", e.Reason)
	case e.Err != nil:
		b.WriteString(e.Err.Error())
	default:
		fmt.Fprintf(&b, "exit status %d", e.ExitCode)
	}
	if l := LastLine(e.Stderr); l != "" {
		fmt.Fprintf(&b, ": %s", l)
	}
	return b.String()
}

// Unwrap exposes ErrStalled or ErrTimeout for runs a watchdog killed, and
// the cause.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.kind != nil {
		errs = append(errs, e.kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// Split returns, for a failed run, what ended git (the exit status, the
// start failure or the context's error; the *Error itself when snapd
// killed git for a timeout, a stall or Kill) and the captured stderr
// tail, for callers that word their own message. Any other error comes
// back as it is, with "".
func Split(err error) (cause error, stderr string) {
	var e *Error
	if !errors.As(err, &e) {
		return err, ""
	}
	if e.Err != nil && (e.Reason == "" || e.Reason == "cancelled") {
		return e.Err, e.Stderr
	}
	return e, e.Stderr
}

// LastLine returns the last non-empty line of s, trimmed.
func LastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	return s
}

// Cmd is one git child. Build it with Command, then Start and Wait, or
// Run or Output. A Cmd runs once.
type Cmd struct {
	opts   Options
	op     string
	git    string
	cmd    *exec.Cmd
	ctx    context.Context // the caller's
	cancel context.CancelFunc
	tail   *tailBuffer

	mu       sync.Mutex
	reason   string
	kind     error
	stall    Timer
	deadline Timer
	pid      int
}

// Command returns the git child for args under opts. Cancelling ctx kills
// its process group.
func Command(ctx context.Context, opts Options, args ...string) *Cmd {
	git := opts.Git
	if git == "" {
		git = "git"
	}
	if opts.StderrCap <= 0 {
		opts.StderrCap = DefaultStderrCap
	}
	if opts.WaitDelay <= 0 {
		opts.WaitDelay = DefaultWaitDelay
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	rctx, cancel := context.WithCancel(ctx)
	c := &Cmd{opts: opts, op: subcommand(args), git: git, ctx: ctx, cancel: cancel, tail: &tailBuffer{limit: opts.StderrCap}}
	cmd := exec.CommandContext(rctx, git, args...)
	cmd.Dir = opts.Dir
	cmd.Env = Environ(opts)
	cmd.Stdin = opts.Stdin
	outw, errw := opts.Stdout, opts.Stderr
	if outw != nil && sameWriter(outw, errw) {
		// exec copies stdout and stderr on two goroutines once they are
		// different writers (stderr is teed into the tail): one lock.
		lw := &lockedWriter{w: outw}
		outw, errw = lw, lw
	}
	if outw != nil {
		cmd.Stdout = c.watched(outw)
	}
	var stderr io.Writer = c.tail
	if errw != nil {
		stderr = io.MultiWriter(c.tail, errw)
	}
	cmd.Stderr = c.watched(stderr)
	inOwnGroup(cmd)
	cmd.WaitDelay = opts.WaitDelay
	c.cmd = cmd
	return c
}

// sameWriter reports whether a and b are the same writer.
func sameWriter(a, b io.Writer) bool {
	if a == nil || b == nil || !reflect.TypeOf(a).Comparable() || !reflect.TypeOf(b).Comparable() {
		return false
	}
	return a == b
}

// lockedWriter serializes the writes of stdout and stderr to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Environ returns the environment a child under opts gets: snapd's
// without GIT_* variables (other than those opts.Inherit names) and
// without those opts.Drop names, then opts.Env. Names are compared
// ignoring case (Windows' are case-insensitive).
func Environ(opts Options) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		u := strings.ToUpper(k)
		if strings.HasPrefix(u, "GIT_") && !named(opts.Inherit, u) || named(opts.Drop, u) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, opts.Env...)
}

// UserTransport returns the GIT_* variables by which a user sets how git
// reaches a remote (ssh command, TLS certificates, proxy, askpass) and
// which configuration it reads, for Options.Inherit of a command the user
// runs against the user's own remote (snapd clone). None of them locates
// a repository (GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE,
// GIT_OBJECT_DIRECTORY, GIT_ALTERNATE_OBJECT_DIRECTORIES, GIT_NAMESPACE
// stay dropped).
func UserTransport() []string {
	return []string{
		"GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSH_VARIANT",
		"GIT_SSL_*", "GIT_PROXY_*", "GIT_HTTP_*", "GIT_ASKPASS",
		"GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM",
		"GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_*", "GIT_CONFIG_VALUE_*",
		"GIT_TRACE*", "GIT_CURL_VERBOSE",
	}
}

// named reports whether the upper-cased name u is in names (an entry
// ending in "*" is a prefix).
func named(names []string, u string) bool {
	for _, n := range names {
		n = strings.ToUpper(n)
		if p, ok := strings.CutSuffix(n, "*"); ok && strings.HasPrefix(u, p) || n == u {
			return true
		}
	}
	return false
}

// subcommand returns git's subcommand in args: the first argument that is
// not a global option (or an option's value).
func subcommand(args []string) string {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-C" || a == "-c" || a == "--git-dir" || a == "--work-tree" || a == "--namespace":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			return a
		}
	}
	return "(none)"
}

// watched wraps w so that each write feeds the stall watchdog.
func (c *Cmd) watched(w io.Writer) io.Writer {
	if c.opts.Stall <= 0 {
		return w
	}
	return progressWriter{w: w, c: c}
}

type progressWriter struct {
	w io.Writer
	c *Cmd
}

func (p progressWriter) Write(b []byte) (int, error) {
	p.c.progress()
	return p.w.Write(b)
}

type progressReader struct {
	r io.ReadCloser
	c *Cmd
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.c.progress()
	}
	return n, err
}

func (p progressReader) Close() error { return p.r.Close() }

// progress restarts the stall watchdog.
func (c *Cmd) progress() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stall != nil && c.reason == "" {
		c.stall.Reset(c.opts.Stall)
	}
}

// StdinPipe returns a pipe to git's standard input (instead of
// Options.Stdin); call it before Start.
func (c *Cmd) StdinPipe() (io.WriteCloser, error) { return c.cmd.StdinPipe() }

// StdoutPipe returns a pipe from git's standard output (instead of
// Options.Stdout); call it before Start and read it before Wait. Reads
// feed the stall watchdog. Without a watchdog it is the pipe's
// *os.File.
func (c *Cmd) StdoutPipe() (io.ReadCloser, error) {
	r, err := c.cmd.StdoutPipe()
	if err != nil || c.opts.Stall <= 0 {
		return r, err
	}
	return progressReader{r: r, c: c}, nil
}

// Start starts git, then its timers (the time git takes to start counts
// toward neither). A failure to start is an *Error whose Err says why (git
// not found, for one).
func (c *Cmd) Start() error {
	if err := c.cmd.Start(); err != nil {
		c.cancel()
		return &Error{Op: c.op, ExitCode: -1, Err: fmt.Errorf("start %s: %w", c.git, err)}
	}
	c.pid = c.cmd.Process.Pid
	c.mu.Lock()
	if c.opts.Stall > 0 {
		c.stall = c.opts.Clock.AfterFunc(c.opts.Stall, func() {
			c.kill(fmt.Sprintf("no progress for %v", c.opts.Stall), ErrStalled)
		})
	}
	if c.opts.Timeout > 0 {
		c.deadline = c.opts.Clock.AfterFunc(c.opts.Timeout, func() {
			c.kill(fmt.Sprintf("timeout after %v", c.opts.Timeout), ErrTimeout)
		})
	}
	c.mu.Unlock()
	if c.opts.OnStart != nil {
		c.opts.OnStart(c.pid)
	}
	return nil
}

// kill stops git's group for reason (the first reason given wins).
func (c *Cmd) kill(reason string, kind error) {
	c.mu.Lock()
	if c.reason == "" {
		c.reason, c.kind = reason, kind
	}
	c.mu.Unlock()
	c.cancel()
}

// Kill kills git's process group; Wait then returns an *Error whose
// Reason is "killed". It does nothing once git was waited for.
func (c *Cmd) Kill() { c.kill("killed", nil) }

func (c *Cmd) stopTimers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stall != nil {
		c.stall.Stop()
	}
	if c.deadline != nil {
		c.deadline.Stop()
	}
}

// Wait waits for git to end, then kills whatever is left of its group
// (a helper that outlived git). It returns nil when git exited with
// status 0 by itself, else an *Error.
func (c *Cmd) Wait() error {
	err := c.cmd.Wait()
	c.stopTimers()
	killGroup(c.pid)
	c.mu.Lock()
	reason, kind := c.reason, c.kind
	c.mu.Unlock()
	c.cancel()
	if err == nil && reason == "" {
		return nil
	}
	e := &Error{Op: c.op, ExitCode: -1, Reason: reason, Stderr: strings.TrimSpace(c.tail.String()), Err: err, kind: kind}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		e.ExitCode = ee.ExitCode()
	}
	if reason == "" && c.ctx.Err() != nil {
		e.Reason, e.Err = "cancelled", c.ctx.Err()
	}
	return e
}

// Run starts git and waits for it.
func (c *Cmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

// Output runs git and returns its standard output (Options.Stdout, if
// set, is replaced).
func (c *Cmd) Output() ([]byte, error) {
	var out bytes.Buffer
	c.cmd.Stdout = c.watched(&out)
	err := c.Run()
	return out.Bytes(), err
}

// Stderr returns the captured tail of git's stderr so far.
func (c *Cmd) Stderr() string { return c.tail.String() }

// ProcessState is git's exit state once Wait returned (nil before).
func (c *Cmd) ProcessState() *os.ProcessState { return c.cmd.ProcessState }

// Run runs git with args under opts.
func Run(ctx context.Context, opts Options, args ...string) error {
	return Command(ctx, opts, args...).Run()
}

// Output runs git with args under opts and returns its standard output.
func Output(ctx context.Context, opts Options, args ...string) ([]byte, error) {
	return Command(ctx, opts, args...).Output()
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	mu    sync.Mutex
	buf   []byte
	limit int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.limit {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.limit:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) > t.limit {
		return string(t.buf[len(t.buf)-t.limit:])
	}
	return string(t.buf)
}
