package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/snapd-ml/snapd/configs"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/wal"
)

// TestWaitDoneFailedPushed: `snapd wait` ends on the generation's outcome:
// pending runs into --timeout (exit 2, with a hint), done exits 0, a
// failed generation exits 1 with its reason, and --pushed waits until the
// push reached the remote.
func TestWaitDoneFailedPushed(t *testing.T) {
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	requestTiny(t, state, 1)
	// No daemon yet: the request stays pending.
	code, _, errs := runCLI("wait", "1", "--state-dir", state, "--timeout", "1ms")
	if code != exitUsage || !strings.Contains(errs, "timed out") || !strings.Contains(errs, "hint:") {
		t.Fatalf("pending: exit %d\n%s", code, errs)
	}
	if code, _, errs := runCLI("wait", "0", "--state-dir", state); code != exitUsage || !strings.Contains(errs, "GEN must be") {
		t.Fatalf("gen 0: exit %d %s", code, errs)
	}
	cfg := writeConfig(t, dir, fmt.Sprintf("git: {remote: %s}\n", remote.URL))
	d := startDaemon(t, "--state-dir", state, "--config", cfg, "--metrics-addr", "127.0.0.1:0")
	code, out, errs := runCLI("wait", "1", "--pushed", "--json", "--state-dir", state)
	if code != 0 {
		t.Fatalf("wait --pushed: exit %d\n%s%s", code, out, errs)
	}
	var r waitResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Gen != 1 || r.State != "pushed" || r.Source == "" {
		t.Fatalf("wait --json: %v %+v", err, r)
	}
	if got := strings.Fields(gittest.Git(t, remote.Dir, "tag", "--list", "gen-*")); len(got) != 1 || got[0] != "gen-000001" {
		t.Fatalf("remote tags after wait --pushed: %v", got)
	}
	// A request the daemon refuses: wait names the reason, exit 1.
	junk := filepath.Join(dir, "junk.bin")
	os.WriteFile(junk, []byte("garbage garbage garbage"), 0o644)
	w, err := wal.OpenWriter(filepath.Join(state, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	w.Append(wal.Request{Gen: 2, Time: time.Now(), Requester: "t", Source: junk})
	w.Close()
	code, out, errs = runCLI("wait", "2", "--state-dir", state)
	if code != exitInvalid || !strings.Contains(errs, "generation 2 failed") || !strings.Contains(errs, "unknown format") {
		t.Fatalf("failed generation: exit %d\n%s%s", code, out, errs)
	}
	d.stop(t)
	if code, out, _ := runCLI("wait", "1", "--state-dir", state); code != 0 || out != "generation 1 done\n" {
		t.Fatalf("done: exit %d %q", code, out)
	}
}

// TestWaitWakesOnChange: a wait whose polling periods are an hour still
// ends when the daemon records the outcome and the push queue empties:
// it is woken by the change of the request log and of the queue's jobs,
// not by a poll.
func TestWaitWakesOnChange(t *testing.T) {
	t.Parallel()
	if w, err := fsnotify.NewWatcher(); err != nil {
		t.Skipf("no file notifications here: %v", err)
	} else {
		w.Close()
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	remote := filepath.Join(dir, "remote.git")
	gittest.Git(t, dir, "init", "-q", "--bare", remote)
	requestTiny(t, state, 1)
	var out bytes.Buffer
	e := newEnv(&out, io.Discard)
	o := waitOptions{stateDir: state, branch: configs.Default().Git.Branch, gen: 1, pushed: true, interval: time.Hour, notifiedInterval: time.Hour}
	done := make(chan error, 1)
	go func() { done <- runWait(context.Background(), e, &o) }()
	cfg := writeConfig(t, dir, fmt.Sprintf("git: {remote: %s}\n", "file://"+remote))
	startDaemon(t, "--state-dir", state, "--config", cfg, "--metrics-addr", "off")
	select {
	case err := <-done:
		if err != nil || out.String() != "generation 1 pushed\n" {
			t.Fatalf("wait: %v %q", err, out.String())
		}
	case <-time.After(testutil.Guard):
		t.Fatal("wait was not woken by the outcome and the push")
	}
	if got := strings.TrimSpace(gittest.Git(t, remote, "tag", "--list", "gen-*")); got != "gen-000001" {
		t.Fatalf("remote tags: %q", got)
	}
}
