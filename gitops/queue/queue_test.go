package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/testutil"
)

// fakeClock is virtual time that moves only when the test moves it: by
// Advance, or by fireNext, which waits (an event, not a duration) until
// the Run loop parks on the clock and then jumps to the end of that wait.
// Run only ever waits on its newest After; an earlier one was abandoned
// (a kick woke Run), so only the newest is kept.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	wait   *clockWait    // Run's current wait, nil when none is pending
	parked chan struct{} // signalled when After registers a wait
}

type clockWait struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), parked: make(chan struct{}, 1)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &clockWait{at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		w.ch <- c.now
		return w.ch
	}
	c.wait = w
	select {
	case c.parked <- struct{}{}:
	default:
	}
	return w.ch
}

// Advance moves virtual time forward by d, ending a wait that is due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	if w := c.wait; w != nil && !w.at.After(c.now) {
		w.ch <- c.now
		c.wait = nil
	}
}

// waitParked blocks until Run waits on the clock (its step is done). The
// real-time bound only turns a hang into a test failure.
func (c *fakeClock) waitParked(t *testing.T, what string) {
	t.Helper()
	guard := time.NewTimer(testutil.Guard)
	defer guard.Stop()
	for {
		c.mu.Lock()
		parked := c.wait != nil
		c.mu.Unlock()
		if parked {
			return
		}
		select {
		case <-c.parked:
		case <-guard.C:
			t.Fatalf("%s: the queue never waited on its clock", what)
		}
	}
}

// fireNext waits until Run parks, then moves virtual time to the end of
// its wait and wakes it.
func (c *fakeClock) fireNext(t *testing.T, what string) {
	t.Helper()
	c.waitParked(t, what)
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.wait; w != nil {
		if w.at.After(c.now) {
			c.now = w.at
		}
		w.ch <- c.now
		c.wait = nil
	}
}

// producer commits generations into a local repository.
type producer struct {
	t    *testing.T
	repo *gitops.Repo
	dir  string
	prev string
	data []byte
	gen  uint64
}

func newProducer(t *testing.T) *producer {
	dir := t.TempDir()
	r, err := gitops.OpenRepo(filepath.Join(dir, "local.git"), gitops.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &producer{t: t, repo: r, dir: dir, data: gittest.Pseudo(1, 3000)}
}

// next commits the next generation and returns its queue job.
func (p *producer) next() Job {
	p.t.Helper()
	p.gen++
	p.data[int(p.gen*13)%len(p.data)] ^= 0x41
	w, mt := gittest.WTXT(p.gen, p.prev, []gittest.Array{{Name: "w", Data: p.data, Chunk: 512}})
	p.prev = mt
	path := gittest.WriteFile(p.t, p.dir, fmt.Sprintf("g%d.wtxt", p.gen), w)
	res, err := p.repo.Commit(context.Background(), gitops.Generation{WTXT: path})
	if err != nil {
		p.t.Fatal(err)
	}
	return Job{Branch: p.repo.Config().Branch, Gen: res.Gen, Commit: res.Commit.String(), Tag: res.Tag}
}

type harness struct {
	t     *testing.T
	prod  *producer
	srv   *gittest.HTTPRemote
	clock *fakeClock
	logs  *testutil.SyncBuffer
	qdir  string
	pr    gitops.Pusher
}

func newHarness(t *testing.T, remote gitops.Remote) *harness {
	h := &harness{t: t, prod: newProducer(t), srv: gittest.NewHTTPRemote(t), clock: newFakeClock(), logs: &testutil.SyncBuffer{}, qdir: filepath.Join(t.TempDir(), "queue")}
	remote.URL = h.srv.URL
	pr, err := gitops.NewPusher(h.prod.repo.Dir(), remote)
	if err != nil {
		t.Fatal(err)
	}
	h.pr = pr
	return h
}

func (h *harness) open(mod ...func(*Options)) *Queue {
	h.t.Helper()
	o := Options{
		Pusher: h.pr, Clock: h.clock, Rand: func() float64 { return 0.5 },
		BaseDelay: time.Second, MaxDelay: 30 * time.Second, PollInterval: 5 * time.Second, LogInterval: time.Minute,
		AuthRecheck: 2 * time.Minute,
		Logger:      slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	for _, m := range mod {
		m(&o)
	}
	q, err := Open(h.qdir, o)
	if err != nil {
		h.t.Fatal(err)
	}
	return q
}

// run starts q.Run and returns a stop function that cancels it and waits
// for Run to return.
func run(t *testing.T, q *Queue) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	var once sync.Once
	return func() { once.Do(func() { stopRun(t, cancel, done) }) }
}

func stopRun(t *testing.T, cancel func(), done chan error) {
	{
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(testutil.Guard):
			t.Fatal("Run did not return after cancel")
		}
	}
}

