package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestRunNotifiesSystemd: under Type=notify (NOTIFY_SOCKET set) the daemon
// sends READY=1 once it runs, RELOADING=1 then READY=1 around a SIGHUP and
// STOPPING=1 on SIGTERM, to a datagram socket the test owns.
func TestRunNotifiesSystemd(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var stderr testutil.SyncBuffer
	e := newEnv(io.Discard, &stderr)
	e.getenv = func(k string) string {
		if k == "NOTIFY_SOCKET" {
			return sock
		}
		return ""
	}
	sigs := make(chan os.Signal, 1)
	state := filepath.Join(dir, "state")
	o := &runOptions{stateDir: state, metricsAddr: "off", noGit: true, signals: sigs,
		changed: func(n string) bool { return n == "state-dir" || n == "metrics-addr" || n == "no-git" }}
	done := make(chan error, 1)
	go func() { done <- runRun(context.Background(), e, o) }()

	next := func() string {
		t.Helper()
		ln.SetReadDeadline(time.Now().Add(testutil.Guard))
		b := make([]byte, 4096)
		n, err := ln.Read(b)
		if err != nil {
			t.Fatalf("no notification: %v\n%s", err, stderr.String())
		}
		return string(b[:n])
	}
	if got := next(); !strings.HasPrefix(got, "READY=1\nSTATUS=") {
		t.Fatalf("first notification %q", got)
	}
	// Ready means running: the state dir is locked and the WAL exists.
	if _, err := os.Stat(filepath.Join(state, "wal")); err != nil {
		t.Fatalf("READY=1 before the WAL exists: %v", err)
	}
	sigs <- syscall.SIGHUP
	if got := next(); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Fatalf("after SIGHUP %q", got)
	}
	if got := next(); !strings.HasPrefix(got, "READY=1") {
		t.Fatalf("after reload %q", got)
	}
	sigs <- syscall.SIGTERM
	if got := next(); got != "STOPPING=1" {
		t.Fatalf("after SIGTERM %q", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
