package queue

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
)

// stepPublisher does its work in two steps like the OCI publisher: the
// "upload" (recorded with save) and the "commit". Failures are injected
// per step; calls records what it saw.
type stepPublisher struct {
	mu        sync.Mutex
	calls     []string
	uploadErr error
	commitErr error
	noCommit  bool // a rank manifest: nothing to push
}

func (p *stepPublisher) Publish(_ context.Context, j Job, save func(Job) error) (Job, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := os.ReadFile(j.Publish.WTXT)
	if err != nil {
		return j, err
	}
	if !j.Publish.Sent {
		p.calls = append(p.calls, "upload "+string(b))
		if p.uploadErr != nil {
			return j, p.uploadErr
		}
		pub := *j.Publish
		pub.Sent, pub.State = true, json.RawMessage(`{"manifest":"sha256:`+strings.Repeat("a", 64)+`"}`)
		j.Publish = &pub
		if err := save(j); err != nil {
			return j, err
		}
	}
	if p.noCommit {
		p.calls = append(p.calls, "done")
		return j, nil
	}
	p.calls = append(p.calls, "commit")
	if p.commitErr != nil {
		return j, p.commitErr
	}
	j.Commit, j.Tag = commitOf(int(j.Gen)), "gen-00000"+string(rune('0'+j.Gen))
	return j, nil
}

func publishJob(t *testing.T, dir string, gen uint64, content, sha string) Job {
	t.Helper()
	p := filepath.Join(dir, "ring-"+content+".wtxt")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return Job{Branch: "snapshots", Gen: gen, Publish: &Publish{Kind: "oci-generation", WTXT: p, Bytes: int64(len(content)),
		Header: &gitops.Header{Gen: gen, Root: wtxt.Root{SHA256All: sha256.Sum256([]byte(sha)), MerkleThis: sha256.Sum256([]byte(sha))}}}}
}

