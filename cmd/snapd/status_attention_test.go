package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/pipeline"
	"github.com/snapd-ml/snapd/wal"
)

// failGeneration records generation gen as requested and failed in the
// state directory's WAL, as the daemon does when a snapshot fails.
func failGeneration(t *testing.T, state string, gen uint64, msg string) {
	t.Helper()
	dir := stateWALDir(state)
	w, err := wal.OpenWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(wal.Request{Gen: gen, Time: time.Now(), Requester: "test", Source: "/gens/x"}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r := wal.NewReader(dir, wal.Pos{}, wal.ReaderOptions{})
	defer r.Close()
	c, err := wal.OpenConsumer(dir, wal.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for r.Next() {
		if rec := r.Record(); rec.Gen == gen {
			if _, _, err := c.Handle(context.Background(), rec, func(context.Context, wal.Record) error { return errors.New(msg) }); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("request for gen %d not read back: %v", gen, r.Err())
}

// TestStatusExitsOneWhenAttentionNeeded: a push queue stopped as
// needs-attention, or a newest generation that failed, makes status exit
// 1 with the reason and a hint, in text and with --json (whose document is
// unchanged).
func TestStatusExitsOneWhenAttentionNeeded(t *testing.T) {
	t.Run("queue needs attention", func(t *testing.T) {
		state := t.TempDir()
		qdir := filepath.Join(state, pipeline.QueueDir)
		q, err := queue.Open(qdir, queue.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Enqueue(queue.Job{Branch: "snapshots", Gen: 1, Commit: strings.Repeat("ab", 20), Enqueued: time.Now()}); err != nil {
			t.Fatal(err)
		}
		hold, _ := json.Marshal(queue.Hold{Branch: "snapshots", Gen: 1, Kind: "authentication failed", Error: "remote said 403", Since: time.Now()})
		if err := os.WriteFile(filepath.Join(qdir, "hold.json"), hold, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"status", "--state-dir", state}, {"status", "--state-dir", state, "--json"}} {
			code, out, errs := runCLI(args...)
			if code != exitInvalid || !strings.Contains(errs, "snapd: error: push queue needs attention: gen 1: authentication failed: remote said 403") ||
				!strings.Contains(errs, "snapd: hint: fix the cause, then resume at once with: snapd queue retry") {
				t.Errorf("%v: exit %d\n%s%s", args, code, out, errs)
			}
			if len(args) == 4 && !json.Valid([]byte(out)) {
				t.Errorf("--json output is not one JSON document:\n%s", out)
			}
		}
	})
	t.Run("newest generation failed", func(t *testing.T) {
		state := t.TempDir()
		os.MkdirAll(filepath.Join(state, "gens"), 0o755)
		failGeneration(t, state, 3, "decode: unexpected EOF")
		for _, args := range [][]string{{"status", "--state-dir", state}, {"status", "--state-dir", state, "--json"}} {
			code, out, errs := runCLI(args...)
			if code != exitInvalid || !strings.Contains(errs, "snapd: error: the newest generation failed: gen 3 (/gens/x): decode: unexpected EOF") {
				t.Errorf("%v: exit %d\n%s%s", args, code, out, errs)
			}
		}
	})
	t.Run("failed generation requested again", func(t *testing.T) {
		// The newest request decides, as for snapd wait: a failure asked
		// for again is counted and flagged, not listed as the newest
		// generation's failure.
		state := t.TempDir()
		os.MkdirAll(filepath.Join(state, "gens"), 0o755)
		failGeneration(t, state, 2, "decode: bad magic")
		failGeneration(t, state, 3, "decode: unexpected EOF")
		w, err := wal.OpenWriter(stateWALDir(state))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Append(wal.Request{Gen: 3, Time: time.Now(), Requester: "test", Source: "/gens/y"}); err != nil {
			t.Fatal(err)
		}
		w.Close()
		code, out, errs := runCLI("status", "--state-dir", state)
		if code != exitOK || !strings.Contains(out, "1 pending (backlog), 0 done, 2 failed (1 of them requested again since: snapd wal list)") ||
			!strings.Contains(out, "failed gen 2 (/gens/x): decode: bad magic") || strings.Contains(out, "failed gen 3") {
			t.Errorf("exit %d\n%s%s", code, out, errs)
		}
		code, out, errs = runCLI("status", "--state-dir", state, "--json")
		var st pipeline.Status
		if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || len(st.Failed) != 2 ||
			st.Failed[0].Gen != 2 || st.Failed[0].Retried || st.Failed[1].Gen != 3 || !st.Failed[1].Retried {
			t.Errorf("--json: exit %d\n%s%s", code, out, errs)
		}
	})
}

// statusNeedsPerson runs snapd status with args, requires exit 1 with
// want in its error, and returns stdout.
func statusNeedsPerson(t *testing.T, want string, args ...string) string {
	t.Helper()
	code, out, errs := snapd(t, nil, append([]string{"status"}, args...)...)
	if code != exitInvalid || !strings.Contains(errs, "snapd: error: "+want) {
		t.Fatalf("snapd status %s: exit %d, want 1 and %q\n%s%s", strings.Join(args, " "), code, want, out, errs)
	}
	return out
}

// TestQueueListShowsStoppingJob: the job that stopped the queue shows the
// hold's error and its attempt on its row; other jobs are unchanged.
func TestQueueListShowsStoppingJob(t *testing.T) {
	state := t.TempDir()
	qdir := filepath.Join(state, pipeline.QueueDir)
	q, err := queue.Open(qdir, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for gen := uint64(1); gen <= 2; gen++ {
		if err := q.Enqueue(queue.Job{Branch: "snapshots", Gen: gen, Commit: strings.Repeat("ab", 20), Enqueued: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	hold, _ := json.Marshal(queue.Hold{Branch: "snapshots", Gen: 1, Kind: "authentication failed", Error: "push snapshots: authentication failed", Since: time.Now()})
	if err := os.WriteFile(filepath.Join(qdir, "hold.json"), hold, 0o644); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, "queue", "list", "--state-dir", state)
	var row1, row2 string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 0 && strings.HasSuffix(f[0], "1") && strings.Contains(l, "snapshots"):
			row1 = l
		case len(f) > 0 && strings.HasSuffix(f[0], "2") && strings.Contains(l, "snapshots"):
			row2 = l
		}
	}
	if f := strings.Fields(row1); len(f) < 4 || f[3] != "1" || !strings.Contains(row1, "stopped (snapd queue retry)") || !strings.HasSuffix(row1, "push snapshots: authentication failed") {
		t.Errorf("stopping job's row %q:\n%s", row1, out)
	}
	if f := strings.Fields(row2); len(f) < 5 || f[3] != "0" || f[4] != "-" {
		t.Errorf("other job's row %q:\n%s", row2, out)
	}
}
