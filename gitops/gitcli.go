package gitops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/snapd-ml/snapd/internal/gitexec"
)

// ErrTimeout marks a git run that was killed because it took longer than
// its size-scaled timeout or showed no progress for Remote.Stall. Such a
// push error is retryable (errors.Is(err, ErrRetryable)); the queue turns
// repeated timeouts into a needs-attention stop.
var ErrTimeout = errors.New("git timed out")

// GitError is a failed git child process. It never holds the process's
// output beyond a short tail of its stderr (git prints no credentials:
// they travel in the environment).
type GitError struct {
	Op       string // "ls-remote", "push", ...
	Kind     error  // ErrRetryable, ErrAuth, ErrDiverged, ErrRejected or ErrLocal
	Reason   string // why it was stopped: "timeout after 5m0s", "no progress for 2m0s", "" when it exited by itself
	ExitCode int    // -1 when killed
	Stderr   string // last lines of stderr, progress lines dropped
	timeout  bool
	cause    error
}

func (e *GitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "git %s", e.Op)
	if e.Reason != "" {
		fmt.Fprintf(&b, ": killed (%s)", e.Reason)
	} else if e.cause != nil && e.ExitCode < 0 {
		fmt.Fprintf(&b, ": %v", e.cause)
	} else {
		fmt.Fprintf(&b, ": exit status %d", e.ExitCode)
	}
	if e.Stderr != "" {
		fmt.Fprintf(&b, ": %s", e.Stderr)
	}
	return b.String()
}

// Unwrap exposes ErrTimeout for runs killed by the timeout or the stall
// watchdog, and the context's error when the caller cancelled.
func (e *GitError) Unwrap() []error {
	var errs []error
	if e.timeout {
		errs = append(errs, ErrTimeout)
	}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}

// maxStdout bounds what a git child may print on stdout (ls-remote of
// the refs we ask for, rev-list --disk-usage, push --porcelain).
const maxStdout = 1 << 20

// progressWriter keeps a bounded tail of stderr and hands obs (when not
// nil) each new state of the "Writing objects" line as it is written.
type progressWriter struct {
	mu    sync.Mutex
	tail  []byte
	limit int
	obs   func(gitProgress)
	last  gitProgress // what obs saw last
}

func (w *progressWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.tail = append(w.tail, p...)
	if len(w.tail) > 2*w.limit {
		w.tail = append(w.tail[:0], w.tail[len(w.tail)-w.limit:]...)
	}
	w.mu.Unlock()
	if w.obs != nil {
		if gp, ok := w.progress(); ok && gp != w.last {
			w.last = gp
			w.obs(gp)
		}
	}
	return len(p), nil
}

// lines returns the last n non-progress lines of stderr (n <= 0: all
// that are kept), joined by "; ".
func (w *progressWriter) lines(n int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var keep []string
	for _, l := range strings.Split(string(w.tail), "\n") {
		l = strings.TrimRight(l, "\r")
		if i := strings.LastIndexByte(l, '\r'); i >= 0 {
			l = l[i+1:] // the last state of a progress line
		}
		l = strings.TrimSpace(l)
		if l == "" || isProgress(l) {
			continue
		}
		keep = append(keep, l)
	}
	if n > 0 && len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, "; ")
}