// drive runs virtual time forward, one wait of the Run loop at a time,
// until cond holds. Each step waits for an event (Run parking on the
// clock), never for a duration, so load cannot make it miss.
func (h *harness) drive(what string, cond func() bool) {
	h.t.Helper()
	driveClock(h.t, h.clock, what, cond)
}

func driveClock(t *testing.T, c *fakeClock, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 1_000_000 {
			t.Fatalf("%s: not reached after %d waits of the queue", what, i)
		}
		c.fireNext(t, what)
	}
}

// checkRemote asserts the remote branch holds generations 1..n in order,
// each exactly once, each tag on its commit, and that fsck is clean.
func (h *harness) checkRemote(n int) {
	h.t.Helper()
	out := gittest.Git(h.t, h.srv.Dir, "log", "--reverse", "--format=%(trailers:key=Snapd-Gen,valueonly)", "snapshots")
	gens := strings.Fields(out)
	if len(gens) != n {
		h.t.Fatalf("remote has %d generations, want %d: %v", len(gens), n, gens)
	}
	for i, g := range gens {
		if want := fmt.Sprintf("%06d", i+1); g != want {
			h.t.Fatalf("remote generation %d is %s, want %s", i, g, want)
		}
		tag := gittest.Git(h.t, h.srv.Dir, "rev-parse", "gen-"+g+"^{commit}")
		c := gittest.Git(h.t, h.srv.Dir, "rev-parse", fmt.Sprintf("snapshots~%d", n-1-i))
		if tag != c {
			h.t.Fatalf("tag gen-%s → %s, branch has %s", g, tag, c)
		}
	}
	h.srv.Fsck(h.t)
}

func remoteGens(dir string) int {
	out, err := gittest.GitRun(dir, "rev-list", "--count", "snapshots")
	if err != nil {
		return 0
	}
	var n int
	fmt.Sscan(out, &n)
	return n
}

// TestOutageTwentyGenerations: the remote answers 503 for a while during a
// 20-generation run; every generation arrives, in order, exactly once.
func TestOutageTwentyGenerations(t *testing.T) {
	h := newHarness(t, gitops.Remote{})
	q := h.open()
	stop := run(t, q)
	defer stop()
	var down time.Time
	for i := 1; i <= 20; i++ {
		if i == 5 {
			h.drive("generation 4 pushed", func() bool { return remoteGens(h.srv.Dir) == 4 })
			h.srv.SetMode(gittest.Down)
			down = h.clock.Now()
		}
		if err := q.Enqueue(h.prod.next()); err != nil {
			t.Fatal(err)
		}
		if i == 15 {
			// Three minutes of virtual outage: backoff grows to its
			// cap and warnings are rate-limited (LogInterval 1m).
			h.drive("retrying state", func() bool {
				st, _ := q.Status()
				return st.State == StateRetrying && st.Pending == 11 && !st.NextAttempt.IsZero() && h.clock.Now().Sub(down) >= 3*time.Minute
			})
			st, _ := q.Status()
			if !strings.Contains(st.LastError, "503") {
				t.Fatalf("status during outage: %+v", st)
			}
			h.srv.SetMode(gittest.Up)
		}
	}
	h.drive("all 20 generations", func() bool { return remoteGens(h.srv.Dir) == 20 })
	h.drive("empty queue", func() bool { st, _ := q.Status(); return st.Pending == 0 })
	stop()
	h.checkRemote(20)
	if got := h.srv.Applied.Load(); got != 20 {
		t.Fatalf("%d receive-pack requests applied, want exactly 20", got)
	}
	st, err := q.Status()
	if err != nil || st.State != StateOK || st.Pending != 0 || st.LastError != "" {
		t.Fatalf("final status %+v %v", st, err)
	}
	logs := h.logs.String()
	warns := strings.Count(logs, "level=WARN")
	if warns == 0 || !strings.Contains(logs, "push recovered") {
		t.Fatalf("outage not logged:\n%s", logs)
	}
	// Rate limiting: failures happened more often than warnings.
	if !strings.Contains(logs, "suppressed=") || warns > 12 {
		t.Fatalf("%d warnings for the outage:\n%s", warns, logs)
	}
}

