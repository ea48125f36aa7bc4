package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/internal/gittest"
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
