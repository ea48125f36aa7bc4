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

	"github.com/snapd-ml/snapd/formats"
	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/backoff"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// RankNodeOptions configure a Node.
type RankNodeOptions struct {
	Repo    *oci.Repository
	Chain   [32]byte
	SignKey ed25519.PrivateKey // signs each rank part (nil: unsigned)
	HMACKey []byte
	Formats *formats.Registry // codecs that read shards
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

// RankNode is one rank's side: it turns rank requests into rank manifests in
// the registry. Handle is called by the WAL consumer (at least once per
// request); it is idempotent: the same request gives the same part and
// the same manifest, so a redelivery after kill -9 uploads only what is
// missing and moves nothing.
type RankNode struct {
	o   RankNodeOptions
	log *slog.Logger
}

// NewRankNode returns a Node.
func NewRankNode(o RankNodeOptions) (*RankNode, error) {
	if o.Repo == nil || o.Formats == nil || o.Dir == "" {
		return nil, errors.New("ranks node: Repo, Formats and Dir are required")
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
	return &RankNode{o: o, log: log}, nil
}

// ErrNotRank: a request without rank fields reached a ranks node.
var ErrNotRank = errors.New("not a rank request (no --rank/--world-size)")

// Handle converts rec's shard to a rank part (kept in Dir until it is in
// the registry) and pushes it, retrying registry failures with capped
// backoff (backoff.Retry; its logs rate limited) until it succeeds or
// ctx ends. A bad shard or a refused part
// (wrong world size, rank already claimed by another shard, another
// chain) fails at once with the error.
func (n *RankNode) Handle(ctx context.Context, rec wal.Record) error {
	if rec.WorldSize == 0 {
		return fmt.Errorf("gen %d: %s: %w", rec.Gen, rec.Source, ErrNotRank)
	}
	if err := snapshot.CheckGen(rec.Gen); err != nil {
		return err
	}
	name := fmt.Sprintf("gen-%06d.rank-%d.wtxt", rec.Gen, rec.Rank)
	path := filepath.Join(n.o.Dir, name)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := n.convert(ctx, rec, path); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	// Registry failures are retried with capped backoff, their logs rate
	// limited; a refused part (a failed check) is not retried.
	lim := &backoff.LogLimiter{Every: backoff.DefaultLogInterval}
	policy := backoff.Policy{Base: n.o.RetryMin, Max: n.o.RetryMax, Limiter: lim,
		Retryable: func(err error) bool { return !wranks.IsCheck(err) },
		Sleep: func(ctx context.Context, d time.Duration) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-n.o.After(d):
				return nil
			}
		},
		OnRetry: func(f backoff.Failure) {
			if f.Log {
				n.log.Warn("rank part push failed; retrying", "gen", rec.Gen, "rank", rec.Rank, "attempt", f.Attempt, "retry_in", f.Delay,
					"suppressed", f.Suppressed, "err", f.Err)
			}
		}}
	var p *oci.RankPushed
	_, err := backoff.Retry(ctx, policy, func() error {
		f, err := os.Open(path)
		if err != nil {
			return backoff.Permanent(err)
		}
		defer f.Close()
		p, err = oci.PushRankPart(ctx, n.o.Repo, f, name, rec.Rank, rec.WorldSize, n.o.Chain, n.o.SegmentSize)
		return err
	})
	if err != nil {
		return err
	}
	n.log.Info("rank part pushed", "gen", rec.Gen, "rank", rec.Rank, "world_size", rec.WorldSize, "tag", p.Tag,
		"uploaded", p.Stats.Uploaded, "uploaded_bytes", p.Stats.UploadedBytes, "skipped", p.Stats.Skipped, "skipped_bytes", p.Stats.SkippedBytes)
	if err := os.Remove(path); err != nil {
		n.log.Warn("rank part: remove after push", "path", path, "err", err)
	}
	return nil
}

// convert decodes the shard and writes its rank part atomically. The
// part's ts is the request's time (whole seconds), so a redelivered
// request gives the same bytes.
func (n *RankNode) convert(ctx context.Context, rec wal.Record, path string) error {
	m, err := snapshot.MapFile(rec.Source)
	if err != nil {
		return fmt.Errorf("gen %d rank %d: %w", rec.Gen, rec.Rank, err)
	}
	defer m.Close()
	gm := m.Guarded()
	c, err := n.o.Formats.Detect(rec.Source, gm, gm.Size())
	if err != nil {
		return fmt.Errorf("gen %d rank %d: %s: %w", rec.Gen, rec.Rank, rec.Source, err)
	}
	s, err := c.Decode(ctx, gm, gm.Size(), formats.DecodeOptions{Name: rec.Source})
	if err != nil {
		return fmt.Errorf("gen %d rank %d: %s: %s: %w", rec.Gen, rec.Rank, rec.Source, c.Name(), err)
	}
	s.Meta.TS = rec.Time.UTC().Truncate(time.Second)
	s.Meta.Build = n.o.Build
	if s.Meta.Schema == "" {
		d := snapshot.DefaultMeta()
		s.Meta.Schema, s.Meta.Host, s.Meta.Cuda = d.Schema, d.Host, d.Cuda
	}
	return atomicfile.WriteFrom(path, 0o644, func(w io.Writer) error {
		_, err := wranks.EncodePart(ctx, w, s, wranks.PartOptions{Gen: rec.Gen, Chain: n.o.Chain, SignKey: n.o.SignKey, HMACKey: n.o.HMACKey})
		return err
	})
}

// RunRankNode consumes the WAL in walDir and hands every request to node, in
// log order, until ctx ends. Each request's outcome is recorded only
// after Handle returns, so a kill -9 redelivers it.
func RunRankNode(ctx context.Context, walDir string, node *RankNode, poll time.Duration) error {
	cons, err := wal.OpenConsumer(walDir, wal.ConsumerOptions{})
	if err != nil {
		return err
	}
	defer cons.Close()
	l := wal.NewListener(walDir, cons.Cursor(), wal.ListenerOptions{PollInterval: poll})
	recs := make(chan wal.Record)
	if err := l.Start(ctx, recs); err != nil {
		return err
	}
	defer l.Close(context.Background())
	for {
		select {
		case <-ctx.Done():
			return nil
		case rec := <-recs:
			o, ran, err := cons.Handle(ctx, rec, node.Handle)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if ran && o.State == wal.Failed {
				node.log.Error("rank request failed", "gen", rec.Gen, "rank", rec.Rank, "err", o.Message)
			}
		}
	}
}
