package pipeline

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/snapd-ml/snapd/formats/wtxt/chunkdiff"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/pipeline/ring"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// GenResult is what became of one request, as Wait and Results report it.
type GenResult struct {
	Gen       uint64    `json:"gen"`
	Source    string    `json:"source"`
	State     wal.State `json:"-"`
	StateName string    `json:"state"` // done or failed
	Error     string    `json:"error,omitempty"`
	// Redelivered: the generation was already in the ring (a request
	// delivered again after a crash, or requested again for the same
	// source and content); nothing was rewritten.
	Redelivered bool `json:"redelivered,omitempty"`
	// ResumedFrom: the generation is the first of a run resumed from this
	// generation (chained to it; the generations above it abandoned).
	ResumedFrom uint64 `json:"resumed_from,omitempty"`

	Format      string `json:"format,omitempty"` // codec of the source
	SourceBytes int64  `json:"source_bytes,omitempty"`
	WTXTBytes   int64  `json:"wtxt_bytes,omitempty"` // as stored (armored when encrypting)
	DeltaBytes  int64  `json:"delta_bytes,omitempty"`
	// BaseGen is the generation the delta (and merkle_prev) refer to; 0
	// for the first of a chain.
	BaseGen      uint64 `json:"base_gen,omitempty"`
	DeltaChunks  int64  `json:"delta_chunks,omitempty"`  // chunks of the target
	DeltaChanged int64  `json:"delta_changed,omitempty"` // chunks carried by the delta
	SHA256All    string `json:"sha256_all,omitempty"`
	MerklePrev   string `json:"merkle_prev,omitempty"`
	MerkleThis   string `json:"merkle_this,omitempty"`
	// NonFinite lists the float arrays in which this generation made
	// elements NaN or ±Inf that were not in BaseGen.
	NonFinite []chunkdiff.NonFiniteArray `json:"nonfinite,omitempty"`
	// Ring file paths.
	WTXT, Delta, WSUM, Seal string `json:"-"`
	// Skeleton and OCI: the generation was pushed to the registry by the
	// build (ocidirect.go): its ring skeleton and manifest; WTXT is "".
	Skeleton string         `json:"-"`
	OCI      *gitops.OCIRef `json:"-"`
	Picture  string         `json:"-"` // ring path of the diff picture (picture.go), "" when none
	// Git.
	Commit string `json:"commit,omitempty"`
	Tag    string `json:"tag,omitempty"`
	// Stages holds the time spent per stage.
	Stages map[string]time.Duration `json:"stages,omitempty"`
	// Latency is from the request's ts to completion.
	Latency time.Duration `json:"latency"`
}

// Daemon is the snapshot pipeline beside a training job. Lifecycle: New,
// Start, Close (Close also after a failed Start). No goroutine it starts
// outlives Close.
type Daemon struct {
	deps    Deps
	log     *slog.Logger
	m       *metrics
	gather  prometheus.Gatherer
	fs      FS
	now     func() time.Time
	ringDir string
	ring    *ring.Writer // the ring's files, through fs
	out     *outbox      // the Publisher and the resend queue

	cfgMu sync.Mutex
	cfg   Config

	lock     *StateLock
	consumer *wal.Consumer
	gens     *snapshot.GenStore

	headMu sync.Mutex
	head   ChainState

	resMu   sync.Mutex
	results map[uint64]*GenResult
	order   []uint64
	changed chan struct{}

	lifeMu   sync.Mutex
	started  bool
	closed   bool
	cancel   context.CancelFunc
	runDone  <-chan struct{} // closed when Close (or the Start context) stops the stages
	wg       sync.WaitGroup
	listener *wal.Listener
	srv      *http.Server
	addr     net.Addr
	chans    []chan *item
	runErr   error

	inflight inflight  // admitted requests not yet completed (/healthz)
	fin      finished  // how far the finish stage got (resume.go)
	act      *activity // stages in progress (activity.go)
}

