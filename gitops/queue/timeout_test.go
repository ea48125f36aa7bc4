package queue

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/testutil"
)

// virtClock advances its time by d at every After(d) and fires after a
// real millisecond, so backoff schedules run at once.
type virtClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *virtClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *virtClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return time.After(time.Millisecond)
}

// oneGeneration commits one small generation and returns its job.
func oneGeneration(t *testing.T) (repoDir string, j Job) {
	t.Helper()
	dir := t.TempDir()
	r, err := gitops.OpenRepo(filepath.Join(dir, "local.git"), gitops.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := gittest.WTXT(1, "", []gittest.Array{{Name: "w", Data: gittest.Pseudo(7, 2000), Chunk: 512}})
	res, err := r.Commit(context.Background(), gitops.Generation{WTXT: gittest.WriteFile(t, dir, "g1.wtxt", w)})
	if err != nil {
		t.Fatal(err)
	}
	return r.Dir(), Job{Branch: r.Config().Branch, Gen: res.Gen, Commit: res.Commit.String(), Tag: res.Tag}
}

// TestStalledPushRetriesThenNeedsAttention: a remote that accepts and
// never answers makes each attempt end by the stall watchdog (a retry
// with a logged reason); after MaxTimeouts consecutive timeouts the queue
// stops as needs-attention, and Status says so.
func TestStalledPushRetriesThenNeedsAttention(t *testing.T) {
	url, _ := gittest.SilentRemote(t)
	repoDir, job := oneGeneration(t)
	pr, err := gitops.NewPusher(repoDir, gitops.Remote{URL: url, Stall: 200 * time.Millisecond, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.SyncBuffer{}
	q, err := Open(filepath.Join(t.TempDir(), "q"), Options{Pusher: pr, Clock: &virtClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		Rand: func() float64 { return 0 }, BaseDelay: time.Second, MaxDelay: time.Minute, PollInterval: time.Minute,
		AuthRecheck: -1, MaxTimeouts: 2, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(job); err != nil {
		t.Fatal(err)
	}
	guard, stop := context.WithTimeout(context.Background(), testutil.Guard)
	defer stop()
	ctx, cancel := context.WithCancel(guard)
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	var st Status
	for {
		if st, err = q.Status(); err != nil {
			t.Fatal(err)
		}
		if st.State == StateNeedsAttention || guard.Err() != nil {
			break
		}
		select {
		case <-guard.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	if st.State != StateNeedsAttention || st.Hold == nil || st.Hold.Kind != gitops.ErrTimeout.Error() || !strings.Contains(st.LastError, "no progress for") {
		t.Fatalf("status %+v hold %+v", st, st.Hold)
	}
	jobs, _ := q.List()
	if len(jobs) != 1 || jobs[0].Timeouts != 2 || jobs[0].Attempts != 2 {
		t.Fatalf("jobs %+v", jobs)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}
	case <-guard.Done():
		t.Fatal("Run did not return after cancel")
	}
	// Checked once Run has returned: the hold is persisted before its
	// log line is written.
	if !strings.Contains(logs.String(), "push failed; will retry") || !strings.Contains(logs.String(), "needs attention") {
		t.Fatalf("logs:\n%s", logs.String())
	}
	// Retry clears the stop and the timeout count.
	if err := q.Retry(); err != nil {
		t.Fatal(err)
	}
	if jobs, _ := q.List(); jobs[0].Timeouts != 0 {
		t.Fatalf("after retry: %+v", jobs[0])
	}
}

// TestShutdownDuringStalledPush: cancelling Run (the daemon's SIGTERM)
// while git waits on a silent remote with long timeouts returns at once
// and leaves the job queued for the next start.
func TestShutdownDuringStalledPush(t *testing.T) {
	url, accepted := gittest.SilentRemote(t)
	repoDir, job := oneGeneration(t)
	pr, err := gitops.NewPusher(repoDir, gitops.Remote{URL: url, Stall: time.Hour, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	q, err := Open(filepath.Join(t.TempDir(), "q"), Options{Pusher: pr})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(job); err != nil {
		t.Fatal(err)
	}
	guard, stop := context.WithTimeout(context.Background(), testutil.Guard)
	defer stop()
	ctx, cancel := context.WithCancel(guard)
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	select {
	case <-accepted:
	case <-guard.Done():
		t.Fatal("git never connected")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}
	case <-guard.Done():
		t.Fatal("Run did not return after cancel")
	}
	jobs, _ := q.List()
	if len(jobs) != 1 || jobs[0].Attempts != 0 {
		t.Fatalf("job after shutdown: %+v", jobs)
	}
}