// TestPublishJobDurableSteps: a publish job holds its file (the ring may
// trim it), keeps the progress its Publisher saved across a failure (the
// retry does not upload again), pushes only after the commit, and removes
// its held files when done.
func TestPublishJobDurableSteps(t *testing.T) {
	clock := newFakeClock()
	fp := &fakePusher{}
	pub := &stepPublisher{commitErr: errors.New("git: disk full")}
	qdir, ring := t.TempDir(), t.TempDir()
	q, err := Open(qdir, Options{Pusher: fp, Publisher: pub, Clock: clock, Rand: func() float64 { return 0 }, BaseDelay: time.Second, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	j := publishJob(t, ring, 1, "one", "11")
	if err := q.Enqueue(j); err != nil {
		t.Fatal(err)
	}
	// Repeated after a crash: a no-op; another generation 1: a conflict.
	if err := q.Enqueue(j); err != nil {
		t.Fatalf("repeated enqueue: %v", err)
	}
	if err := q.Enqueue(publishJob(t, ring, 1, "other", "22")); !errors.Is(err, ErrConflict) {
		t.Fatalf("conflicting enqueue: %v", err)
	}
	if err := q.Enqueue(Job{Branch: "snapshots", Gen: 2, Publish: &Publish{Kind: "bad kind", WTXT: j.Publish.WTXT}}); !errors.Is(err, ErrInvalidJob) {
		t.Fatalf("invalid publish job: %v", err)
	}
	os.Remove(j.Publish.WTXT) // the ring trims it
	st, _ := q.Status()
	if st.Publishing != 1 || st.PublishPendingBytes != 3 {
		t.Fatalf("status before: %+v", st)
	}

	ctx := context.Background()
	if _, err := q.step(ctx); err != nil {
		t.Fatal(err)
	}
	jobs, _ := q.List()
	if len(jobs) != 1 || jobs[0].Attempts != 1 || !jobs[0].Publish.Sent || len(jobs[0].Publish.State) == 0 || jobs[0].Commit != "" || !strings.Contains(jobs[0].LastError, "disk full") {
		t.Fatalf("after a failed commit the saved progress is lost: %+v", jobs)
	}
	if len(fp.calls) != 0 {
		t.Fatalf("pushed before the commit: %v", fp.calls)
	}
	st, _ = q.Status()
	if st.Publishing != 1 || st.PublishPendingBytes != 0 || st.State != StateRetrying {
		t.Fatalf("status after upload: %+v", st)
	}

	// A restart (another Open of the directory) retries from the saved
	// state: commit only, then the push.
	pub.commitErr = nil
	q, err = Open(qdir, Options{Pusher: fp, Publisher: pub, Clock: clock, Rand: func() float64 { return 0 }, BaseDelay: time.Second, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if _, err := q.step(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(pub.calls, ","); got != "upload one,commit,commit" {
		t.Fatalf("publisher calls %q: the upload must not repeat", got)
	}
	if len(fp.calls) != 1 || fp.calls[0] != "snapshots@"+commitOf(1)[:4] {
		t.Fatalf("pushes %v", fp.calls)
	}
	if st, _ := q.Status(); st.Pending != 0 || st.Publishing != 0 {
		t.Fatalf("status after: %+v", st)
	}
	if es, _ := os.ReadDir(filepath.Join(qdir, holdDir)); len(es) != 0 {
		t.Fatalf("held files left: %v", es)
	}
}

// TestPublishJobWithoutCommit: a Publisher that commits nothing (a rank
// manifest) finishes the job without a push.
func TestPublishJobWithoutCommit(t *testing.T) {
	fp := &fakePusher{}
	pub := &stepPublisher{noCommit: true}
	q, err := Open(t.TempDir(), Options{Pusher: fp, Publisher: pub, Clock: newFakeClock(), PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(publishJob(t, t.TempDir(), 7, "rank", "77")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := q.Status(); st.Pending != 0 || len(fp.calls) != 0 || strings.Join(pub.calls, ",") != "upload rank,done" {
		t.Fatalf("status %+v pushes %v calls %v", st, fp.calls, pub.calls)
	}
}

// TestPublishJobNeedsPublisherAndSweep: a publish job without a Publisher
// stops the queue (needs attention) instead of pushing nothing; Drop
// releases its held file, and Open sweeps held files no job refers to.
func TestPublishJobNeedsPublisherAndSweep(t *testing.T) {
	qdir := t.TempDir()
	q, err := Open(qdir, Options{Pusher: &fakePusher{}, Clock: newFakeClock(), PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(publishJob(t, t.TempDir(), 1, "x", "11")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.step(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, _ := q.Status()
	if st.State != StateNeedsAttention || !strings.Contains(st.LastError, "Publisher") {
		t.Fatalf("status %+v", st)
	}
	orphan := filepath.Join(qdir, holdDir, "orphan.wtxt")
	os.WriteFile(orphan, []byte("x"), 0o644)
	if _, err := Open(qdir, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("orphan held file not swept: %v", err)
	}
	if es, _ := os.ReadDir(filepath.Join(qdir, holdDir)); len(es) != 1 {
		t.Fatalf("the queued job's held file was swept: %v", es)
	}
	if err := q.Drop("snapshots", 1); err != nil {
		t.Fatal(err)
	}
	if es, _ := os.ReadDir(filepath.Join(qdir, holdDir)); len(es) != 0 {
		t.Fatalf("Drop left held files: %v", es)
	}
}

// TestPublishersByKind: Publishers routes by kind; an unknown kind stops
// the queue.
func TestPublishersByKind(t *testing.T) {
	rank := &stepPublisher{noCommit: true}
	q, err := Open(t.TempDir(), Options{Pusher: &fakePusher{}, Publisher: Publishers{"oci-rank": rank}, Clock: newFakeClock(), PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	j := publishJob(t, t.TempDir(), 1, "r", "11")
	j.Publish.Kind = "oci-rank"
	if err := q.Enqueue(j); err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(publishJob(t, t.TempDir(), 2, "g", "22")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.step(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, _ := q.Status()
	if st.Pending != 1 || st.State != StateNeedsAttention || !strings.Contains(st.LastError, `no publisher for kind "oci-generation"`) || len(rank.calls) != 2 {
		t.Fatalf("status %+v, rank calls %v", st, rank.calls)
	}
}
