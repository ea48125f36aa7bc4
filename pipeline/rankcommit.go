package pipeline

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snapd-ml/snapd/formats/wtxt"
	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/backoff"
	"github.com/snapd-ml/snapd/snapshot"
)

// OnTimeout says what a committer does with a generation that is still
// missing ranks after RankCommitterOptions.Timeout.
const (
	// RankOnTimeoutWait keeps the generation pending; later generations wait
	// behind it (the default: nothing is ever skipped silently).
	RankOnTimeoutWait = "wait"
	// RankOnTimeoutSkip gives up on it once a later generation is complete,
	// and records the gap (Snapd-Skipped trailer of the next commit).
	RankOnTimeoutSkip = "skip"
)

// RankCommitterOptions configure a Committer.
type RankCommitterOptions struct {
	Repo *oci.Repository
	// Ledger is the local repository the generations are committed to
	// (signed with its Config.SigningKey), and Pusher, when set, publishes
	// each commit and its tag to the remote; a round first publishes a
	// head the remote lacks (a push that failed before). The daemon
	// bounds the ledger after each push through its resend queue (Queue,
	// with the daemon's PushObserver as the queue's Pusher and its
	// AfterPush as the queue's: retention.repo and gitops Repo.Maintain,
	// as for Deps.Repo); without a remote (no
	// Queue, no Pusher) the committer runs Maintain after each commit.
	Ledger *gitops.Repo
	Pusher gitops.Pusher
	// Queue, when set, takes each commit as a push job instead of Pusher
	// (the daemon's resend queue: pushed in order with its retries, its
	// needs-attention state and snapd queue commands; a commit whose
	// enqueue a crash lost is enqueued again by the next round).
	Queue     Enqueuer
	Chain     [32]byte
	WorldSize int
	Timeout   time.Duration // default 10m
	OnTimeout string        // RankOnTimeoutWait (default) or RankOnTimeoutSkip
	IndexKey  ed25519.PrivateKey
	Build     string // build token of the generation (default "snapd-ranks")
	// StateFile keeps the pending generation's first-seen time and the
	// skipped generations across restarts (atomic writes).
	StateFile string
	// Poll is the time between rounds (default DefaultRankPoll), and the
	// first delay after a failed round; RetryMax caps the backoff of
	// failed rounds (default DefaultRankRetryMax).
	Poll, RetryMax time.Duration
	// After is the clock the stage waits on (default time.After).
	After func(time.Duration) <-chan time.Time
	Now   func() time.Time
	Log   *slog.Logger
}

// RankCommitter commits the generations of a sharded job: it lists the
// registry's rank tags, and when all W rank manifests of the next
// generation are present and valid and their parts carry the same
// metadata (rankMeta), makes the generation's one signed, chained Git
// commit (gitops.Repo.CommitRanks, the metadata its Snapd-Meta trailer)
// and pushes it through the ledger's pusher. It is a stage of the daemon of exactly one node per job
// (Deps.RankCommitter; ranks.committer: true); see docs/FORMAT.md section
// 7 for why not an election.
type RankCommitter struct {
	o   RankCommitterOptions
	log *slog.Logger
	m   *rankMetrics // set by attach
	// queued is the last commit handed to Queue (the stage's goroutine
	// alone uses it).
	queued plumbing.Hash
}

// RankStatus is what the committer last saw; it is also its state file.
type RankStatus struct {
	LastCommitted uint64            `json:"last_committed"`
	Pending       uint64            `json:"pending,omitempty"`
	PendingSince  time.Time         `json:"pending_since,omitzero"`
	Missing       []int             `json:"missing,omitempty"`
	Invalid       map[string]string `json:"invalid,omitempty"` // rank -> error
	TimedOut      bool              `json:"timed_out,omitempty"`
	Skipped       []uint64          `json:"skipped,omitempty"` // since the last commit
	SkippedTotal  []uint64          `json:"skipped_total,omitempty"`
	LastError     string            `json:"last_error,omitempty"`
	Updated       time.Time         `json:"updated"`
}

