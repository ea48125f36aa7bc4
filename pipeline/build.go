package pipeline

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/pipeline/ring"
	"github.com/snapd-ml/snapd/snapshot"
)

// buildOnce produces generation it.rec.Gen's ring entry (with its request
// record, fingerprint fp of the source) and persists the new chain head,
// whose Resume is rs. Any failure leaves no file visible under a final
// name except complete ones of this generation, which the caller removes.
func (d *Daemon) buildOnce(ctx context.Context, it *item, head *ChainState, rs *ResumeState, fp string) (*ChainState, error) {
	cfg := d.config()
	gen := it.rec.Gen
	s := it.snap
	it.res.BaseGen = head.Gen
	s.Meta = snapshot.Meta{Schema: cfg.Schema, Gen: gen, TS: it.rec.Time.UTC().Truncate(time.Second), Build: cfg.Build, Host: cfg.Host, Cuda: cfg.Cuda}
	s.UserMeta = it.rec.Meta
	headRoot, err := head.Root()
	if err != nil {
		return nil, permanent{err}
	}
	opts := wtxt.EncodeOptions{RowsPerChunk: cfg.RowsPerChunk, SignKey: cfg.SignKey, HMACKey: cfg.HMACKey, PrevMerkle: headRoot.MerkleThis, Stream: cfg.Stream, Workers: cfg.Workers}
	if p := d.directOCI(&cfg); p != nil {
		// Straight to the registry layout (ocidirect.go); when the
		// registry does not take it, the generation is built below.
		next, ok, err := d.buildDirect(ctx, it, head, rs, fp, &cfg, opts, p)
		if ok || err != nil {
			return next, err
		}
	}
	g := d.ring.Begin(gen, ring.Options{Recipients: cfg.Recipients, SignKey: cfg.SignKey})
	defer g.Close() // no goroutine outlives build

	// Encode. When a plaintext delta follows, the WTXT's fsync runs while
	// the delta is built (g.Wait before anything depends on it).
	t := d.now()
	it.stageStart("encode")
	var res *wtxt.Result
	fill := func(w io.Writer) error {
		var err error
		res, err = wtxt.Encode(ctx, it.meter.Wrap(w), s, opts)
		if err != nil && ctx.Err() == nil && !transient(err) {
			return permanent{fmt.Errorf("gen %d: wtxt encode: %w", gen, err)}
		}
		return err
	}
	if err := g.WriteWTXT(fill, head.Gen != 0); err != nil {
		return nil, err
	}
	it.stage1("encode", d.now().Sub(t))
	// NaN/Inf the generation introduces, from the encoder's counts
	// (nonfinite.go); what they leave is compared beside the delta.
	recheck, counted := nonFiniteFromCounts(it, head, res)
	g.SetSeal(armor.Seal{Root: res.Root})
	if g.Encrypted() {
		t = d.now()
		seal, err := g.Armor()
		if err != nil {
			return nil, err
		}
		it.res.Seal = seal
		it.stage1("armor", d.now().Sub(t))
	}
	if cfg.Stream {
		p, err := g.WriteWSUM(res.WSUM)
		if err != nil {
			return nil, err
		}
		it.res.WSUM = p
	}

	// Delta against the chain head.
	if head.Gen != 0 {
		base := g.BasePath(head.Gen)
		if bf, err := os.Open(base); err == nil {
			t = d.now()
			// The NaN/Inf comparison of the files reads the WTXT by name:
			// it runs as soon as the WTXT's commit is done, beside the
			// delta.
			nf := func() {}
			if !counted || recheck != nil {
				nf = d.checkNonFiniteAsync(ctx, it, g, base, recheck)
			}
			plan, err := it.delta(ctx, d.log, g, bf, head.SHA256All)
			bf.Close()
			if werr := g.Wait(); err == nil {
				err = werr
			}
			if err == nil {
				err = g.SealDelta(it.res.Delta)
			}
			nf()
			if err != nil {
				return nil, err
			}
			it.stage1("delta", d.now().Sub(t))
			d.drawPicture(ctx, it, base, g.PlainPath(), plan.Base, plan.Target, head.Gen, gen, &cfg)
		} else {
			d.log.Warn("no delta: the previous generation is not in the ring", "gen", gen, "base_gen", head.Gen, "error", err)
		}
	}

	if err := g.Wait(); err != nil {
		return nil, err
	}
	t = d.now()
	next, from, err := d.persistHead(it, head, rs, fp, &cfg, res)
	if err != nil {
		return nil, err
	}
	g.Committed(head.Gen)
	it.stage1("state", d.now().Sub(t))
	wtxtPath := g.WTXTPath()
	st, _ := os.Stat(wtxtPath)
	if st != nil {
		it.res.WTXTBytes = st.Size()
	}
	it.res.WTXT = wtxtPath
	it.res.BaseGen = head.Gen
	it.res.ResumedFrom = from
	it.res.SHA256All, it.res.MerklePrev, it.res.MerkleThis = next.SHA256All, next.MerklePrev, next.MerkleThis
	d.m.bytes.WithLabelValues("wtxt").Add(float64(it.res.WTXTBytes))
	d.m.bytes.WithLabelValues("delta").Add(float64(it.res.DeltaBytes))
	return next, nil
}