// TestAuthFailureStopsAndResumes: a 401 stops pushes with needs-attention;
// once the credential is fixed the periodic re-check resumes them, without
// hammering the remote meanwhile.
func TestAuthFailureStopsAndResumes(t *testing.T) {
	const secret = "right-token-0123456789"
	tokDir := t.TempDir()
	tokenFile := gittest.WriteFile(t, tokDir, "token", []byte("expired-token-zzz\n"))
	h := newHarness(t, gitops.Remote{TokenFile: tokenFile})
	h.srv.RequireToken(secret)
	q := h.open()
	for range 3 {
		if err := q.Enqueue(h.prod.next()); err != nil {
			t.Fatal(err)
		}
	}
	start := h.clock.Now()
	stop := run(t, q)
	defer stop()
	h.drive("needs-attention", func() bool { st, _ := q.Status(); return st.State == StateNeedsAttention })
	st, _ := q.Status()
	if st.Pending != 3 || st.Hold == nil || st.Hold.Kind != "authentication failed" || st.Hold.Gen != 1 || !strings.Contains(st.LastError, "authentication") {
		t.Fatalf("status %+v hold %+v", st, st.Hold)
	}
	// Stopped: while held, only one re-check (one info/refs request) per
	// AuthRecheck of virtual time. Ten virtual minutes, driven wait by
	// wait, then the last step is finished (Run parked again).
	h.drive("10 minutes held", func() bool { return h.clock.Now().Sub(start) >= 10*time.Minute })
	h.clock.waitParked(t, "held")
	elapsed := h.clock.Now().Sub(start)
	// (×2: git asks without the credential first, then with it.)
	if n, max := h.srv.Requests.Load(), 2*(int32(elapsed/(2*time.Minute))+2); n > max || elapsed < 4*time.Minute {
		t.Fatalf("%d requests in %v of virtual time (max %d)", n, elapsed, max)
	}
	if st, _ := q.Status(); st.State != StateNeedsAttention || st.Hold.Checked.IsZero() || !st.Hold.Since.Equal(start) {
		t.Fatalf("after re-checks: %+v", st.Hold)
	}
	gittest.WriteFile(t, tokDir, "token", []byte(secret+"\n"))
	h.drive("3 generations", func() bool { return remoteGens(h.srv.Dir) == 3 })
	h.drive("empty queue", func() bool { st, _ := q.Status(); return st.Pending == 0 && st.State == StateOK })
	stop()
	h.checkRemote(3)
	for _, leak := range []string{secret, "expired-token-zzz"} {
		if strings.Contains(h.logs.String(), leak) {
			t.Fatal("logs contain a token")
		}
	}
	if !strings.Contains(h.logs.String(), "queue resumed") {
		t.Fatalf("no resume logged:\n%s", h.logs.String())
	}
}