// NewRankCommitter returns a Committer.
func NewRankCommitter(o RankCommitterOptions) (*RankCommitter, error) {
	if o.Repo == nil || o.Ledger == nil || o.StateFile == "" {
		return nil, errors.New("ranks committer: Repo, Ledger and StateFile are required")
	}
	if err := os.MkdirAll(filepath.Dir(o.StateFile), 0o755); err != nil {
		return nil, fmt.Errorf("ranks committer: %w", err)
	}
	if o.WorldSize < 1 || o.WorldSize > wranks.MaxWorldSize {
		return nil, fmt.Errorf("ranks committer: world_size %d out of range 1..%d", o.WorldSize, wranks.MaxWorldSize)
	}
	switch o.OnTimeout {
	case "":
		o.OnTimeout = RankOnTimeoutWait
	case RankOnTimeoutWait, RankOnTimeoutSkip:
	default:
		return nil, fmt.Errorf("ranks committer: on_timeout %q: want wait or skip", o.OnTimeout)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultRankTimeout
	}
	if o.Build == "" {
		o.Build = "snapd-ranks"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Poll <= 0 {
		o.Poll = DefaultRankPoll
	}
	if o.RetryMax < o.Poll {
		o.RetryMax = max(DefaultRankRetryMax, o.Poll)
	}
	if o.After == nil {
		o.After = time.After
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &RankCommitter{o: o, log: log}, nil
}

// ReadRankStatus reads a committer's state file.
func ReadRankStatus(path string) (*RankStatus, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st RankStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &st, nil
}

func (c *RankCommitter) save(st *RankStatus) error {
	st.Updated = c.o.Now().UTC()
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(c.o.StateFile, append(b, '\n'), 0o644)
}

// Step runs one round: read the ledger head, list the rank tags, and
// commit every generation that is complete, in order (skipping timed-out
// ones when configured). It returns the status after the round; an error
// is a registry or Git failure (the round is retried by the caller).
func (c *RankCommitter) Step(ctx context.Context) (*RankStatus, error) {
	st, err := ReadRankStatus(c.o.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		st, err = &RankStatus{}, nil
	}
	if err != nil {
		return nil, err
	}
	serr := c.step(ctx, st)
	st.LastError = ""
	if serr != nil {
		st.LastError = serr.Error()
	}
	c.observe(st, serr) // before the state file shows the round
	if err := c.save(st); err != nil {
		return st, err
	}
	return st, serr
}

func (c *RankCommitter) step(ctx context.Context, st *RankStatus) error {
	hc, err := c.o.Ledger.RanksHead()
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	var head *wranks.Index
	var prev [32]byte
	var last uint64
	if hc != nil {
		head = hc.Index
		prev, last = head.MerkleThis, head.GenNumber()
		if err := c.push(ctx, hc.Commit.Hash, head.Gen); err != nil {
			return err
		}
	}
	if last > st.LastCommitted || (head == nil && st.LastCommitted != 0) {
		st.Skipped = nil // they went into the commit that is now the head
	}
	st.LastCommitted = last
	tags, err := c.o.Repo.Tags(ctx)
	if err != nil {
		return err
	}
	gens := map[uint64]string{}
	present := map[uint64]map[int]bool{} // ranks with a tag, per generation
	for _, t := range tags {
		g, r, ok := oci.ParseRankTag(t)
		if !ok {
			continue
		}
		if n, _ := wranks.ParseGen(g); n > last && !slices.Contains(st.Skipped, n) && !slices.Contains(st.SkippedTotal, n) {
			gens[n] = g
			if present[n] == nil {
				present[n] = map[int]bool{}
			}
			present[n][r] = true
		}
	}
	order := make([]uint64, 0, len(gens))
	for n := range gens {
		order = append(order, n)
	}
	slices.Sort(order)
	for i, n := range order {
		gen := gens[n]
		var parts []wranks.Part
		var skels [][]byte
		var missing []int
		var invalid map[string]string
		for r := range c.o.WorldSize {
			if !present[n][r] {
				missing = append(missing, r)
			}
		}
		if len(missing) == 0 {
			// Only now read the W manifests and skeletons (a generation
			// waiting for its last rank costs one tag list per round).
			if parts, skels, missing, invalid, err = c.collect(ctx, gen); err != nil {
				return err
			}
		}
		var meta snapshot.UserMeta
		if len(missing) == 0 && len(invalid) == 0 {
			if meta, invalid, err = c.rankMeta(ctx, gen, skels); err != nil {
				return err
			}
			if len(invalid) > 0 && !maps.Equal(invalid, st.Invalid) {
				c.log.Warn("multi-rank generation refused: its ranks' parts disagree (each rank must request it with the same metadata)", "gen", n, "invalid", invalid)
			}
		}
		if len(missing) == 0 && len(invalid) == 0 {
			ix, err := wranks.New(gen, c.o.WorldSize, c.o.Chain, parts, prev, c.o.Build, c.o.IndexKey)
			if err != nil {
				return c.pending(st, n, nil, map[string]string{"*": err.Error()}, i+1 < len(order))
			}
			res, err := c.o.Ledger.CommitRanks(ctx, gitops.RanksGeneration{Index: ix, Skeletons: skels, Skipped: st.Skipped, Meta: meta})
			if err != nil {
				return fmt.Errorf("ledger: commit generation %s: %w", gen, err)
			}
			if err := c.push(ctx, res.Commit, ix.Gen); err != nil {
				// Committed locally: the next round pushes it first.
				return err
			}
			c.log.Info("multi-rank generation committed", "gen", n, "world_size", c.o.WorldSize, "merkle_this", fmt.Sprintf("%x", ix.MerkleThis), "skipped", st.Skipped)
			if c.o.Queue == nil && c.o.Pusher == nil {
				maintainRepo(ctx, c.log, c.o.Ledger, c.o.Ledger.Config().Branch) // nothing pushes
			}
			head, prev, last = ix, ix.MerkleThis, n
			st.LastCommitted, st.Skipped = n, nil
			st.Pending, st.PendingSince, st.Missing, st.Invalid, st.TimedOut = 0, time.Time{}, nil, nil, false
			continue
		}
		if err := c.pending(st, n, missing, invalid, i+1 < len(order)); err != nil {
			return err
		}
		if st.TimedOut && c.o.OnTimeout == RankOnTimeoutSkip && i+1 < len(order) {
			c.log.Warn("multi-rank generation skipped after timeout", "gen", n, "missing", missing, "invalid", invalid)
			st.Skipped = append(st.Skipped, n)
			st.SkippedTotal = append(st.SkippedTotal, n)
			st.Pending, st.PendingSince, st.Missing, st.Invalid, st.TimedOut = 0, time.Time{}, nil, nil, false
			continue
		}
		return nil
	}
	return nil
}

// Enqueuer takes push jobs (a *queue.Queue). Enqueueing a job the queue
// holds already, for the same commit and tag, is a no-op; one it pushed
// and removed is pushed again, which for what the remote has is a no-op.
type Enqueuer interface {
	Enqueue(queue.Job) error
}

// push publishes commit (generation gen) and its tag: a job for Queue, or
// through Pusher; nil without either. Pushing what the remote has is a
// no-op.
func (c *RankCommitter) push(ctx context.Context, commit plumbing.Hash, gen string) error {
	if c.o.Queue != nil {
		if commit == c.queued {
			return nil // each round sees the head: enqueued once per process
		}
		n, err := strconv.ParseUint(gen, 10, 64)
		if err != nil {
			return fmt.Errorf("ledger: generation %q: %w", gen, err)
		}
		j := queue.Job{Branch: c.o.Ledger.Config().Branch, Gen: n, Commit: commit.String(), Tag: c.o.Ledger.TagName(gen), Enqueued: c.o.Now().UTC()}
		if err := c.o.Queue.Enqueue(j); err != nil {
			return fmt.Errorf("ledger: generation %s: resend queue: %w", gen, err)
		}
		c.queued = commit
		return nil
	}
	if c.o.Pusher == nil {
		return nil
	}
	if err := c.o.Pusher.Push(ctx, gitops.PushRequest{Branch: c.o.Ledger.Config().Branch, Commit: commit, Tag: c.o.Ledger.TagName(gen)}); err != nil {
		return fmt.Errorf("ledger: generation %s: %w", gen, err)
	}
	return nil
}

// pending records generation n as waiting for ranks.
func (c *RankCommitter) pending(st *RankStatus, n uint64, missing []int, invalid map[string]string, later bool) error {
	now := c.o.Now().UTC()
	if st.Pending != n {
		st.Pending, st.PendingSince = n, now
	}
	st.Missing, st.Invalid = missing, invalid
	st.TimedOut = now.Sub(st.PendingSince) >= c.o.Timeout
	if st.TimedOut {
		c.log.Warn("multi-rank generation pending past its timeout", "gen", n, "since", st.PendingSince, "missing", missing, "invalid", invalid, "on_timeout", c.o.OnTimeout, "later_generations", later)
	}
	return nil
}

// collect fetches and checks every rank of gen. A missing tag is listed in
// missing, a refused one in invalid (rank -> located error); a registry
// failure is returned as err.
func (c *RankCommitter) collect(ctx context.Context, gen string) (parts []wranks.Part, skels [][]byte, missing []int, invalid map[string]string, err error) {
	skels = make([][]byte, c.o.WorldSize)
	for r := range c.o.WorldSize {
		p, sk, ferr := oci.FetchRankPart(ctx, c.o.Repo, gen, r, c.o.WorldSize, c.o.Chain)
		switch {
		case ferr == nil:
			parts = append(parts, p)
			skels[r] = sk
		case errors.Is(ferr, oci.ErrRankMissing):
			missing = append(missing, r)
		case wranks.IsCheck(ferr):
			if invalid == nil {
				invalid = map[string]string{}
			}
			invalid[fmt.Sprint(r)] = ferr.Error()
		default:
			return nil, nil, nil, nil, ferr
		}
	}
	return parts, skels, missing, invalid, nil
}

// rankMeta reads the metadata inside every rank's part of gen (the
// attributes document, through the rank's skeleton skels[r], its blobs
// from the registry, every chunk checked: wtxt.ReadSkeletonUserMeta) and
// returns the generation's metadata, which every rank must give (each
// rank's request carries its own copy; the commit's Snapd-Meta trailer
// states it once). When ranks differ the generation is refused: every
// rank outside the largest group of ranks giving the same metadata (on a
// tie, the group of the lowest rank) is listed in invalid (rank ->
// message naming the rank it differs from and the keys, never a value),
// and the generation stays pending like one with a refused part. A part
// whose metadata fails a check is listed in invalid too; a registry
// failure is err.
func (c *RankCommitter) rankMeta(ctx context.Context, gen string, skels [][]byte) (meta snapshot.UserMeta, invalid map[string]string, err error) {
	refuse := func(r int, msg string) {
		if invalid == nil {
			invalid = map[string]string{}
		}
		invalid[fmt.Sprint(r)] = msg
	}
	metas := make([]snapshot.UserMeta, len(skels))
	for r, sk := range skels {
		m, merr := wtxt.ReadSkeletonUserMeta(ctx, oci.RankTag(gen, r), bytes.NewReader(sk), int64(len(sk)), c.o.Repo)
		var we *wtxt.Error
		switch {
		case merr == nil:
			metas[r] = m
		case errors.As(merr, &we):
			refuse(r, merr.Error())
		default:
			return nil, nil, merr
		}
	}
	if invalid != nil {
		return nil, invalid, nil
	}
	// Group the ranks by their metadata: group[r] is the lowest rank
	// giving the same as rank r.
	group, size := make([]int, len(metas)), map[int]int{}
	for r, m := range metas {
		group[r] = r
		for q := range r {
			if group[q] == q && metas[q].Equal(m) {
				group[r] = q
				break
			}
		}
		size[group[r]]++
	}
	ref := 0
	for q, n := range size {
		if n > size[ref] || n == size[ref] && q < ref {
			ref = q
		}
	}
	if size[ref] == len(metas) {
		return metas[ref], nil, nil
	}
	for r, m := range metas {
		if group[r] != ref {
			refuse(r, fmt.Sprintf("%s: the generation metadata its request gave differs from rank %d's, which %d of %d ranks give (keys %s)",
				oci.RankTag(gen, r), ref, size[ref], len(metas), strings.Join(snapshot.DiffUserMetaKeys(metas[ref], m), ", ")))
		}
	}
	return nil, invalid, nil
}

// Default values of RankCommitterOptions.
// configs.Ranks.WithDefaults states the same values by these names.
const (
	DefaultRankPoll     = 2 * time.Second
	DefaultRankRetryMax = 30 * time.Second
	DefaultRankTimeout  = 10 * time.Minute
)

// rankMetrics are the committer's collectors (promtool-clean names).
type rankMetrics struct {
	failures      prometheus.Counter
	lastCommitted prometheus.Gauge
	pending       prometheus.Gauge
	timedOut      prometheus.Gauge
}

// attach registers the committer's metrics on the daemon's registry
// (New, with Deps.RankCommitter).
func (c *RankCommitter) attach(reg prometheus.Registerer) error {
	m := &rankMetrics{
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "snapd_ranks_commit_failures_total",
			Help: "Failed rounds of the sharded job's committer (registry or Git; each retried with backoff)."}),
		lastCommitted: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapd_ranks_last_committed_generation",
			Help: "Newest multi-rank generation the committer committed."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapd_ranks_pending_generation",
			Help: "Multi-rank generation waiting for ranks (0: none)."}),
		timedOut: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snapd_ranks_pending_timed_out",
			Help: "1 when the pending multi-rank generation is missing ranks past ranks.timeout."}),
	}
	for _, col := range []prometheus.Collector{m.failures, m.lastCommitted, m.pending, m.timedOut} {
		if err := reg.Register(col); err != nil {
			return err
		}
	}
	c.m = m
	return nil
}

