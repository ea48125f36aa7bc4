package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// The stages' side of a node of a sharded job (Deps.Publisher is a
// *RankPublisher): the same WAL consumer, admission, prepare (decode),
// retries, metrics and WAL outcomes as a single-node generation, but no
// chain and no ring. A rank request's build converts the shard to its
// rank part; its finish pushes the part (RankPublisher.Publish) and only
// then records the outcome, so a kill -9 redelivers a request whose part
// is not in the registry yet.

// rankNode returns the daemon's RankPublisher; nil when the daemon is not
// a node of a sharded job.
func (d *Daemon) rankNode() *RankPublisher {
	rp, _ := d.deps.Publisher.(*RankPublisher)
	return rp
}

// prepareRank is prepare's check of a request's rank fields. On a ranks
// node every request must be one rank's shard: it sets it.rank and
// reports done when the part is already converted (a redelivery after a
// crash between conversion and push: the shard is not read again). On a
// single-node daemon a rank request is refused.
func (d *Daemon) prepareRank(it *item) (done bool, err error) {
	gen, rec := it.rec.Gen, it.rec
	rn := d.rankNode()
	if rn == nil {
		if rec.WorldSize > 0 {
			// A sharded job: one rank's shard is not a generation of its own.
			return false, permanent{fmt.Errorf("%w: gen %d: a rank request (rank %d of %d) needs a daemon configured with ranks: (docs/SHARDED.md)", ErrSource, gen, rec.Rank, rec.WorldSize)}
		}
		return false, nil
	}
	if rec.WorldSize == 0 {
		return false, permanent{fmt.Errorf("gen %d: %s: %w", gen, rec.Source, ErrNotRank)}
	}
	path := rn.partPath(gen, rec.Rank)
	it.rank = &RankPart{Rank: rec.Rank, WorldSize: rec.WorldSize, Path: path}
	_, err = os.Stat(path)
	switch {
	case err == nil:
		it.partReady = true
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, err
	}
}

// buildRank converts a rank request's decoded shard to its rank part
// (unless prepare found it converted), with the build stage's retries.
func (d *Daemon) buildRank(ctx context.Context, it *item) {
	rn, rp := d.rankNode(), it.rank
	if !it.partReady {
		t := d.now()
		it.stageStart("build")
		err := d.retry(ctx, "build", it.rec.Gen, func() error {
			return rn.writePart(ctx, it.rec.Request, it.snap, rp.Path)
		})
		it.stage1("build", d.now().Sub(t))
		switch {
		case ctx.Err() != nil:
			it.aborted = true
			return
		case err != nil:
			it.err, it.stage = err, "build"
			return
		}
	}
	if st, err := os.Stat(rp.Path); err == nil {
		it.res.WTXTBytes = st.Size()
		d.m.bytes.WithLabelValues("wtxt").Add(float64(st.Size()))
	}
}

// publishRank pushes a converted rank part (RankPublisher.Publish: until
// it is in the registry or ctx ends). A refused part fails the request;
// it reports false when the daemon is stopping (the request keeps no
// outcome and is redelivered after a restart).
func (d *Daemon) publishRank(ctx context.Context, it *item) bool {
	if it.rank == nil || it.err != nil || it.skip || it.coalesced != 0 {
		return true
	}
	t := d.now()
	it.stageStart("publish")
	p, err := d.rankNode().Publish(ctx, Generation{Gen: it.rec.Gen, Rank: it.rank, Requested: it.rec.Time})
	it.stage1("publish", d.now().Sub(t))
	switch {
	case err == nil:
		it.res.Tag = p.Tag
	case ctx.Err() != nil:
		return false
	default:
		it.err, it.stage = err, "publish"
	}
	return true
}
