package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/pipeline"
)

// TestRunGitStalledRemote: the remote accepts connections and never
// answers. The daemon's push is cut by the stall watchdog
// (git.push_stall), retried with the reason in snapd status, then stops
// as needs-attention after git.push_max_timeouts, /healthz says so, and
// the daemon stops cleanly (SIGTERM-like cancel) while git waits on the
// silent server.
func TestRunGitStalledRemote(t *testing.T) {
	remote, _ := gittest.SilentRemote(t)
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metrics := ml.Addr().String()
	ml.Close()

	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%s  push_stall: 300ms\n  push_max_timeouts: 2\nmetrics: {addr: %q}\n",
		remote, fastGit, metrics))
	d := startDaemon(t, "--state-dir", state, "--config", cfg)
	requestTiny(t, state, 1)
	waitFor(t, "needs-attention after repeated stalls", func() (bool, string) {
		st, detail := queueState(t, state)
		return st != nil && st.Queue != nil && st.Queue.State == queue.StateNeedsAttention, detail
	})
	st, _ := pipeline.ReadStatus(state)
	if st.Queue.Hold == nil || st.Queue.Hold.Kind != "git timed out" || !strings.Contains(st.Queue.LastError, "no progress for 300ms") {
		t.Fatalf("queue %+v", st.Queue)
	}
	out := statusNeedsPerson(t, "push queue needs attention: gen 1: git timed out", "--state-dir", state)
	if !strings.Contains(out, "needs-attention") {
		t.Fatalf("status:\n%s", out)
	}
	resp, err := http.Get("http://" + metrics + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "git timed out") {
		t.Fatalf("/healthz: %d %s", resp.StatusCode, body)
	}
	// Stop while a re-check may be blocked on the silent server.
	d.stop(t)
}
