package gitops

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// stallServer accepts TCP connections on 127.0.0.1 and never answers.
// Each accepted connection is sent on accepted; closed receives it once
// the client side went away (read returned an error).
type stallServer struct {
	addr     string
	accepted chan net.Conn
	closed   chan net.Conn
}

func newStallServer(t *testing.T) *stallServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stallServer{addr: l.Addr().String(), accepted: make(chan net.Conn, 16), closed: make(chan net.Conn, 16)}
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			s.accepted <- c
			go func() {
				io.Copy(io.Discard, c) // never answers
				s.closed <- c
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return s
}

// TestPushStallBecomesRetry: a remote that accepts the connection and
// never answers is cut off by the stall watchdog; the push fails as a
// retryable timeout and the git process group is gone (the server sees
// the connection close).
func TestPushStallBecomesRetry(t *testing.T) {
	r, res := chainRepo(t, 1)
	srv := newStallServer(t)
	// The test's own guard against a hang, not a timing assertion.
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Guard)
	defer cancel()
	// On a loaded machine the watchdog may cut git before it even
	// connected (it made no progress either way): push again, with the
	// stall window doubled each time (up to a minute), until an attempt
	// reached the server, which then must see the connection closed by
	// the killed process group. The test's guard bounds the loop.
	var c net.Conn
	stall := 300 * time.Millisecond
	for c == nil {
		p, err := NewPusher(r.Dir(), Remote{URL: "http://" + srv.addr + "/r.git", Stall: stall, Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		err = p.Push(ctx, req(r, res[0]))
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, ErrRetryable) || NeedsAttention(err) {
			t.Fatalf("stalled remote: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("the push ended only with the test's guard")
		}
		if !strings.Contains(err.Error(), "no progress for") {
			t.Fatalf("error does not name the reason: %v", err)
		}
		select {
		case c = <-srv.accepted:
		default:
			stall = min(2*stall, time.Minute)
		}
	}
	select {
	case <-srv.closed:
	case <-ctx.Done():
		t.Fatalf("connection %v still held after the push returned", c.RemoteAddr())
	}

	// The overall (size-scaled) timeout kills it too.
	p2, _ := NewPusher(r.Dir(), Remote{URL: "http://" + srv.addr + "/r.git", Stall: time.Hour, Timeout: 300 * time.Millisecond})
	if err := p2.Push(ctx, req(r, res[0])); !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "timeout after") {
		t.Fatalf("timeout: %v", err)
	}
}

// TestPushCancelKillsGroup: cancelling the context (daemon shutdown) ends
// a push blocked on a silent remote promptly, and kills git's helpers.
func TestPushCancelKillsGroup(t *testing.T) {
	r, res := chainRepo(t, 1)
	srv := newStallServer(t)
	p, err := NewPusher(r.Dir(), Remote{URL: "http://" + srv.addr + "/r.git", Stall: time.Hour, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	guard, stop := context.WithTimeout(context.Background(), testutil.Guard)
	defer stop()
	ctx, cancel := context.WithCancel(guard)
	errc := make(chan error, 1)
	go func() { errc <- p.Push(ctx, req(r, res[0])) }()
	select {
	case <-srv.accepted: // git is now blocked on the silent server
	case <-guard.Done():
		t.Fatal("git never connected")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) || NeedsAttention(err) {
			t.Fatalf("cancelled push: %v", err)
		}
	case <-guard.Done():
		t.Fatal("push did not return after cancel")
	}
	select {
	case <-srv.closed:
	case <-guard.Done():
		t.Fatal("connection still held after cancel")
	}
}

// TestPushLocalStallSweepsQuarantine: a local remote whose pre-receive
// hook hangs (as a stuck server would) is killed by the watchdog with its
// whole process group; the quarantine directory receive-pack left is
// removed, the branch is not updated and the remote stays consistent.
func TestPushLocalStallSweepsQuarantine(t *testing.T) {
	r, res := chainRepo(t, 2)
	remote := filepath.Join(t.TempDir(), "r.git")
	gitCmd(t, filepath.Dir(remote), "init", "-q", "--bare", remote)
	hook := filepath.Join(remote, "hooks", "pre-receive")
	// A hook that never finishes: it waits on a FIFO nobody writes.
	fifo := filepath.Join(t.TempDir(), "never")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\nmkfifo '"+fifo+"' 2>/dev/null\nread x < '"+fifo+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := NewPusher(r.Dir(), Remote{URL: remote, Stall: 500 * time.Millisecond, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Guard)
	defer cancel()
	err = p.Push(ctx, req(r, res[0]))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("hung hook: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(remote, "objects", "*incoming-*"))
	if len(left) > 0 {
		t.Fatalf("quarantine left in the remote: %v", left)
	}
	if got := remoteHead(t, remote, "refs/heads/snapshots"); got != "" {
		t.Fatalf("branch updated by a killed push: %s", got)
	}
	os.Remove(hook)
	// The next push (default watchdog: a loaded machine can be silent
	// for more than 500ms) goes through.
	p, _ = NewPusher(r.Dir(), Remote{URL: remote})
	if err := p.Push(ctx, req(r, res[1])); err != nil {
		t.Fatal(err)
	}
	gitCmd(t, remote, "fsck", "--strict", "--no-dangling")
}