// New opens the state directory (creating what is missing), takes its
// lock (ErrLocked if another daemon holds it), opens the WAL consumer and
// the generation store, and recovers from a crash: stale temp files,
// stale pins and ring entries newer than the persisted chain state (half
// written) are removed.
func New(cfg Config, deps Deps) (_ *Daemon, err error) {
	defer func() {
		if err != nil && deps.Lock != nil {
			deps.Lock.release()
		}
	}()
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if deps.Registry == nil {
		return nil, errors.New("pipeline: Deps.Registry is required")
	}
	d := &Deps{}
	*d = deps
	if d.PullRequest != nil {
		pr := *d.PullRequest
		if err := pr.check(d); err != nil {
			return nil, err
		}
		d.PullRequest = &pr
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.FS == nil {
		d.FS = OSFS{}
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	reg := d.Metrics
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("pipeline: metrics: %w", err)
	}
	dm := &Daemon{deps: *d, log: d.Logger, m: m, gather: reg, fs: d.FS, now: d.Now, cfg: cfg,
		ringDir: filepath.Join(cfg.StateDir, RingDir), results: map[uint64]*GenResult{}, changed: make(chan struct{})}
	dm.act = newActivity(cfg.StateDir, d.Now, d.Progress)
	dm.ring = ring.NewWriter(dm.ringDir, d.FS, d.Logger)
	if err := reg.Register(newQueueCollector(func() *queue.Queue { return dm.deps.Queue })); err != nil {
		return nil, fmt.Errorf("pipeline: metrics: %w", err)
	}
	if d.Publisher == nil && d.Repo != nil {
		d.Publisher = NewGitPublisher(d.Repo)
		dm.deps.Publisher = d.Publisher
	}
	if _, ranks := d.Publisher.(*RankPublisher); d.Publisher != nil && d.Repo == nil && !ranks {
		return nil, errors.New("pipeline: Deps.Publisher needs Deps.Repo")
	}
	dm.out = &outbox{pub: d.Publisher, repo: d.Repo, queue: d.Queue, log: d.Logger, now: d.Now, enqueued: m.pushEnqueued, fail: dm.fail}
	if a, ok := d.Publisher.(attacher); ok {
		if err := a.attach(dm, reg); err != nil {
			return nil, err
		}
	}
	if d.Pushes != nil {
		d.Pushes.attach(dm)
	}
	if c := d.RankCommitter; c != nil {
		if err := c.attach(reg); err != nil {
			return nil, fmt.Errorf("pipeline: metrics: %w", err)
		}
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	if err := dm.ring.Init(); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	if dm.lock = d.Lock; dm.lock == nil {
		if dm.lock, err = lockStateDir(cfg.StateDir); err != nil {
			return nil, err
		}
	}
	if err := dm.open(); err != nil {
		if dm.consumer != nil {
			dm.consumer.Close()
		}
		dm.lock.release()
		return nil, err
	}
	return dm, nil
}

func (d *Daemon) open() error {
	var err error
	if d.consumer, err = wal.OpenConsumer(filepath.Join(d.cfg.StateDir, WALDir), wal.ConsumerOptions{}); err != nil {
		return err
	}
	for _, r := range d.consumer.Repairs() {
		d.log.Warn("wal repaired", "error", r.Error())
	}
	if d.gens, err = snapshot.OpenGenStore(filepath.Join(d.cfg.StateDir, GensDir)); err != nil {
		return err
	}
	head, err := ReadChainState(d.cfg.StateDir)
	if err != nil {
		return err
	}
	d.head = *head
	d.m.lastGen.Set(float64(head.Gen))
	return d.recover()
}

// recover removes what a crash left behind.
func (d *Daemon) recover() error {
	for _, dir := range []string{d.cfg.StateDir, d.ringDir, filepath.Join(d.ringDir, plainDir)} {
		if n, err := atomicfile.Sweep(dir); err != nil {
			return fmt.Errorf("pipeline: sweep %s: %w", dir, err)
		} else if n > 0 {
			d.log.Info("recovery: removed stale temp files", "dir", dir, "count", n)
		}
	}
	// Not under a caller's context (New has none): the store's lock is
	// held only briefly by a trainer's Reclaim.
	if stale, err := d.gens.RecoverStalePins(context.Background()); err != nil {
		d.log.Warn("recovery: pins", "error", err)
	} else {
		for _, p := range stale {
			d.log.Info("recovery: removed stale pin", "gen", p.Gen, "pid", p.PID)
		}
	}
	entries, err := ListRing(d.ringDir)
	if err != nil {
		return err
	}
	// A pending resume (state.go) chains the next generation to
	// Resuming.From: entries above it are half-written too.
	limit := d.head.Gen
	if r := d.head.Resuming; r != nil {
		limit = r.From
	}
	for _, e := range entries {
		if e.Gen > limit || !e.Complete() {
			d.log.Info("recovery: removing half-written ring entry", "gen", e.Gen, "chain_head", d.head.Gen, "files", e.Files)
			if err := d.ring.Remove(e.Gen); err != nil {
				return fmt.Errorf("pipeline: recovery: %w", err)
			}
		}
	}
	// Plaintext copies (encryption) are kept for the chain head only.
	d.ring.PrunePlain(d.head.Gen)
	return nil
}

// config returns the current configuration (Reload may replace it).
func (d *Daemon) config() Config {
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	return d.cfg
}

// Reload replaces the configuration used from the next request on (keys,
// meta, writer options, ring size, retention, queue bound and policy). StateDir,
// the WAL listener settings and MetricsAddr need a restart; a change is an
// error.
func (d *Daemon) Reload(cfg Config) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	d.cfgMu.Lock()
	defer d.cfgMu.Unlock()
	old := d.cfg
	if cfg.StateDir != old.StateDir || cfg.MetricsAddr != old.MetricsAddr || cfg.PollInterval != old.PollInterval || cfg.NoNotify != old.NoNotify {
		return errors.New("pipeline: reload: state dir, metrics address and WAL settings need a restart")
	}
	d.cfg = cfg
	d.log.Info("configuration reloaded", "policy", cfg.Policy, "queue_max", cfg.QueueMax, "ring_keep", cfg.RingKeep, "workers", cfg.Workers)
	return nil
}

// Head returns the chain head.
func (d *Daemon) Head() ChainState {
	d.headMu.Lock()
	defer d.headMu.Unlock()
	return d.head
}

// Addr returns the metrics listener's address (nil when disabled or
// before Start).
func (d *Daemon) Addr() net.Addr {
	d.lifeMu.Lock()
	defer d.lifeMu.Unlock()
	return d.addr
}

// Start publishes ring generations a crash or failure kept from being
// published (Publisher.Recover), starts the metrics
// endpoint, the WAL listener, the stages and (with Deps.Queue) the resend
// queue. It returns at once; ctx bounds the daemon's life (Close also
// stops it).
func (d *Daemon) Start(ctx context.Context) error {
	d.lifeMu.Lock()
	defer d.lifeMu.Unlock()
	if d.started || d.closed {
		return errors.New("pipeline: Start called twice or after Close")
	}
	d.started = true
	ctx, d.cancel = context.WithCancel(ctx)
	d.runDone = ctx.Done()
	cfg := d.config()
	if ln := d.deps.MetricsListener; ln != nil || cfg.MetricsAddr != "" {
		if ln == nil {
			var err error
			if ln, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
				return fmt.Errorf("pipeline: metrics listener: %w", err)
			}
		}
		d.addr = ln.Addr()
		d.srv = &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			if err := d.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.log.Error("metrics server", "error", err)
			}
		}()
	}
	d.out.recover(ctx, d.ringDir, d.Head())
	d.fin.set(d.consumer.Cursor())

	recs := make(chan wal.Record, 1)
	admitted := make(chan *item)
	prepared := make(chan *item, 1)
	built := make(chan *item, 1)
	d.chans = []chan *item{admitted, prepared, built}
	d.listener = wal.NewListener(d.consumer.Dir(), d.consumer.Cursor(), wal.ListenerOptions{
		PollInterval: cfg.PollInterval, NoNotify: cfg.NoNotify,
		OnCorrupt: func(e *wal.CorruptError) { d.log.Warn("wal: skipped corrupt bytes", "error", e.Error()) },
		OnError:   func(err error) { d.log.Warn("wal listener", "error", err) },
	})
	if err := d.listener.Start(ctx, recs); err != nil {
		return err
	}
	stages := []func(){
		func() { d.admitStage(ctx, recs, admitted) },
		func() { d.prepareStage(ctx, admitted, prepared) },
		func() { d.buildStage(ctx, prepared, built) },
		func() { d.finishStage(ctx, built) },
	}
	for _, s := range stages {
		d.wg.Add(1)
		go func() { defer d.wg.Done(); s() }()
	}
	if d.deps.Queue != nil {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			if err := d.deps.Queue.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				d.log.Error("resend queue stopped", "error", err)
			}
		}()
	}
	if c := d.deps.RankCommitter; c != nil {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			c.run(ctx)
		}()
	}
	if d.deps.PullRequest != nil {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.pullRequestStage(ctx)
		}()
	}
	d.log.Info("snapd running", "state_dir", cfg.StateDir, "chain_head", d.Head().Gen, "wal_cursor", d.consumer.Cursor().String(), "policy", cfg.Policy, "workers", cfg.Workers)
	return nil
}

