package pipeline

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/backoff"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// RankOptions configure a RankPublisher.
type RankOptions struct {
	Repo    *oci.Repository
	Chain   [32]byte
	SignKey ed25519.PrivateKey // signs each rank part (nil: unsigned)
	HMACKey []byte
	// Dir keeps rank parts between conversion and upload
	// (STATE_DIR/ranks/parts); created when missing.
	Dir         string
	SegmentSize int64
	Build       string // meta build of the parts (default "snapd")
	// RetryMin, RetryMax bound the backoff between upload attempts
	// (default 500ms, 30s).
	RetryMin, RetryMax time.Duration
	// After is the clock used to wait between attempts (default
	// time.After); tests drive it.
	After func(time.Duration) <-chan time.Time
	Log   *slog.Logger
}

// RankPublisher is the Publisher of one node of a sharded job: the daemon
// it is given to (Deps.Publisher) takes only rank requests (request-
// snapshot --rank R --world-size W). Its stages read each request from
// the WAL, admit it, decode the shard (prepare) and convert it to a rank
// part in Dir (the build stage, writePart: no chain, no ring); the finish
// stage hands the part to Publish, which pushes it to the registry as the
// rank manifest gen-NNNNNN.rank-R, and only then records the request's
// outcome in the WAL. Nothing is committed here: the committer
// (RankCommitter, a stage of the committer node's daemon) commits the
// generation once all W rank manifests are in.
//
// It is idempotent across kill -9: the same request gives the same part
// (its ts is the request's time) and the same manifest, a part already in
// Dir is pushed without converting the shard again, and a redelivered
// request re-pushes only what the registry lacks and moves no tag.
type RankPublisher struct {
	o      RankOptions
	log    *slog.Logger
	pushed prometheus.Counter // set by attach
}

// NewRankPublisher returns a RankPublisher; it creates Dir and sweeps
// stale temp files from it.
func NewRankPublisher(o RankOptions) (*RankPublisher, error) {
	if o.Repo == nil || o.Dir == "" {
		return nil, errors.New("ranks node: Repo and Dir are required")
	}
	if o.Build == "" {
		o.Build = "snapd"
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 500 * time.Millisecond
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(30*time.Second, o.RetryMin)
	}
	if o.After == nil {
		o.After = time.After
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("ranks node: %w", err)
	}
	if _, err := atomicfile.Sweep(o.Dir); err != nil {
		return nil, fmt.Errorf("ranks node: %w", err)
	}
	return &RankPublisher{o: o, log: log}, nil
}

// ErrNotRank: a request without rank fields reached a ranks node.
var ErrNotRank = errors.New("not a rank request (no --rank/--world-size)")

// RankPart is the rank part of one request of a sharded job, as the build
// stage left it: Generation.Rank.
type RankPart struct {
	Rank, WorldSize int
	// Path is the part file in RankOptions.Dir.
	Path string
}

func (p *RankPublisher) attach(d *Daemon, reg prometheus.Registerer) error {
	p.pushed = prometheus.NewCounter(prometheus.CounterOpts{Name: "snapd_rank_parts_pushed_total",
		Help: "Rank parts of a sharded job pushed to the registry as rank manifests (redeliveries included)."})
	return reg.Register(p.pushed)
}

// partName is the file name of rank r's part of gen.
func partName(gen uint64, r int) string { return fmt.Sprintf("gen-%06d.rank-%d.wtxt", gen, r) }

// partPath is where rank r's part of gen waits for its upload.
func (p *RankPublisher) partPath(gen uint64, r int) string {
	return filepath.Join(p.o.Dir, partName(gen, r))
}