// TestAuthFailureRetryFromCLI: with automatic re-checks off, a stop lasts
// until another process (the CLI) calls Retry.
func TestAuthFailureRetryFromCLI(t *testing.T) {
	const secret = "tok-abc"
	tokDir := t.TempDir()
	tokenFile := gittest.WriteFile(t, tokDir, "token", []byte("bad\n"))
	h := newHarness(t, gitops.Remote{TokenFile: tokenFile})
	h.srv.RequireToken(secret)
	q := h.open(func(o *Options) { o.AuthRecheck = -1 })
	if err := q.Enqueue(h.prod.next()); err != nil {
		t.Fatal(err)
	}
	stop := run(t, q)
	defer stop()
	h.drive("needs-attention", func() bool { st, _ := q.Status(); return st.State == StateNeedsAttention })
	gittest.WriteFile(t, tokDir, "token", []byte(secret+"\n"))
	n := h.srv.Requests.Load()
	t0 := h.clock.Now()
	h.drive("an hour held", func() bool { return h.clock.Now().Sub(t0) >= time.Hour })
	h.clock.waitParked(t, "held")
	if h.srv.Requests.Load() != n {
		t.Fatal("held queue kept pushing")
	}
	cli, err := Open(h.qdir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Retry(); err != nil {
		t.Fatal(err)
	}
	h.drive("generation 1", func() bool { return remoteGens(h.srv.Dir) == 1 })
	h.drive("empty queue", func() bool { st, _ := q.Status(); return st.Pending == 0 && st.State == StateOK })
	stop()
	h.checkRemote(1)
}

// TestDivergedRemote: a foreign commit on the remote stops the queue with
// "remote diverged" and nothing is overwritten.
func TestDivergedRemote(t *testing.T) {
	h := newHarness(t, gitops.Remote{})
	q := h.open()
	stop := run(t, q)
	defer stop()
	for range 2 {
		if err := q.Enqueue(h.prod.next()); err != nil {
			t.Fatal(err)
		}
	}
	h.drive("2 generations", func() bool { return remoteGens(h.srv.Dir) == 2 })
	tree := strings.TrimSpace(gittest.Git(t, h.srv.Dir, "rev-parse", "snapshots^{tree}"))
	foreign := strings.TrimSpace(gittest.Git(t, h.srv.Dir, "-c", "user.name=x", "-c", "user.email=x@example.com", "commit-tree", tree, "-p", "snapshots", "-m", "manual edit"))
	gittest.Git(t, h.srv.Dir, "update-ref", "refs/heads/snapshots", foreign)
	if err := q.Enqueue(h.prod.next()); err != nil {
		t.Fatal(err)
	}
	h.drive("needs-attention", func() bool { st, _ := q.Status(); return st.State == StateNeedsAttention })
	st, _ := q.Status()
	if st.Hold.Kind != "remote diverged" || !strings.Contains(st.LastError, "remote diverged") || st.Pending != 1 {
		t.Fatalf("status %+v %+v", st, st.Hold)
	}
	stop()
	if got := strings.TrimSpace(gittest.Git(t, h.srv.Dir, "rev-parse", "snapshots")); got != foreign {
		t.Fatalf("remote head %s, want the foreign commit %s", got, foreign)
	}
	if _, err := gittest.GitRun(h.srv.Dir, "rev-parse", "--verify", "-q", "refs/tags/gen-000003"); err == nil {
		t.Fatal("gen 3 tag pushed")
	}
	h.srv.Fsck(t)
	// Retry without fixing: stops again, still nothing overwritten.
	if err := q.Retry(); err != nil {
		t.Fatal(err)
	}
	stop = run(t, q)
	h.drive("needs-attention again", func() bool { st, _ := q.Status(); return st.State == StateNeedsAttention })
	stop()
	// The operator drops the job: the hold goes with it.
	if err := q.Drop("snapshots", 3); err != nil {
		t.Fatal(err)
	}
	if st, _ := q.Status(); st.State != StateOK || st.Pending != 0 {
		t.Fatalf("after drop: %+v", st)
	}
	if err := q.Drop("snapshots", 3); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second drop: %v", err)
	}
}