// Close stops the daemon: the generation in flight is abandoned cleanly
// (its temp files are removed, its pin released, its request stays in the
// WAL and is handled again after a restart); every finished generation is
// already persisted. It waits for every goroutine (or ctx) and releases
// the state directory.
func (d *Daemon) Close(ctx context.Context) error {
	d.lifeMu.Lock()
	if d.closed {
		d.lifeMu.Unlock()
		return nil
	}
	d.closed = true
	if d.cancel != nil {
		d.cancel()
	}
	l, srv := d.listener, d.srv
	d.lifeMu.Unlock()
	var errs []error
	if l != nil {
		errs = append(errs, l.Close(ctx))
	}
	if srv != nil {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		srv.Shutdown(sctx)
		cancel()
	}
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("pipeline: close: %w", ctx.Err())
	}
	for _, ch := range d.chans {
		for more := true; more; {
			select {
			case it := <-ch:
				it.release()
			default:
				more = false
			}
		}
	}
	d.act.close()
	errs = append(errs, d.consumer.Close(), d.lock.release())
	d.log.Info("snapd stopped", "chain_head", d.Head().Gen)
	return errors.Join(errs...)
}

// Handler serves /metrics (the injected registry) and /healthz: 200 "ok
// gen=N" (plus " push=retrying pending=K" while pushes fail), 503 when
// stopped or when the push queue needs attention.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.gather, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if ok, why := d.health(); !ok {
			http.Error(w, "unhealthy: "+why, http.StatusServiceUnavailable)
			return
		}
		// A push that needs a person (or kept timing out) makes the
		// daemon unhealthy: generations are no longer published.
		if qs := queueStatus(d.deps.Queue); qs != nil && qs.State == queue.StateNeedsAttention {
			kind := "error"
			if qs.Hold != nil {
				kind = qs.Hold.Kind
			}
			http.Error(w, fmt.Sprintf("push needs-attention gen=%d: %s (snapd status; snapd queue retry)", d.Head().Gen, kind), http.StatusServiceUnavailable)
			return
		}
		push := ""
		if qs := queueStatus(d.deps.Queue); qs != nil && qs.State != queue.StateOK {
			push = fmt.Sprintf(" push=%s pending=%d", qs.State, qs.Pending)
		}
		fmt.Fprintf(w, "ok gen=%d%s\n", d.Head().Gen, push)
	})
	return mux
}

