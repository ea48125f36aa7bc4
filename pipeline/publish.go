package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/pipeline/ring"
)

// Publisher publishes the generations the daemon chains. The daemon holds
// one, chosen by whoever builds its Deps (cmd/snapd from the
// configuration); the stages never ask which.
//
// The finish stage calls Publish once per generation, after the
// generation's ring files and the chain state naming it are durable and
// before its request is acknowledged in the WAL. Start first calls Recover
// for each ring generation up to the chain head, oldest first, so that
// what a crash or a failure interrupted is finished. Calls come from one
// goroutine at a time, in generation order.
//
// A Publisher either commits the generation to the Git ledger itself
// (Published.Commit: the daemon hands the commit to the resend queue for
// its push) or leaves durable work to the queue (Published.Job: the daemon
// enqueues it, and the queue's queue.Publisher for Job.Kind does it, in
// order, after restarts, committing when it is done). Every commit goes
// through commitGeneration, the one path from a generation to
// gitops.Repo.Commit.
//
// GitPublisher commits the ring files. OCIPublisher leaves a job that
// uploads the tensor bytes to an OCI registry and then commits the
// skeleton. RankPublisher (rankpublish.go), a node of a sharded job,
// pushes the rank part its build stage converted and commits nothing
// (Published.Pending names what the generation waits for); its requests
// never reach the ring or the chain, and a failed push fails the request
// in the WAL instead of being published again at start. The committer
// (RankCommitter, a stage of the daemon that has Deps.RankCommitter),
// which sees every rank's part, commits the generation through the same
// ledger (gitops.Repo.CommitRanks) and pushes it through the same pusher.
//
// Errors: a failed Publish is logged and recorded in last_error (stage
// "git") by the daemon, and the generation is published again by Recover
// at the next start. Recover returns an error wrapping ErrPublished for a
// generation it finds published (committed, or its work queued).
type Publisher interface {
	Publish(ctx context.Context, g Generation) (Published, error)
	Recover(ctx context.Context, g Generation) (Published, error)
}

// ErrPublished is wrapped by Publisher.Recover's error for a generation
// already published.
var ErrPublished = errors.New("pipeline: generation already published")

// Generation is one chained generation as the build stage left it in the
// ring: what a Publisher publishes.
type Generation struct {
	Gen uint64
	// Ring files ("" when absent): the WTXT (age armor when encrypting),
	// its delta, WSUM and seal, and the picture of its change.
	WTXT, Delta, WSUM, Seal, Picture string
	// Skeleton and OCI: a generation the build pushed to the registry
	// (ocidirect.go) has its skeleton in the ring instead of a WTXT, and
	// OCI names its manifest.
	Skeleton string
	OCI      *gitops.OCIRef
	// Header holds the values the ledger records (from the chain state or
	// the seal); nil: read from the WTXT.
	Header *gitops.Header
	// ResumedFrom: the generation is the first of a run resumed from
	// this generation.
	ResumedFrom uint64
	// Requested is when the generation was requested (zero: unknown, as
	// for a generation recovered at start).
	Requested time.Time
	// Rank is the rank part of a request on a node of a sharded job
	// (RankPublisher); nil for a chained generation.
	Rank *RankPart
}

// ledger returns g as the ledger commits it whole (every ring file).
func (g Generation) ledger() gitops.Generation {
	lg := gitops.Generation{WTXT: g.WTXT, Delta: g.Delta, WSUM: g.WSUM, Seal: g.Seal, Picture: g.Picture, Header: g.Header}
	if g.ResumedFrom != 0 {
		lg.Resume = &gitops.Resume{From: g.ResumedFrom}
	}
	return lg
}

// Published is what a Publisher made of a generation: a commit, or work
// left for the resend queue.
type Published struct {
	// Commit and Tag name the ledger commit (the daemon enqueues its
	// push); empty when the generation is not committed yet.
	Commit, Tag string
	// Existing (Recover): the commit was in the ledger already.
	Existing bool
	// Added is what the commit wrote over its parent (bytes of new
	// blobs; 0: unknown), the push's send estimate (queue.Job.Added).
	Added int64
	// Job is work the daemon enqueues for the queue's queue.Publisher
	// (nil: none).
	Job *queue.Publish
	// Pending says, when Commit is empty, what the commit waits for (the
	// "generation snapshotted" line logs it as the commit).
	Pending string
}