// TestAbandonMidPush: the queue is abandoned while the remote has applied a
// push but not answered; a new queue on the same directory finishes the
// run with every generation once and the lost push not repeated.
func TestAbandonMidPush(t *testing.T) {
	h := newHarness(t, gitops.Remote{})
	q1 := h.open()
	for range 3 {
		if err := q1.Enqueue(h.prod.next()); err != nil {
			t.Fatal(err)
		}
	}
	h.srv.SetMode(gittest.HangAck)
	stop := run(t, q1)
	<-h.srv.Hung // gen 1 applied on the remote, response held
	stop()       // "kill" mid-push
	if st, _ := q1.Status(); st.Pending != 3 {
		t.Fatalf("pending after abandon: %+v", st)
	}
	h.srv.SetMode(gittest.Up)
	q2 := h.open()
	for range 2 {
		if err := q2.Enqueue(h.prod.next()); err != nil {
			t.Fatal(err)
		}
	}
	stop = run(t, q2)
	h.drive("5 generations", func() bool { return remoteGens(h.srv.Dir) == 5 })
	h.drive("empty queue", func() bool { st, _ := q2.Status(); return st.Pending == 0 })
	stop()
	h.checkRemote(5)
	if got := h.srv.Applied.Load(); got != 5 {
		t.Fatalf("%d pushes applied, want 5 (the abandoned one not repeated)", got)
	}
}

// TestLostAck: the remote applied the push but the answer was a 502; the
// retry detects it and the job completes without a second push.
func TestLostAck(t *testing.T) {
	h := newHarness(t, gitops.Remote{})
	q := h.open()
	if err := q.Enqueue(h.prod.next()); err != nil {
		t.Fatal(err)
	}
	h.srv.SetMode(gittest.LoseAck)
	stop := run(t, q)
	defer stop()
	// The remote keeps losing acks: the retry must not need one.
	h.drive("empty queue", func() bool { st, _ := q.Status(); return st.Pending == 0 })
	stop()
	h.checkRemote(1)
	if got := h.srv.Applied.Load(); got != 1 {
		t.Fatalf("%d pushes applied, want 1", got)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "push failed; will retry") || !strings.Contains(logs, "502") {
		t.Fatalf("the lost ack was not a failure:\n%s", logs)
	}
}

type fakePusher struct {
	mu    sync.Mutex
	calls []string
	added []int64 // each call's PushRequest.Added
	err   error
}

func (f *fakePusher) Push(_ context.Context, r gitops.PushRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Branch+"@"+r.Commit.String()[:4])
	f.added = append(f.added, r.Added)
	return f.err
}