func isProgress(l string) bool {
	l = strings.TrimPrefix(l, "remote: ")
	for _, p := range []string{"Enumerating objects", "Counting objects", "Delta compression", "Compressing objects",
		"Writing objects", "Total ", "Resolving deltas", "Receiving objects", "Checking connectivity", "Unpacking objects"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// limitedBuffer is a bytes.Buffer that drops what exceeds its limit.
type limitedBuffer struct {
	bytes.Buffer
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxStdout - b.Len(); len(p) > room {
		b.over = true
		b.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// run runs git with args (internal/gitexec: its own process group, the
// environment env and nothing else of snapd's GIT_* variables) and
// returns its stdout. The whole group is killed (SIGKILL to -pgid) when
// ctx ends, when timeout passes, or when git shows no new output for
// Remote.Stall (git writes --progress to stderr); the error then wraps
// ErrTimeout (or ctx's error). Every outcome kills what is left of the
// group, so no orphan survives a run.
func (p *GitPusher) run(ctx context.Context, op string, args, env []string, timeout time.Duration) (string, error) {
	return p.runObserved(ctx, op, args, env, timeout, nil)
}

// runObserved is run that also hands obs (when not nil) each new state of
// git's "Writing objects" progress line (gitProgress), as stderr shows it.
func (p *GitPusher) runObserved(ctx context.Context, op string, args, env []string, timeout time.Duration, obs func(gitProgress)) (string, error) {
	if n := p.reapStale(); n > 0 {
		p.log.Warn("killed git processes left by an earlier run", "remote", p.display, "processes", n)
	}
	full := append([]string{"--git-dir", p.repoDir}, args...)
	var stdout limitedBuffer
	stderr := &progressWriter{limit: 16 << 10, obs: obs}
	// Its own group, so a kill reaches every helper (git-remote-http,
	// ssh, a local receive-pack and its index-pack); git itself also dies
	// with the daemon (Pdeathsig), and helpers that outlive a killed
	// daemon are reaped by the next run (reapStale).
	cmd := gitexec.Command(ctx, gitexec.Options{Git: p.remote.Git, Env: env, Drop: droppedEnv,
		Stdout: &stdout, Stderr: stderr, Timeout: timeout, Stall: p.remote.Stall, OnStart: p.recordGroup}, full...)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		cause, _ := gitexec.Split(err)
		return "", &GitError{Op: op, Kind: ErrLocal, ExitCode: -1, cause: cause}
	}
	defer p.forgetGroup()
	err := cmd.Wait()
	if err == nil {
		if ps := cmd.ProcessState(); ps != nil {
			// CPU of the child and its waited-for descendants (for a
			// local remote, receive-pack and index-pack too).
			p.log.Debug("git finished", "op", op, "remote", p.display, "elapsed", time.Since(start).Round(time.Millisecond),
				"cpu", (ps.UserTime() + ps.SystemTime()).Round(time.Millisecond))
		}
		return stdout.String(), nil
	}
	ge := &GitError{Op: op, ExitCode: -1, Stderr: stderr.lines(6)}
	if len(ge.Stderr) > 1000 {
		ge.Stderr = ge.Stderr[len(ge.Stderr)-1000:]
	}
	var xe *gitexec.Error
	if errors.As(err, &xe) {
		ge.ExitCode = xe.ExitCode
	}
	switch {
	case errors.Is(err, gitexec.ErrTimeout) || errors.Is(err, gitexec.ErrStalled):
		ge.Reason = xe.Reason
		ge.Kind, ge.timeout = ErrRetryable, true
		p.log.Warn("git killed", "op", op, "remote", p.display, "reason", ge.Reason, "elapsed", time.Since(start).Round(time.Millisecond))
	case ctx.Err() != nil:
		ge.Kind, ge.cause = ErrRetryable, ctx.Err()
		ge.Reason = "cancelled"
	default:
		var ee *exec.ExitError
		if c, _ := gitexec.Split(err); !errors.As(c, &ee) {
			ge.cause = c
		}
		ge.Kind = classifyGit(stderr.lines(0))
		if k := classifyPorcelain(stdout.String()); k != nil {
			ge.Kind = k
		}
	}
	return "", ge
}

// classifyPorcelain returns the kind of a refused git push --porcelain
// from its status lines on stdout ("!\t<src>:<dst>\t[rejected] (reason)"),
// or nil when no ref was refused. Unlike stderr's hints, these lines do
// not depend on the user's advice settings.
func classifyPorcelain(stdout string) error {
	var kind error
	for _, l := range strings.Split(stdout, "\n") {
		f := strings.SplitN(l, "\t", 3)
		if len(f) < 3 || f[0] != "!" {
			continue
		}
		switch {
		case strings.HasPrefix(f[2], "[rejected]"):
			kind = ErrDiverged
		case strings.HasPrefix(f[2], "[remote rejected]"), strings.HasPrefix(f[2], "[remote failure]"):
			if kind == nil {
				kind = ErrRejected
			}
		}
	}
	return kind
}

// classifyGit returns the kind of a git failure from its stderr.
func classifyGit(s string) error {
	l := strings.ToLower(s)
	has := func(subs ...string) bool {
		for _, x := range subs {
			if strings.Contains(l, x) {
				return true
			}
		}
		return false
	}
	switch {
	case has("authentication failed", "permission denied", "host key verification failed",
		"could not read username", "could not read password", "terminal prompts disabled",
		"returned error: 401", "returned error: 403", "remote host identification has changed",
		"no matching host key", "invalid format", "load key", "bad permissions", "incorrect passphrase"):
		return ErrAuth
	case has("(non-fast-forward)", "(fetch first)", "(already exists)", "(stale info)", "non-fast-forward"):
		return ErrDiverged
	case has("unpack failed", "unpacker error", "index-pack failed", "no space left", "disk quota"):
		return ErrRetryable
	case has("[remote rejected]", "hook declined", "protected branch", "returned error: 404",
		"repository not found", "' not found", "does not appear to be a git repository", "not a git repository", "returned error: 4"):
		if has("returned error: 408", "returned error: 429") {
			return ErrRetryable
		}
		return ErrRejected
	}
	return ErrRetryable
}
