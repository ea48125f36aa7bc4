package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/pipeline"
)

// TestStatusReportsCorruptQueueJob: with a remote's push queue holding
// an unpushed generation whose job file does not parse, snapd status
// reports the queue as corrupt (the file, what is wrong, how to fix it)
// instead of "none (no git remote configured)", and exits 1, in text and
// --json; after the file is removed it reports the other job and exits 0.
func TestStatusReportsCorruptQueueJob(t *testing.T) {
	state := t.TempDir()
	q, err := queue.Open(filepath.Join(state, pipeline.QueueDir), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for gen := uint64(1); gen <= 2; gen++ {
		if err := q.Enqueue(queue.Job{Branch: "snapshots", Gen: gen, Commit: strings.Repeat("ab", 20), Enqueued: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	jobs, _ := filepath.Glob(filepath.Join(state, pipeline.QueueDir, "jobs", "*", "*.json"))
	if len(jobs) != 2 {
		t.Fatalf("job files %v", jobs)
	}
	bad := jobs[1]
	if err := os.WriteFile(bad, []byte(`{"branch": "snapshots", "gen": 2, "commit": "ab`), 0o644); err != nil {
		t.Fatal(err)
	}

	code, out, errs := snapd(t, nil, "status", "--state-dir", state)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errs)
	}
	for _, want := range []string{"push queue:  CORRUPT: 1 job file(s) do not parse; 1 other job(s) pending", "corrupt job: " + bad + ": ", "unexpected EOF",
		"fix:", "move it out of the queue directory"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "no git remote configured") {
		t.Fatalf("a corrupt queue shown as absent:\n%s", out)
	}
	if !strings.Contains(errs, "push queue: 1 job file(s) do not parse; first: queue: corrupt queue file: "+bad) {
		t.Fatalf("stderr lacks the file:\n%s", errs)
	}

	code, out, errs = snapd(t, nil, "status", "--state-dir", state, "--json")
	if code != 1 {
		t.Fatalf("--json: exit %d, want 1\n%s%s", code, out, errs)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	checkAgainstSpec(t, "status --json (corrupt queue job)", raw, jsonDocSpecs(t)["`snapd status --json`"])
	var doc struct {
		Queue *queue.Status `json:"queue"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if doc.Queue == nil || doc.Queue.State != queue.StateCorrupt || len(doc.Queue.Corrupt) != 1 || doc.Queue.Corrupt[0].File != bad || doc.Queue.Pending != 1 {
		t.Fatalf("--json queue: %+v", doc.Queue)
	}

	if err := os.Remove(bad); err != nil {
		t.Fatal(err)
	}
	code, out, errs = snapd(t, nil, "status", "--state-dir", state)
	if code != 0 || !strings.Contains(out, "push queue:  ok, 1 pending") {
		t.Fatalf("after removing the file: exit %d\n%s%s", code, out, errs)
	}
}
