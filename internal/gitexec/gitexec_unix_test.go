//go:build unix

package gitexec

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// sh runs a shell script in place of git: Options.Git is just a path.
func sh(o Options) Options { o.Git = "/bin/sh"; return o }

// Cancelling the context kills git's whole process group, before Wait
// is called: a grandchild holding a FIFO open for writing dies, so the
// reader sees EOF.
func TestCancelKillsGroup(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := Command(ctx, sh(Options{}), "-c", `sleep 600 >"$1" & echo started; wait`, "sh", fifo)
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	// Opening for reading waits for the grandchild's redirection.
	f, err := os.Open(fifo)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if l, _ := bufio.NewReader(out).ReadString('\n'); l != "started\n" {
		t.Fatalf("child said %q", l)
	}
	cancel()
	eof := make(chan error, 1)
	go func() {
		_, err := f.Read(make([]byte, 1))
		eof <- err
	}()
	select {
	case err := <-eof:
		if err != io.EOF {
			t.Fatalf("fifo read: %v", err)
		}
	case <-time.After(testutil.Guard):
		t.Fatal("the grandchild outlived the cancelled group")
	}
	err = c.Wait()
	var ge *Error
	if !errors.As(err, &ge) || ge.Reason != "cancelled" || !errors.Is(err, context.Canceled) || ge.ExitCode != -1 {
		t.Fatalf("Wait: %#v", err)
	}
}

// Kill kills the group too, and Wait says so.
func TestKill(t *testing.T) {
	c := Command(context.Background(), sh(Options{}), "-c", `echo up; exec sleep 600`)
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(out).ReadString('\n')
	c.Kill()
	var ge *Error
	if err := c.Wait(); !errors.As(err, &ge) || ge.Reason != "killed" {
		t.Fatalf("Wait after Kill: %v", err)
	}
}

// Captured stderr keeps its last StderrCap bytes; the error names the
// subcommand, the exit status and the last line, and stdout goes where
// asked.
func TestStderrCap(t *testing.T) {
	var stdout strings.Builder
	err := Run(context.Background(), sh(Options{StderrCap: 4096, Stdout: &stdout}), "-c",
		`echo out; i=0; while [ $i -lt 2000 ]; do echo "progress line $i" >&2; i=$((i+1)); done; echo "fatal: the end" >&2; exit 3`)
	var ge *Error
	if !errors.As(err, &ge) {
		t.Fatalf("%v", err)
	}
	if ge.ExitCode != 3 || ge.Reason != "" || ge.Op != "(none)" {
		t.Errorf("%#v", ge)
	}
	if len(ge.Stderr) > 4096 || !strings.HasSuffix(ge.Stderr, "fatal: the end") || !strings.Contains(ge.Stderr, "progress line 1999") {
		t.Errorf("stderr tail of %d bytes: ...%q", len(ge.Stderr), ge.Stderr[max(0, len(ge.Stderr)-60):])
	}
	if !strings.HasSuffix(err.Error(), ": exit status 3: fatal: the end") {
		t.Errorf("message %q", err)
	}
	if stdout.String() != "out\n" {
		t.Errorf("stdout %q", stdout.String())
	}
	// The default cap.
	err = Run(context.Background(), sh(Options{}), "-c", `head -c 300000 /dev/zero | tr '\0' x >&2; exit 1`)
	if !errors.As(err, &ge) || len(ge.Stderr) != DefaultStderrCap {
		t.Fatalf("default cap: %d bytes", len(ge.Stderr))
	}
}

// fakeClock hands out timers that fire only when the test says so.
type fakeClock struct {
	mu     sync.Mutex
	timers []*fakeTimer
	made   chan *fakeTimer
}

type fakeTimer struct {
	d      time.Duration
	f      func()
	mu     sync.Mutex
	resets int
	reset  chan struct{}
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	t := &fakeTimer{d: d, f: f, reset: make(chan struct{}, 100)}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	return t
}

func (t *fakeTimer) Reset(time.Duration) bool {
	t.mu.Lock()
	t.resets++
	t.mu.Unlock()
	select {
	case t.reset <- struct{}{}:
	default:
	}
	return true
}

func (t *fakeTimer) Stop() bool { return true }

func (c *fakeClock) timer(t *testing.T, d time.Duration) *fakeTimer {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.timers {
		if x.d == d {
			return x
		}
	}
	t.Fatalf("no timer of %v", d)
	return nil
}