// TestJobAddedReachesPush: a job's Added (what its commit added, the
// push's send estimate) is kept in its file and handed to the Pusher.
func TestJobAddedReachesPush(t *testing.T) {
	dir := t.TempDir()
	q, err := Open(dir, Options{Clock: newFakeClock()})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(Job{Branch: "a", Gen: 1, Commit: commitOf(1), Added: 123 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(Job{Branch: "a", Gen: 2, Commit: commitOf(2)}); err != nil {
		t.Fatal(err)
	}
	fp := &fakePusher{}
	q, err = Open(dir, Options{Pusher: fp, Clock: newFakeClock(), PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(fp.added) != 2 || fp.added[0] != 123<<20 || fp.added[1] != 0 {
		t.Fatalf("pushes got Added %v, want [%d 0]", fp.added, 123<<20)
	}
}

func commitOf(i int) string { return fmt.Sprintf("%040x", i) }

// TestAfterPush: AfterPush runs once per successful push, after the job's
// file is gone and before the next job's push; a failed push calls it
// not.
func TestAfterPush(t *testing.T) {
	clock := newFakeClock()
	fp := &fakePusher{}
	var q *Queue
	var seen []string
	after := func(_ context.Context, j Job) {
		jobs, err := q.List()
		if err != nil {
			t.Fatal(err)
		}
		fp.mu.Lock()
		pushes := len(fp.calls)
		fp.mu.Unlock()
		seen = append(seen, fmt.Sprintf("gen %d: %d jobs left, %d pushes", j.Gen, len(jobs), pushes))
	}
	q, err := Open(t.TempDir(), Options{Pusher: fp, Clock: clock, PollInterval: time.Hour, AfterPush: after, BaseDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for g := 1; g <= 2; g++ {
		if err := q.Enqueue(Job{Branch: "a", Gen: uint64(g), Commit: commitOf(g)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen, "; "); got != "gen 1: 1 jobs left, 1 pushes; gen 2: 0 jobs left, 2 pushes" {
		t.Fatalf("AfterPush saw: %s", got)
	}
	fp.err = &gitops.PushError{Kind: gitops.ErrRetryable, Err: errors.New("503")}
	if err := q.Enqueue(Job{Branch: "a", Gen: 3, Commit: commitOf(3)}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || len(fp.calls) != 3 {
		t.Fatalf("after a failed push: AfterPush calls %v, pushes %v", seen, fp.calls)
	}
}

func TestEnqueueListOrderAndFiles(t *testing.T) {
	dir := t.TempDir()
	q, err := Open(dir, Options{Clock: newFakeClock()})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []uint64{10, 9, 100, 2} {
		if err := q.Enqueue(Job{Branch: "team/a", Gen: g, Commit: commitOf(int(g))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Enqueue(Job{Branch: "b", Gen: 1, Commit: commitOf(1), Tag: "gen-000001"}); err != nil {
		t.Fatal(err)
	}
	// Idempotent / conflicting enqueue.
	if err := q.Enqueue(Job{Branch: "team/a", Gen: 9, Commit: commitOf(9)}); err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(Job{Branch: "team/a", Gen: 9, Commit: commitOf(99)}); !errors.Is(err, ErrConflict) {
		t.Fatalf("conflict: %v", err)
	}
	for _, bad := range []Job{{Branch: "", Commit: commitOf(1)}, {Branch: "a..b", Commit: commitOf(1)}, {Branch: "a", Commit: "xyz"}, {Branch: "a", Commit: strings.ToUpper(commitOf(10))}, {Branch: "a", Commit: commitOf(1), Tag: "bad tag"}} {
		if err := q.Enqueue(bad); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	jobs, err := q.List()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID())
	}
	if got := strings.Join(ids, " "); got != "b@1 team/a@2 team/a@9 team/a@10 team/a@100" {
		t.Fatalf("order: %s", got)
	}
	// One file per job, named by zero-padded generation, readable JSON.
	p := filepath.Join(dir, "jobs", "team%2Fa", "00000000000000000009.json")
	b, err := os.ReadFile(p)
	if err != nil || !bytes.Contains(b, []byte(`"commit":"`+commitOf(9)+`"`)) {
		t.Fatalf("job file: %s %v", b, err)
	}
	// A stray temp file is swept; a corrupt job file is reported.
	gittest.WriteFile(t, filepath.Dir(p), ".snapd-tmp-x", []byte("junk"))
	if _, err := Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(p), ".snapd-tmp-x")); !os.IsNotExist(err) {
		t.Fatal("temp file not swept")
	}
	gittest.WriteFile(t, filepath.Dir(p), "00000000000000000011.json", []byte(`{"branch":"team/a","gen":12,"commit":"`+commitOf(1)+`"}`))
	if _, err := q.List(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("mismatched gen: %v", err)
	}
	gittest.WriteFile(t, filepath.Dir(p), "00000000000000000011.json", []byte(`{"branch":`))
	if _, err := q.List(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated job: List: %v", err)
	}
	// Status reports it instead of failing (TestStatusListsCorruptJob).
	if st, err := q.Status(); err != nil || st.State != StateCorrupt || len(st.Corrupt) != 1 {
		t.Fatalf("truncated job: Status %+v, %v", st, err)
	}
	os.Remove(filepath.Join(filepath.Dir(p), "00000000000000000011.json"))
	if br, g, err := ParseJobID("team/a@10"); err != nil || br != "team/a" || g != 10 {
		t.Fatalf("ParseJobID: %s %d %v", br, g, err)
	}
	for _, bad := range []string{"nogen", "@1", "a@x", "a@-1"} {
		if _, _, err := ParseJobID(bad); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("ParseJobID(%q): %v", bad, err)
		}
	}
}

func TestBackoffScheduleAndOrder(t *testing.T) {
	clock := newFakeClock()
	fp := &fakePusher{err: &gitops.PushError{Kind: gitops.ErrRetryable, Err: errors.New("503")}}
	q, err := Open(t.TempDir(), Options{Pusher: fp, Clock: clock, Rand: func() float64 { return 0 }, BaseDelay: time.Second, MaxDelay: 8 * time.Second, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Jitter bounds: [d/2, d).
	for n, want := range map[int]time.Duration{1: 500 * time.Millisecond, 2: time.Second, 3: 2 * time.Second, 4: 4 * time.Second, 5: 4 * time.Second, 60: 4 * time.Second} {
		if got := q.retry.Delay(n); got != want {
			t.Errorf("backoff(%d) = %v, want %v", n, got, want)
		}
	}
	q.retry.Rand = func() float64 { return 0.999999 }
	if got := q.retry.Delay(100); got >= 8*time.Second || got < 7*time.Second {
		t.Errorf("backoff(100) = %v", got)
	}
	q.retry.Rand = func() float64 { return 0 }
	for g := 1; g <= 3; g++ {
		if err := q.Enqueue(Job{Branch: "a", Gen: uint64(g), Commit: commitOf(g)}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	// First step: only the branch head is tried; it is rescheduled.
	wait, err := q.step(ctx)
	if err != nil || wait != 500*time.Millisecond || len(fp.calls) != 1 {
		t.Fatalf("step: wait %v err %v calls %v", wait, err, fp.calls)
	}
	st, _ := q.Status()
	if st.State != StateRetrying || !st.NextAttempt.Equal(clock.Now().Add(500*time.Millisecond)) || st.Pending != 3 {
		t.Fatalf("status %+v", st)
	}
	// Not due yet: no push.
	if _, err := q.step(ctx); err != nil || len(fp.calls) != 1 {
		t.Fatalf("pushed before due: %v", fp.calls)
	}
	clock.Advance(500 * time.Millisecond)
	if wait, _ := q.step(ctx); wait != time.Second || len(fp.calls) != 2 {
		t.Fatalf("second failure: wait %v calls %v", wait, fp.calls)
	}
	// Recovery: all three in order.
	fp.err = nil
	clock.Advance(time.Second)
	if _, err := q.step(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(fp.calls[2:], " "); got != "a@0000 a@0000 a@0000" || len(fp.calls) != 5 {
		t.Fatalf("calls %v", fp.calls)
	}
	if st, _ := q.Status(); st.State != StateOK || st.Pending != 0 {
		t.Fatalf("status %+v", st)
	}
	// Run misuse.
	q2, _ := Open(t.TempDir(), Options{})
	if err := q2.Run(ctx); !errors.Is(err, ErrNoPusher) {
		t.Fatalf("Run without pusher: %v", err)
	}
}

func TestNeedsAttentionFromPlainPusher(t *testing.T) {
	clock := newFakeClock()
	fp := &fakePusher{err: &gitops.PushError{Kind: gitops.ErrRejected, Err: errors.New("protected branch")}}
	q, _ := Open(t.TempDir(), Options{Pusher: fp, Clock: clock})
	q.Enqueue(Job{Branch: "a", Gen: 1, Commit: commitOf(1)})
	q.Enqueue(Job{Branch: "b", Gen: 1, Commit: commitOf(2)})
	if _, err := q.step(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, _ := q.Status()
	if st.State != StateNeedsAttention || st.Hold.Kind != "rejected by remote" || len(fp.calls) != 1 {
		t.Fatalf("status %+v calls %v", st, fp.calls)
	}
	// Held: a step pushes nothing, for any branch.
	q.step(context.Background())
	if len(fp.calls) != 1 {
		t.Fatalf("held queue pushed: %v", fp.calls)
	}
	fp.err = nil
	if err := q.Retry(); err != nil {
		t.Fatal(err)
	}
	q.step(context.Background())
	if st, _ := q.Status(); st.State != StateOK || st.Pending != 0 || len(fp.calls) != 3 {
		t.Fatalf("after retry %+v %v", st, fp.calls)
	}
}

// TestKill9MidPush runs the queue in a child process (this test binary
// re-executed), SIGKILLs it while the remote holds the answer to an applied
// push, and finishes the run with a new queue on the same directory.
func TestKill9MidPush(t *testing.T) {
	if testing.Short() {
		t.Skip("re-exec test")
	}
	h := newHarness(t, gitops.Remote{})
	q := h.open()
	for range 3 {
		if err := q.Enqueue(h.prod.next()); err != nil {
			t.Fatal(err)
		}
	}
	h.srv.SetMode(gittest.HangAck)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Guard)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestQueueChild$", "-test.v")
	cmd.Env = append(os.Environ(), "SNAPD_QUEUE_CHILD="+h.qdir+"\n"+h.prod.repo.Dir()+"\n"+h.srv.URL)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.srv.Hung:
	case <-ctx.Done():
		t.Fatalf("child never pushed:\n%s", out.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatalf("child exited normally:\n%s", out.String())
	}
	h.srv.SetMode(gittest.Up)
	q2 := h.open()
	if err := q2.Enqueue(h.prod.next()); err != nil {
		t.Fatal(err)
	}
	stop := run(t, q2)
	h.drive("4 generations", func() bool { return remoteGens(h.srv.Dir) == 4 })
	h.drive("empty queue", func() bool { st, _ := q2.Status(); return st.Pending == 0 })
	stop()
	h.checkRemote(4)
	if got := h.srv.Applied.Load(); got != 4 {
		t.Fatalf("%d pushes applied, want 4", got)
	}
}

// TestQueueChild is the child process of TestKill9MidPush.
func TestQueueChild(t *testing.T) {
	env := os.Getenv("SNAPD_QUEUE_CHILD")
	if env == "" {
		t.Skip("only run as the child of TestKill9MidPush")
	}
	f := strings.Split(env, "\n")
	pr, err := gitops.NewPusher(f[1], gitops.Remote{URL: f[2]})
	if err != nil {
		t.Fatal(err)
	}
	q, err := Open(f[0], Options{Pusher: pr, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Guard)
	defer cancel()
	q.Run(ctx) // killed by the parent long before the timeout
}

// TestSharedOpenKeepsTempFiles: an operator tool opening the queue of a
// running daemon must not sweep the daemon's in-progress writes; the
// owner's Open does sweep leftovers.
func TestSharedOpenKeepsTempFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, atomicfile.TempPrefix+"job-in-progress")
	if err := os.WriteFile(tmp, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	q, err := Open(dir, Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); err != nil {
		t.Fatalf("shared open removed a temp file: %v", err)
	}
	if st, err := q.Status(); err != nil || st.State != StateOK || st.Pending != 0 {
		t.Fatalf("status %+v %v", st, err)
	}
	if _, err := Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("owner's open kept a stale temp file: %v", err)
	}
}

// TestSharedOpenCreatesNothing: an operator tool's open of a queue
// directory without jobs/ reads an empty queue and creates nothing; a
// missing directory is an error, not created either.
func TestSharedOpenCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	q, err := Open(dir, Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := q.Status(); err != nil || st.State != StateOK || st.Pending != 0 {
		t.Fatalf("status %+v %v", st, err)
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Fatalf("shared open created %v", es)
	}
	missing := filepath.Join(dir, "none")
	if _, err := Open(missing, Options{Shared: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing dir: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("shared open created the missing directory")
	}
}

// TestStatusListsCorruptJob: a job file that does not parse makes Status
// report StateCorrupt with the file and the parse error (not fail), the
// readable jobs still counted; List still fails with ErrCorrupt.
func TestStatusListsCorruptJob(t *testing.T) {
	dir := t.TempDir()
	q, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for gen := uint64(1); gen <= 3; gen++ {
		if err := q.Enqueue(Job{Branch: "b", Gen: gen, Commit: strings.Repeat("0a", 20), Enqueued: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	bad := filepath.Join(dir, jobsDir, "b", fmt.Sprintf("%020d%s", 2, jobExt))
	if _, err := os.Stat(bad); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	shared, err := Open(dir, Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := shared.Status()
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if st.State != StateCorrupt || st.Pending != 2 || len(st.Corrupt) != 1 || st.Corrupt[0].File != bad || !strings.Contains(st.Corrupt[0].Error, "invalid character") {
		t.Fatalf("status %+v", st)
	}
	if _, err := shared.List(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("List: %v, want ErrCorrupt", err)
	}
}
