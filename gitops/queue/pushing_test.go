package queue

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/testutil"
)

// observedPusher passes pushes through and reports, after the queue's own
// callback has run (so PushingFile is written), each progress state and
// each push's result.
type observedPusher struct {
	inner  gitops.Pusher
	events chan gitops.PushProgress
	done   chan error
}

func (o *observedPusher) Push(ctx context.Context, req gitops.PushRequest) error {
	orig := req.Progress
	req.Progress = func(p gitops.PushProgress) {
		orig(p)
		select {
		case o.events <- p:
		default:
		}
	}
	err := o.inner.Push(ctx, req)
	o.done <- err
	return err
}

// idleClock is the real clock that reports each After (Run calls it when
// it waits after a step) and never fires: the test cancels Run.
type idleClock struct{ waits chan time.Duration }

func (c idleClock) Now() time.Time { return time.Now() }

func (c idleClock) After(d time.Duration) <-chan time.Time {
	select {
	case c.waits <- d:
	default:
	}
	return make(chan time.Time)
}

// heldRemote returns a bare remote holding every push (gittest.HeldRemote).
func heldRemote(t *testing.T) (url, started, release string) {
	return gittest.HeldRemote(t, t.TempDir())
}

// TestStatusShowsHeldPush: while a real git push waits in the remote's
// pre-receive hook, Status (from another Queue on the same directory, as
// `snapd status` opens it) shows the generation, the attempt, the phase,
// git's objects and bytes written and the kill limits; once the push is
// done the record is gone.
func TestStatusShowsHeldPush(t *testing.T) {
	url, started, release := heldRemote(t)
	repoDir, job := oneGeneration(t)
	gp, err := gitops.NewPusher(repoDir, gitops.Remote{URL: url, Timeout: time.Hour, Stall: 30 * time.Minute, MinRate: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	op := &observedPusher{inner: gp, events: make(chan gitops.PushProgress, 1024), done: make(chan error, 4)}
	dir := filepath.Join(t.TempDir(), "q")
	clock := idleClock{waits: make(chan time.Duration, 16)}
	q, err := Open(dir, Options{Pusher: op, PollInterval: time.Hour, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(job); err != nil {
		t.Fatal(err)
	}
	guard, stop := context.WithTimeout(context.Background(), testutil.Guard)
	defer stop()
	ctx, cancel := context.WithCancel(guard)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- q.Run(ctx) }()

	// The hook runs: the pack has been sent.
	held := make(chan error, 1)
	go func() { _, err := os.ReadFile(started); held <- err }()
	select {
	case err := <-held:
		if err != nil {
			t.Fatal(err)
		}
	case err := <-op.done:
		t.Fatalf("push ended before the hook held it: %v", err)
	case <-guard.Done():
		t.Fatal("the remote's hook never ran")
	}
	// git's last "Writing objects" state has reached the queue.
	var last gitops.PushProgress
	for last.ObjectsTotal == 0 || last.ObjectsSent != last.ObjectsTotal {
		select {
		case last = <-op.events:
		case <-guard.Done():
			t.Fatalf("no complete Writing objects state; last %+v", last)
		}
	}
	reader, err := Open(dir, Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := reader.Status()
	if err != nil {
		t.Fatal(err)
	}
	p := st.Pushing
	if p == nil {
		t.Fatalf("no push in progress in %+v", st)
	}
	if p.Branch != job.Branch || p.Gen != job.Gen || p.Commit != job.Commit || p.Attempt != 1 || p.Phase != gitops.PhasePush ||
		p.Since.IsZero() || p.PhaseSince.Before(p.Since) || p.Updated.Before(p.PhaseSince) {
		t.Fatalf("pushing %+v", p)
	}
	// The push phase's limit: the base timeout + the bytes to send at MinRate.
	wantLimit := time.Hour + time.Duration(float64(p.SendBytes)/float64(1<<20)*float64(time.Second))
	if p.SendBytes <= 0 || p.TimeoutSeconds != wantLimit.Seconds() || !p.Deadline.Equal(p.PhaseSince.Add(wantLimit)) || p.StallSeconds != 1800 {
		t.Fatalf("limits %+v, want timeout %v", p, wantLimit)
	}
	if p.ObjectsTotal < 3 || p.ObjectsSent != p.ObjectsTotal || p.BytesSent <= 0 {
		t.Fatalf("progress %+v", p)
	}
	t.Logf("pushing: %+v", *p)

	// Release the hook: the push completes, the record goes with it.
	if err := os.WriteFile(release, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-op.done:
		if err != nil {
			t.Fatalf("push: %v", err)
		}
	case <-guard.Done():
		t.Fatal("push did not finish after the release")
	}
	select { // Run has finished the step (the job is done) and waits
	case <-clock.waits:
	case <-guard.Done():
		t.Fatal("Run did not go idle after the push")
	}
	cancel()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if st, err := reader.Status(); err != nil || st.Pushing != nil || st.Pending != 0 {
		t.Fatalf("after the push: %+v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(dir, PushingFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s left: %v", PushingFile, err)
	}
}

// TestOpenRemovesStalePushing: a record a killed process left is removed
// by the next Open that runs the queue (not by a Shared one).
func TestOpenRemovesStalePushing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	if _, err := Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, PushingFile)
	if err := os.WriteFile(p, []byte(`{"branch":"snapshots","gen":3,"attempt":1,"since":"2026-01-01T00:00:00Z","phase":"push","phase_since":"2026-01-01T00:00:00Z","updated":"2026-01-01T00:00:00Z"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	shared, err := Open(dir, Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := shared.Status(); err != nil || st.Pushing == nil || st.Pushing.Gen != 3 {
		t.Fatalf("shared view: %+v %v", st, err)
	}
	if _, err := Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	if st, err := shared.Status(); err != nil || st.Pushing != nil {
		t.Fatalf("after Open: %+v %v", st, err)
	}
}