// The stall watchdog, on a fake clock: output on stdout or stderr
// restarts it; when it fires, the group is killed and the error wraps
// ErrStalled. The child blocks on its stdin, so nothing but the watchdog
// ends it.
func TestStallWatchdog(t *testing.T) {
	clock := &fakeClock{}
	lines := make(chan string, 4)
	stdout := writerFunc(func(p []byte) (int, error) { lines <- string(p); return len(p), nil })
	c := Command(context.Background(), sh(Options{Clock: clock, Stall: time.Hour, Timeout: 24 * time.Hour, Stdout: stdout}),
		"-c", `echo one; read x; echo two >&2; read y`)
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	stall := clock.timer(t, time.Hour)
	guard := time.After(testutil.Guard)
	select {
	case <-lines:
	case <-guard:
		t.Fatal("no output")
	}
	select {
	case <-stall.reset:
	case <-guard:
		t.Fatal("stdout did not restart the watchdog")
	}
	in.Write([]byte("\n")) // on to stderr
	select {
	case <-stall.reset:
	case <-guard:
		t.Fatal("stderr did not restart the watchdog")
	}
	stall.f() // the hour passes without output
	err = c.Wait()
	var ge *Error
	if !errors.As(err, &ge) || !errors.Is(err, ErrStalled) || errors.Is(err, ErrTimeout) || ge.Reason != "no progress for 1h0m0s" ||
		ge.Stderr != "two" || !strings.Contains(err.Error(), "killed (no progress for 1h0m0s): two") {
		t.Fatalf("Wait: %#v (%v)", err, err)
	}
}

// The timeout, on a fake clock, kills as the watchdog does.
func TestTimeout(t *testing.T) {
	clock := &fakeClock{}
	c := Command(context.Background(), sh(Options{Clock: clock, Timeout: time.Minute}), "-c", `echo $$; exec sleep 600`)
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	l, _ := bufio.NewReader(out).ReadString('\n')
	if pid, _ := strconv.Atoi(strings.TrimSpace(l)); pid != c.pid {
		t.Fatalf("child pid %q, started %d", l, c.pid)
	}
	clock.timer(t, time.Minute).f()
	err := c.Wait()
	var ge *Error
	if !errors.As(err, &ge) || !errors.Is(err, ErrTimeout) || ge.Reason != "timeout after 1m0s" {
		t.Fatalf("Wait: %v", err)
	}
}

// OnStart sees the pid, which leads the child's own process group.
func TestOwnGroup(t *testing.T) {
	var pid int
	out, err := Output(context.Background(), sh(Options{OnStart: func(p int) { pid = p }}), "-c", `ps -o pgid= -p $$`)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := strconv.Atoi(strings.TrimSpace(string(out))); g != pid || pid == 0 || g == syscall.Getpgrp() {
		t.Fatalf("child pgid %q, pid %d, ours %d", out, pid, syscall.Getpgrp())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// One writer for stdout and stderr gets both, serialized (the race
// detector checks), as exec does for a shared writer.
func TestSharedWriter(t *testing.T) {
	var out strings.Builder
	err := Run(context.Background(), sh(Options{Stdout: &out, Stderr: &out}), "-c",
		`i=0; while [ $i -lt 200 ]; do echo "o$i"; echo "e$i" >&2; i=$((i+1)); done`)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 400 {
		t.Fatalf("%d lines", n)
	}
}

// Split hands back what ended git and the stderr tail; a kill by snapd
// stays the *Error.
func TestSplit(t *testing.T) {
	err := Run(context.Background(), sh(Options{}), "-c", `echo "fatal: nope" >&2; exit 2`)
	cause, stderr := Split(err)
	if cause == nil || cause.Error() != "exit status 2" || stderr != "fatal: nope" {
		t.Fatalf("Split = %v, %q", cause, stderr)
	}
	clock := &fakeClock{}
	c := Command(context.Background(), sh(Options{Clock: clock, Stall: time.Second}), "-c", `exec sleep 600`)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	clock.timer(t, time.Second).f()
	err = c.Wait()
	if cause, _ := Split(err); cause != err {
		t.Fatalf("Split of a stalled run: %v", cause)
	}
	if cause, stderr := Split(io.EOF); cause != io.EOF || stderr != "" {
		t.Fatalf("Split of another error: %v, %q", cause, stderr)
	}
}