// commitGeneration is the one path from a generation to a ledger commit:
// gitops.Repo.Commit (which records where the bytes live), then the
// commit's request time for the request-to-pushed latency (requested
// zero: not observed). GitPublisher commits the ring files through it,
// OCIPublisher's queue job the skeleton after the upload.
func commitGeneration(ctx context.Context, repo *gitops.Repo, pushes *PushObserver, g gitops.Generation, requested time.Time) (*gitops.Result, error) {
	res, err := repo.Commit(ctx, g)
	if err != nil {
		return nil, err
	}
	pushes.expect(res.Commit.String(), requested)
	return res, nil
}

// attacher is implemented by this package's publishers: New attaches them
// to the daemon (its push observer, its metrics registry) before Start.
type attacher interface {
	attach(d *Daemon, reg prometheus.Registerer) error
}

// GitPublisher commits each generation's ring files to the Git ledger;
// the daemon queues the commit's push.
type GitPublisher struct {
	repo   *gitops.Repo
	pushes atomic.Pointer[PushObserver] // set by New from Deps.Pushes
}

// NewGitPublisher returns the publisher committing into repo.
func NewGitPublisher(repo *gitops.Repo) *GitPublisher { return &GitPublisher{repo: repo} }

func (p *GitPublisher) attach(d *Daemon, _ prometheus.Registerer) error {
	p.pushes.Store(d.deps.Pushes)
	return nil
}

// Publish implements Publisher: it commits g.
func (p *GitPublisher) Publish(ctx context.Context, g Generation) (Published, error) {
	res, err := commitGeneration(ctx, p.repo, p.pushes.Load(), g.ledger(), g.Requested)
	if err != nil {
		return Published{}, err
	}
	return Published{Commit: res.Commit.String(), Tag: res.Tag, Existing: res.Existing, Added: res.BytesWritten}, nil
}

// Recover implements Publisher: it commits g unless the ledger has it or
// a later generation (ErrPublished).
func (p *GitPublisher) Recover(ctx context.Context, g Generation) (Published, error) {
	pub, err := p.Publish(ctx, g)
	if errors.Is(err, gitops.ErrGenOrder) {
		return pub, fmt.Errorf("%w: %w", ErrPublished, err)
	}
	return pub, err
}

// outbox is the daemon's side of publishing: its Publisher, and the
// resend queue that pushes (and finishes) what it publishes.
type outbox struct {
	pub      Publisher // nil: nothing is published
	repo     *gitops.Repo
	queue    *queue.Queue
	log      *slog.Logger
	now      func() time.Time
	enqueued prometheus.Counter
	fail     func(stage string, gen uint64, err error)
}

// publish publishes the generation a done request made (r, chained as
// head) and fills in r's commit. Failures are logged and kept in
// last_error; the next start publishes it again.
func (o *outbox) publish(ctx context.Context, r *GenResult, head *ChainState, requested time.Time) Published {
	if o.pub == nil || head == nil {
		return Published{}
	}
	h, err := head.gitHeader()
	var p Published
	if err == nil {
		p, err = o.pub.Publish(ctx, Generation{Gen: r.Gen, WTXT: r.WTXT, Delta: r.Delta, WSUM: r.WSUM, Seal: r.Seal, Picture: r.Picture,
			Skeleton: r.Skeleton, OCI: r.OCI, Header: h, ResumedFrom: r.ResumedFrom, Requested: requested})
	}
	if err != nil {
		o.log.Error("publish failed (published again at the next start)", "gen", r.Gen, "error", err)
		o.fail("git", r.Gen, err)
		return Published{}
	}
	r.Commit, r.Tag = p.Commit, p.Tag
	o.enqueue(r.Gen, p, false)
	if o.queue == nil && p.Commit != "" && o.repo != nil {
		maintainRepo(ctx, o.log, o.repo, o.repo.Config().Branch) // nothing pushes concurrently (with a queue: after each push, observe.go)
	}
	return p
}

