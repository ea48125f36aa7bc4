package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/snapd-ml/snapd/wal"
)

// maxSkipped bounds the coalesced and duplicate items the admission stage
// holds (they must still be completed in log order); beyond it the stage
// stops reading the WAL as with PolicyBlock.
const maxSkipped = 4096

// admitStage reads WAL records and applies the queue bound and policy.
func (d *Daemon) admitStage(ctx context.Context, in <-chan wal.Record, out chan<- *item) {
	var buf []*item
	jobs := 0 // items in buf that will be snapshotted
	for {
		cfg := d.config()
		var next chan<- *item
		var head *item
		if len(buf) > 0 {
			next, head = out, buf[0]
		}
		src := in
		// A ranks node never coalesces (every rank of every generation is
		// needed): a full queue holds requests in the WAL.
		block := cfg.Policy == PolicyBlock || d.rankNode() != nil
		if (block && jobs >= cfg.QueueMax) || len(buf)-jobs >= maxSkipped {
			src = nil // back-pressure: requests stay in the WAL
		}
		select {
		case <-ctx.Done():
			for _, it := range buf {
				it.release()
			}
			return
		case next <- head:
			buf[0] = nil
			buf = buf[1:]
			if !head.skip && head.coalesced == 0 {
				jobs--
			}
		case rec := <-src:
			it := &item{rec: rec, admitted: d.now(), log: d.log, act: d.act}
			// Only this very request, completed before a crash lost the
			// cursor update, is skipped: another request for a done
			// generation is judged by build (duplicate or re-use).
			if d.consumer.Handled(rec) {
				it.skip = true
				buf = append(buf, it)
				continue
			}
			if jobs >= cfg.QueueMax {
				// PolicyCoalesce: replace the newest waiting job.
				for i := len(buf) - 1; i >= 0; i-- {
					if b := buf[i]; !b.skip && b.coalesced == 0 {
						b.coalesced = rec.Gen
						jobs--
						d.log.Warn("queue full: request coalesced", "gen", b.rec.Gen, "superseded_by", rec.Gen, "queue_max", cfg.QueueMax)
						d.m.queueDepth.Dec()
						break
					}
				}
			}
			buf = append(buf, it)
			jobs++
			d.m.queueDepth.Inc()
			d.inflight.add(it)
		}
	}
}

// prepareStage pins the generation and decodes its source.
func (d *Daemon) prepareStage(ctx context.Context, in <-chan *item, out chan<- *item) {
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-in:
			if !it.skip && it.coalesced == 0 {
				t := d.now()
				it.stageStart("prepare")
				err := d.retry(ctx, "prepare", it.rec.Gen, func() error { return d.prepare(ctx, it) })
				if ctx.Err() != nil {
					it.release()
					it.aborted = true
				} else if err != nil {
					it.release()
					it.err, it.stage = err, "prepare"
				}
				it.stage1("prepare", d.now().Sub(t))
			}
			if !send(ctx, out, it) {
				return
			}
		}
	}
}

// buildStage encodes, armors, makes the delta, writes the ring and
// persists the chain state; it is the only writer of the chain head.
func (d *Daemon) buildStage(ctx context.Context, in <-chan *item, out chan<- *item) {
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-in:
			switch {
			case it.skip || it.coalesced != 0 || it.err != nil || it.aborted:
			case it.rank != nil:
				d.buildRank(ctx, it)
			default:
				d.build(ctx, it)
			}
			it.release()
			if !send(ctx, out, it) {
				return
			}
		}
	}
}

func (d *Daemon) build(ctx context.Context, it *item) {
	full := d.Head()
	head := full.chainHead()
	gen := it.rec.Gen
	if gen <= head.Gen {
		// Generations up to the head that are in the ring were chained
		// before a crash lost their WAL outcome (the build stage runs
		// ahead of the acknowledgements, and trim never removes an
		// unacknowledged generation): delivered again, or requested again
		// for the same source and content, handled idempotently. Other
		// content under a number the chain has is ErrReused.
		done, err := d.repeated(ctx, it, &head)
		if done {
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				it.aborted = true
				return
			}
			it.err, it.stage = err, "build"
			return
		}
	}
	if it.rec.ResumedFrom != 0 {
		var err error
		if head, err = d.resumeBase(ctx, it); err != nil {
			if ctx.Err() != nil {
				it.aborted = true
				return
			}
			it.err, it.stage = err, "build"
			return
		}
		full = d.Head()
	}
	if gen <= head.Gen {
		it.err = fmt.Errorf("%w: gen %d, chain head is gen %d (a chain never goes backwards; publish a higher generation, or, when the run restarted from an earlier checkpoint, declare it: snapd request-snapshot --resumed-from R, request_snapshot(..., resumed_from=R))", ErrNotNewer, gen, head.Gen)
		it.stage = "build"
		return
	}
	if head.Gen != 0 && gen != head.Gen+1 {
		d.m.gaps.Inc()
		d.log.Warn("generation gap: chaining to the last snapshotted generation", "gen", gen, "prev_gen", head.Gen)
	}
	// The resume this generation completes (a pending one), or the run's
	// last one, carried.
	rs := full.Resume
	if r := full.Resuming; r != nil {
		rs = &ResumeState{From: r.From, AbandonedLast: r.AbandonedLast, AtGen: gen}
	}
	fp := sourceFingerprint(it.rec.Source)
	var next *ChainState
	err := d.retry(ctx, "build", gen, func() error {
		var err error
		next, err = d.buildOnce(ctx, it, &head, rs, fp)
		return err
	})
	switch {
	case err == nil:
		// Persisted: the generation is in the chain even if the daemon
		// is stopping now (an unrecorded outcome is redelivered and
		// recognized after a restart).
		d.headMu.Lock()
		d.head = *next
		d.headMu.Unlock()
		it.head = next
		d.m.lastGen.Set(float64(gen))
	case ctx.Err() != nil:
		it.aborted = true
		d.ring.Remove(gen)
	default:
		d.ring.Remove(gen)
		it.err, it.stage = err, "build"
	}
}