// writePart converts the decoded shard s of the request rec (gen, rank,
// time, metadata) to its rank part, written atomically to path. The
// part's ts is the request's time (whole seconds), so a redelivered
// request gives the same bytes; the part carries the request's metadata
// (rec.Meta; none without), which the committer requires to be every
// rank's of the generation.
func (p *RankPublisher) writePart(ctx context.Context, rec wal.Request, s *snapshot.Snapshot, path string) error {
	gen, r := rec.Gen, rec.Rank
	s.Meta.TS = rec.Time.UTC().Truncate(time.Second)
	s.UserMeta = rec.Meta
	s.Meta.Build = p.o.Build
	if s.Meta.Schema == "" {
		d := snapshot.DefaultMeta()
		s.Meta.Schema, s.Meta.Host, s.Meta.Cuda = d.Schema, d.Host, d.Cuda
	}
	err := atomicfile.WriteFrom(path, 0o644, func(w io.Writer) error {
		_, err := wranks.EncodePart(ctx, w, s, wranks.PartOptions{Gen: gen, Chain: p.o.Chain, SignKey: p.o.SignKey, HMACKey: p.o.HMACKey})
		return err
	})
	if err != nil {
		return fmt.Errorf("gen %d rank %d: rank part: %w", gen, r, err)
	}
	return nil
}

// Publish implements Publisher: it pushes g's rank part (g.Rank) to the
// registry, retrying registry failures with capped backoff (backoff.Retry,
// its logs rate limited) until it succeeds or ctx ends, then removes the
// part file. A refused part (wrong world size, rank already claimed by
// another shard, another chain: a *wtxt.Error with a ranks/ check) fails
// at once. Nothing is committed: Published.Tag is the rank manifest's tag
// and Published.Pending says the committer commits the generation.
func (p *RankPublisher) Publish(ctx context.Context, g Generation) (Published, error) {
	rp := g.Rank
	if rp == nil {
		return Published{}, fmt.Errorf("gen %d: %w", g.Gen, ErrNotRank)
	}
	name := partName(g.Gen, rp.Rank)
	// Registry failures are retried with capped backoff, their logs rate
	// limited; a refused part (a failed check) is not retried.
	lim := &backoff.LogLimiter{Every: backoff.DefaultLogInterval}
	policy := backoff.Policy{Base: p.o.RetryMin, Max: p.o.RetryMax, Limiter: lim,
		Retryable: func(err error) bool { return !wranks.IsCheck(err) },
		Sleep: func(ctx context.Context, d time.Duration) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-p.o.After(d):
				return nil
			}
		},
		OnRetry: func(f backoff.Failure) {
			if f.Log {
				p.log.Warn("rank part push failed; retrying", "gen", g.Gen, "rank", rp.Rank, "attempt", f.Attempt, "retry_in", f.Delay,
					"suppressed", f.Suppressed, "err", f.Err)
			}
		}}
	var pushed *oci.RankPushed
	_, err := backoff.Retry(ctx, policy, func() error {
		f, err := os.Open(rp.Path)
		if err != nil {
			return backoff.Permanent(err)
		}
		defer f.Close()
		pushed, err = oci.PushRankPart(ctx, p.o.Repo, f, name, rp.Rank, rp.WorldSize, p.o.Chain, p.o.SegmentSize)
		return err
	})
	if err != nil {
		return Published{}, err
	}
	if p.pushed != nil {
		p.pushed.Inc()
	}
	p.log.Info("rank part pushed", "gen", g.Gen, "rank", rp.Rank, "world_size", rp.WorldSize, "tag", pushed.Tag,
		"uploaded", pushed.Stats.Uploaded, "uploaded_bytes", pushed.Stats.UploadedBytes, "skipped", pushed.Stats.Skipped, "skipped_bytes", pushed.Stats.SkippedBytes)
	if err := os.Remove(rp.Path); err != nil {
		p.log.Warn("rank part: remove after push", "path", rp.Path, "err", err)
	}
	return Published{Tag: pushed.Tag, Pending: "the job's committer (" + pushed.Tag + " pushed)"}, nil
}

// Recover implements Publisher: a ranks node keeps nothing in the ring
// (its requests stay in the WAL until pushed), so there is nothing to
// recover.
func (p *RankPublisher) Recover(ctx context.Context, g Generation) (Published, error) {
	return Published{}, fmt.Errorf("%w: gen %d: a ranks node redoes unpushed requests from the WAL", ErrPublished, g.Gen)
}