// persistHead is a build's commit point: generation it.rec.Gen's request
// record, then the new chain head (res's root and NaN/Inf counts, the
// request's metadata, the resume rs carries) in the state file. It
// returns the new head and the generation a declared resume chained it
// to (0: none).
func (d *Daemon) persistHead(it *item, head *ChainState, rs *ResumeState, fp string, cfg *Config, res *wtxt.Result) (*ChainState, uint64, error) {
	gen := it.rec.Gen
	next := newChainState(gen, res.Root, head, d.now().UTC())
	next.NonFinite = it.res.NonFinite
	next.Held = heldNonFinite(res.Arrays)
	next.Meta = it.rec.Meta
	next.Resume = rs
	var from uint64
	if rs != nil && rs.AtGen == gen {
		from = rs.From
	}
	if err := it.writeRequest(d.ring, res, fp, from); err != nil {
		return nil, 0, err
	}
	if err := writeChainState(d.ring, cfg.StateDir, next); err != nil {
		return nil, 0, err
	}
	return next, from, nil
}

// delta writes the item's DELTA v2 against the plaintext base.
//
// Both files are the daemon's own (the base was verified when it was made,
// the target was just encoded), so the delta indexes them by structure
// only instead of re-verifying ~2 × the WTXT size of hashing; baseAll is
// the base's sha256_all from the chain state. The target is g's plaintext
// WTXT (read through g.PlainFile while its rename into place may still be
// in progress). The delta is planned first (wtxt.PlanDelta: the indexes
// of both files, no chunk data): when it would be no smaller than the
// target, as after a dense update, it is not written; the counts of
// chunks and changed chunks are recorded either way. The plan (its two
// indexes) is returned when err is nil.
func (it *item) delta(ctx context.Context, log *slog.Logger, g *ring.Gen, base *os.File, baseAll string) (*wtxt.DeltaPlan, error) {
	bst, err := base.Stat()
	if err != nil {
		return nil, err
	}
	tf := g.PlainFile()
	if tf == nil {
		if tf, err = os.Open(g.PlainPath()); err != nil {
			return nil, err
		}
		defer tf.Close()
	}
	tst, err := tf.Stat()
	if err != nil {
		return nil, err
	}
	opts := wtxt.DeltaOptions{Trusted: true}
	if b, herr := hex.DecodeString(baseAll); herr == nil && len(b) == 32 {
		opts.BaseSHA256All = (*[32]byte)(b)
	}
	wrap := func(err error) error {
		if err != nil && ctx.Err() == nil && !transient(err) {
			return permanent{fmt.Errorf("gen %d: delta against gen %d: %w", it.rec.Gen, it.res.BaseGen, err)}
		}
		return err
	}
	plan, err := wtxt.PlanDelta(ctx, base, bst.Size(), tf, tst.Size(), opts)
	if err != nil {
		return nil, wrap(err)
	}
	it.res.DeltaChunks, it.res.DeltaChanged = plan.Info.Chunks, plan.Info.Changed
	if plan.Size >= tst.Size() {
		// Dense change (nearly every chunk differs): the delta would be
		// no smaller than the snapshot, so it earns nothing in the ring
		// or in Git; its size is known from the two indexes, so it is
		// not written at all.
		log.Info("delta not smaller than the snapshot; not built", "gen", it.rec.Gen, "delta_bytes", plan.Size, "wtxt_bytes", tst.Size(),
			"chunks", plan.Info.Chunks, "changed", plan.Info.Changed)
		return plan, nil
	}
	dl, err := g.WriteDelta(func(w io.Writer) error { return wrap(plan.Write(w)) }, tst.Size())
	if err != nil {
		return nil, err
	}
	if dl.Path == "" {
		// The safety net: the written delta (encrypted, when the ring
		// is) is no smaller than the snapshot; WriteDelta removed it.
		log.Info("delta not smaller than the snapshot; not kept", "gen", it.rec.Gen, "delta_bytes", dl.Bytes, "wtxt_bytes", tst.Size())
		return plan, nil
	}
	it.res.Delta, it.res.DeltaBytes = dl.Path, dl.Bytes
	return plan, nil
}