// observe records a round in the metrics: its status, and err when it
// failed.
func (c *RankCommitter) observe(st *RankStatus, err error) {
	if c.m == nil {
		return
	}
	if err != nil {
		c.m.failures.Inc()
	}
	c.m.lastCommitted.Set(float64(st.LastCommitted))
	c.m.pending.Set(float64(st.Pending))
	t := 0.0
	if st.TimedOut {
		t = 1
	}
	c.m.timedOut.Set(t)
}

// run is the committer's stage of the daemon (Deps.RankCommitter; Start
// starts it, Close ends it): a round (Step) every Poll. A failed round (a
// registry or Git failure) is retried through backoff.Retry, from Poll
// doubling up to RetryMax; each failure is counted by Step
// (snapd_ranks_commit_failures_total), logged by backoff.LogLimiter's rule
// and kept in the state file's last_error (snapd status shows it as
// needing attention, snapd ranks status names it) until a round succeeds.
func (c *RankCommitter) run(ctx context.Context) {
	sleep := func(ctx context.Context, d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.o.After(d):
			return nil
		}
	}
	policy := backoff.Policy{Base: c.o.Poll, Max: c.o.RetryMax, Limiter: &backoff.LogLimiter{}, Sleep: sleep,
		OnRetry: func(f backoff.Failure) {
			if f.Log {
				c.log.Warn("ranks committer: round failed; retrying", "attempt", f.Attempt, "retry_in", f.Delay, "suppressed", f.Suppressed, "err", f.Err)
			}
		}}
	for {
		_, err := backoff.Retry(ctx, policy, func() error {
			_, err := c.Step(ctx)
			return err
		})
		if err != nil || sleep(ctx, c.o.Poll) != nil {
			return // ctx ended
		}
	}
}

// RanksDir holds a ranks node's state inside the state directory:
// parts/ (rank parts converted and not yet in the registry) and, on the
// committer, committer.json (its RankStatus).
const RanksDir = "ranks"

// RankPartsDir is where a ranks node keeps its rank parts until they are
// pushed (RankOptions.Dir).
func RankPartsDir(stateDir string) string { return filepath.Join(stateDir, RanksDir, "parts") }

// RankStatusFile is the committer's state file
// (RankCommitterOptions.StateFile; snapd ranks status, snapd status).
func RankStatusFile(stateDir string) string {
	return filepath.Join(stateDir, RanksDir, "committer.json")
}
