package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/wal"
)

// TestWaitOnce: `snapd wait GEN --once` never waits: it prints the
// current state — pending, done, failed with its reason — and exits 0
// whatever it is; an unreadable state directory still exits 2.
func TestWaitOnce(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	requestTiny(t, state, 1)
	once := func(gen string, args ...string) (int, waitResult, string) {
		t.Helper()
		code, out, errs := runCLI(append([]string{"wait", gen, "--once", "--json", "--state-dir", state}, args...)...)
		var r waitResult
		if code == 0 {
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("wait --once --json: %v\n%s", err, out)
			}
		}
		return code, r, errs
	}
	// No daemon: pending, exit 0 at once (no --timeout needed).
	if code, r, errs := once("1"); code != 0 || r.State != "pending" || r.Gen != 1 || r.Source == "" {
		t.Fatalf("pending: exit %d %+v %s", code, r, errs)
	}
	// A generation nobody requested is pending too.
	if code, r, _ := once("9"); code != 0 || r.State != "pending" || r.Source != "" {
		t.Fatalf("unrequested: exit %d %+v", code, r)
	}
	junk := filepath.Join(dir, "junk.bin")
	os.WriteFile(junk, []byte("garbage garbage garbage"), 0o644)
	w, err := wal.OpenWriter(filepath.Join(state, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	w.Append(wal.Request{Gen: 2, Time: time.Now(), Requester: "t", Source: junk})
	w.Close()
	d := startDaemon(t, "--state-dir", state, "--metrics-addr", "off")
	if code, _, errs := runCLI("wait", "2", "--state-dir", state); code != exitInvalid {
		t.Fatalf("wait 2: exit %d %s", code, errs)
	}
	d.stop(t)
	if code, r, errs := once("1"); code != 0 || r.State != "done" {
		t.Fatalf("done: exit %d %+v %s", code, r, errs)
	}
	if code, r, errs := once("2"); code != 0 || r.State != "failed" || !strings.Contains(r.Message, "unknown format") || r.Source != junk {
		t.Fatalf("failed: exit %d %+v %s", code, r, errs)
	}
	if code, out, _ := runCLI("wait", "2", "--once", "--state-dir", state); code != 0 || !strings.HasPrefix(out, "generation 2 failed: ") {
		t.Fatalf("failed, text: exit %d %q", code, out)
	}
	if code, _, errs := runCLI("wait", "1", "--once", "--state-dir", filepath.Join(dir, "nope")); code != exitUsage {
		t.Fatalf("missing state dir: exit %d %s", code, errs)
	}
}
