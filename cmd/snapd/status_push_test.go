package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/pipeline"
)

// TestStatusShowsHeldPush: `snapd run` pushes generation 1 to a local
// remote whose pre-receive hook holds the push (it signals through one
// FIFO and waits on another). While it is held, `snapd status` (text and
// --json, the latter checked against docs/JSON.md) shows the generation,
// phase, since when, the timeout and stall limits, and the metrics say a
// push is in progress; after the release the push completes and status
// shows none.
func TestStatusShowsHeldPush(t *testing.T) {
	dir := t.TempDir()
	remote, started, release := gittest.HeldRemote(t, dir)
	state := filepath.Join(dir, "state")
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%s  push_timeout: 7m\n  push_stall: 3m\n", remote, fastGit))
	d := startDaemon(t, "--state-dir", state, "--config", cfg, "--metrics-addr", "127.0.0.1:0")
	base := metricsURL(t, d)
	released := false
	defer func() {
		if !released { // unblock a waiting hook (never block: there may be none)
			if f, err := os.OpenFile(release, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Write([]byte("go\n"))
				f.Close()
			}
		}
	}()
	requestTiny(t, state, 1)

	held := make(chan error, 1)
	go func() { _, err := os.ReadFile(started); held <- err }()
	select {
	case err := <-held:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testutil.Guard):
		t.Fatalf("the remote's hook never ran:\n%s", d.stderr.String())
	}

	out := mustRun(t, "status", "--state-dir", state, "--json")
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	checkAgainstSpec(t, "status --json (push held)", doc, jsonDocSpecs(t)["`snapd status --json`"])
	st, err := pipeline.ReadStatus(state)
	if err != nil {
		t.Fatal(err)
	}
	p := st.Queue.Pushing
	if p == nil || p.Gen != 1 || p.Phase != "push" || p.Attempt != 1 || len(p.Commit) != 40 || p.Since.IsZero() ||
		p.TimeoutSeconds < 7*60 || p.StallSeconds != 180 || !p.Deadline.Equal(p.PhaseSince.Add(time.Duration(p.TimeoutSeconds*float64(time.Second)))) || p.SendBytes <= 0 {
		t.Fatalf("queue.pushing %+v\n%s", p, out)
	}
	text := mustRun(t, "status", "--state-dir", state)
	for _, want := range []string{"  pushing:   gen 000001 (commit " + p.Commit[:12] + ", attempt 1) since ", "; phase push for ",
		"    limits:  killed at ", " or after 3m0s without progress"} {
		if !strings.Contains(text, want) {
			t.Fatalf("status lacks %q:\n%s", want, text)
		}
	}
	t.Logf("snapd status while the push is held:\n%s", text)
	_, metrics := httpGet(t, base+"/metrics")
	if v, ok := sample(metrics, "snapd_push_in_progress"); !ok || v != 1 {
		t.Fatalf("snapd_push_in_progress = %v (present %v)", v, ok)
	}
	if v, ok := sample(metrics, "snapd_push_in_progress_started_timestamp_seconds"); !ok || v != float64(p.Since.UnixNano())/1e9 {
		t.Fatalf("snapd_push_in_progress_started_timestamp_seconds = %v, want %v", v, float64(p.Since.UnixNano())/1e9)
	}

	// Release: the push completes, no push in progress any more.
	if err := os.WriteFile(release, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	released = true
	waitFor(t, "the push done", func() (bool, string) {
		st, err := pipeline.ReadStatus(state)
		if err != nil || st.Queue == nil {
			return false, fmt.Sprint(err)
		}
		return st.Queue.Pending == 0 && st.Queue.Pushing == nil, fmt.Sprintf("%+v", st.Queue)
	})
	if text := mustRun(t, "status", "--state-dir", state); strings.Contains(text, "pushing:") {
		t.Fatalf("status after the push:\n%s", text)
	}
	_, metrics = httpGet(t, base+"/metrics")
	if v, ok := sample(metrics, "snapd_push_in_progress"); !ok || v != 0 {
		t.Fatalf("after the push snapd_push_in_progress = %v (present %v)", v, ok)
	}
	d.stop(t)
}