// Wait blocks until the request for gen has an outcome recorded by this
// daemon (done or failed) and returns it, or until ctx ends.
func (d *Daemon) Wait(ctx context.Context, gen uint64) (*GenResult, error) {
	return d.WaitFor(ctx, gen, nil)
}

// WaitFor is Wait for a result of gen that satisfies ok (nil: any), e.g.
// the outcome of a later request for a generation that already has one.
func (d *Daemon) WaitFor(ctx context.Context, gen uint64, ok func(*GenResult) bool) (*GenResult, error) {
	for {
		d.resMu.Lock()
		r, found := d.results[gen]
		if found && ok != nil && !ok(r) {
			found = false
		}
		ch := d.changed
		d.resMu.Unlock()
		if found {
			c := *r
			return &c, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Results returns the outcomes recorded since Start (the last 1024), in
// completion order.
func (d *Daemon) Results() []GenResult {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	out := make([]GenResult, 0, len(d.order))
	for _, g := range d.order {
		out = append(out, *d.results[g])
	}
	return out
}

func (d *Daemon) record(r *GenResult) {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	if _, ok := d.results[r.Gen]; !ok {
		d.order = append(d.order, r.Gen)
	}
	d.results[r.Gen] = r
	if len(d.order) > 1024 {
		delete(d.results, d.order[0])
		d.order = d.order[1:]
	}
	close(d.changed)
	d.changed = make(chan struct{})
}

// fail records a failure in STATE_DIR/last_error and the metrics.
func (d *Daemon) fail(stage string, gen uint64, err error) {
	d.m.failures.WithLabelValues(stage).Inc()
	if werr := writeLastError(d.config().StateDir, &LastError{Time: d.now().UTC(), Gen: gen, Stage: stage, Message: err.Error()}); werr != nil {
		d.log.Error("cannot persist last error", "error", werr)
	}
}

func hexs(b [32]byte) string { return hex.EncodeToString(b[:]) }

// queueStatus reads the resend queue's status, if there is a queue.
func queueStatus(q *queue.Queue) *queue.Status {
	if q == nil {
		return nil
	}
	st, err := q.Status()
	if err != nil {
		return nil
	}
	return &st
}