// enqueue hands what p leaves to the resend queue: the commit's push, or
// the Publisher's job. In recovery a job already queued is no failure.
func (o *outbox) enqueue(gen uint64, p Published, recovering bool) {
	if o.queue == nil || (p.Commit == "" && p.Job == nil) {
		return
	}
	j := queue.Job{Branch: o.repo.Config().Branch, Gen: gen, Commit: p.Commit, Tag: p.Tag, Added: p.Added, Enqueued: o.now().UTC(), Publish: p.Job}
	err := o.queue.Enqueue(j)
	switch {
	case err == nil:
		o.enqueued.Inc()
		return
	case p.Job == nil:
		o.log.Error("resend queue: enqueue", "gen", gen, "error", err)
	case recovering && errors.Is(err, queue.ErrConflict):
		return // queued before the crash
	case recovering:
		o.log.Warn("recovery: enqueue publish job", "gen", gen, "kind", p.Job.Kind, "error", err)
	default:
		o.log.Error("resend queue: enqueue publish job (re-enqueued at the next start)", "gen", gen, "kind", p.Job.Kind, "error", err)
	}
	o.fail("git", gen, err)
}

// recover publishes the ring generations up to the chain head that a
// crash (or a failure) kept from being published, oldest first.
func (o *outbox) recover(ctx context.Context, ringDir string, head ChainState) {
	if o.pub == nil {
		return
	}
	entries, err := ListRing(ringDir)
	if err != nil {
		o.log.Warn("recovery: list ring", "error", err)
		return
	}
	for _, e := range entries {
		if e.Gen > head.Gen || !e.Complete() {
			continue
		}
		g, ok := ringGeneration(ringDir, e, &head)
		if !ok {
			continue
		}
		p, err := o.pub.Recover(ctx, g)
		switch {
		case errors.Is(err, ErrPublished):
			continue
		case err != nil:
			o.log.Warn("recovery: publish", "gen", e.Gen, "error", err)
			o.fail("git", e.Gen, err)
			continue
		}
		if p.Commit != "" && !p.Existing {
			o.log.Info("recovery: committed generation missing from git", "gen", e.Gen, "commit", p.Commit)
		}
		o.enqueue(e.Gen, p, true)
	}
}

// ringGeneration returns ring entry e as a Generation to publish: its
// header from the chain state for the head, from its seal for an
// encrypted one (whose WTXT header is armored), else nil (read from the
// WTXT). It reports false for a generation whose header cannot be had.
func ringGeneration(ringDir string, e RingEntry, head *ChainState) (Generation, bool) {
	g := Generation{Gen: e.Gen, WTXT: e.WTXT, Delta: e.Delta, WSUM: e.WSUM}
	if e.WTXT == "" {
		// Pushed by the build: the skeleton and its record.
		rec, err := readOCIRecord(e.OCI)
		if err != nil {
			return g, false
		}
		g.Skeleton, g.OCI, g.Header = e.Skeleton, rec.ref(), rec.Header
		if req, err := readGenRequest(ringPath(ringDir, e.Gen, ring.ExtRequest)); err == nil {
			g.ResumedFrom = req.ResumedFrom
		}
		return g, true
	}
	if s := e.WTXT + ExtSeal; fileExists(s) {
		g.Seal = s
	}
	if p := ringPath(ringDir, e.Gen, ExtPicture); fileExists(p) {
		g.Picture = p
	}
	if req, err := readGenRequest(ringPath(ringDir, e.Gen, ring.ExtRequest)); err == nil {
		g.ResumedFrom = req.ResumedFrom
	}
	switch {
	case e.Gen == head.Gen:
		h, err := head.gitHeader()
		if err != nil {
			return g, false
		}
		g.Header = h
	case g.Seal != "":
		sb, err := os.ReadFile(g.Seal)
		if err != nil {
			return g, false
		}
		s, err := armor.ParseSeal(sb)
		if err != nil {
			return g, false
		}
		g.Header = &gitops.Header{Gen: e.Gen, Root: s.Root}
	}
	return g, true
}

// maintainRepo bounds repo's pack count (gitops Repo.Maintain) after a
// push, in the queue's goroutine, so that no push of this daemon reads
// the packs while git repack replaces them (Maintain holds the lock
// Commit takes); or after a commit when nothing pushes. A failure is
// logged; the repository is as it was and the next push tries again. A
// nil repo does nothing.
func maintainRepo(ctx context.Context, log *slog.Logger, repo *gitops.Repo, branch string) {
	if repo == nil {
		return
	}
	m, err := repo.Maintain(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		log.Warn("git repack of the local repository failed (tried again after the next push)", "branch", branch, "packs", m.PacksBefore, "error", err)
	case m.Repacked:
		log.Info("git repack of the local repository", "branch", branch, "packs_before", m.PacksBefore, "packs_after", m.PacksAfter,
			"elapsed", m.Elapsed.Round(time.Millisecond))
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