// finishStage completes every record in the WAL in log order, hands
// finished generations to the Publisher (and what it leaves to the resend
// queue), trims the ring and reclaims STATE_DIR/gens (Retention.Gens).
func (d *Daemon) finishStage(ctx context.Context, in <-chan *item) {
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-in:
			if it.aborted || !d.publishRank(ctx, it) {
				it.release()
				return
			}
			d.finish(ctx, it)
		}
	}
}

func (d *Daemon) finish(ctx context.Context, it *item) {
	rec := it.rec
	defer d.act.done(it)
	defer d.fin.set(rec.End)
	r := &it.res
	r.Gen, r.Source = rec.Gen, rec.Source
	if it.skip {
		if err := d.consumer.Skip(rec); err != nil {
			d.log.Error("wal: skip", "gen", rec.Gen, "error", err)
			d.fail("wal", rec.Gen, err)
		}
		d.m.requests.WithLabelValues("duplicate").Inc()
		d.log.Debug("request already handled", "gen", rec.Gen, "pos", rec.Pos.String())
		return
	}
	d.m.queueDepth.Dec()
	d.inflight.done(it)
	if it.coalesced != 0 && it.err == nil {
		d.m.queueDepth.Inc() // was already decremented when coalesced
		it.err = fmt.Errorf("coalesced: superseded by the request for gen %d (queue full, policy coalesce)", it.coalesced)
		it.stage = "admit"
		d.m.requests.WithLabelValues("coalesced").Inc()
	}
	state, msg := wal.Done, ""
	var published Published
	if it.err != nil {
		state, msg = wal.Failed, it.err.Error()
	} else {
		// Published before the WAL acknowledgement: a done request is
		// committed and its push queued, or its publish job queued (or
		// its failure is in last_error). A commit in progress is
		// finished even when the daemon is stopping.
		// (A redelivered generation was published again at Start.)
		if !r.Redelivered && it.rank == nil {
			t := d.now()
			it.stageStart("git")
			// Bounded, but scaled with the size: 5 minutes plus 1 s
			// per MiB (a 1.5 GB WTXT on a loaded machine needs more
			// than 5 minutes).
			gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute+time.Duration(r.WTXTBytes>>20)*time.Second)
			published = d.out.publish(gctx, r, it.head, rec.Time)
			cancel()
			it.stage1("git", d.now().Sub(t))
		}
	}
	if _, err := d.consumer.Complete(rec, state, msg); err != nil {
		// The outcome is lost; the request is delivered again after a
		// restart and handled idempotently.
		d.log.Error("wal: record outcome", "gen", rec.Gen, "error", err)
		d.fail("wal", rec.Gen, err)
	}
	r.State, r.StateName = state, state.String()
	r.Latency = d.now().Sub(rec.Time)
	if it.err != nil {
		r.Error = msg
		if it.coalesced == 0 {
			d.m.requests.WithLabelValues("failed").Inc()
			d.fail(it.stage, rec.Gen, it.err)
			d.log.Error("request failed", "gen", rec.Gen, "source", rec.Source, "stage", it.stage, "error", it.err)
		}
		d.record(r)
		return
	}
	d.m.requests.WithLabelValues("done").Inc()
	if !r.Redelivered {
		if it.rank == nil {
			d.m.snapshots.Inc()
		}
		for st, dt := range r.Stages {
			d.m.stage.WithLabelValues(st).Observe(dt.Seconds())
		}
	}
	if it.rank != nil {
		// Pushed (rankpublish.go logged it); nothing in the ring.
		d.m.lastSuccess.Set(float64(d.now().Unix()))
		d.record(r)
		return
	}
	d.m.lastSuccess.Set(float64(d.now().Unix()))
	// Trim the ring beyond RingKeep, never the chain head nor entries
	// built ahead of their acknowledgement (newer than this one).
	head := d.Head().Gen
	d.ring.Trim(d.config().RingKeep, func(gen uint64) bool { return gen == head || gen >= rec.Gen })
	d.retainGens(ctx)
	args := []any{"gen", rec.Gen, "format", r.Format, "source_bytes", r.SourceBytes, "wtxt_bytes", r.WTXTBytes,
		"delta_bytes", r.DeltaBytes, "base_gen", r.BaseGen, "merkle_this", r.MerkleThis}
	switch {
	case r.Commit != "":
		args = append(args, "commit", r.Commit)
	case published.Pending != "":
		// Left to queued work or another node (e.g. the registry job
		// commits it: "oci generation committed").
		args = append(args, "commit", published.Pending)
	}
	d.log.Info("generation snapshotted", append(args, "latency", r.Latency.Round(time.Millisecond), "redelivered", r.Redelivered)...)
	if len(r.NonFinite) > 0 {
		d.log.Warn("generation introduces NaN/Inf", "gen", rec.Gen, "base_gen", r.BaseGen, "arrays", nonFiniteSummary(r.NonFinite))
	}
	d.record(r)
}
