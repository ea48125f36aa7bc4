package pipeline

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/internal/backoff"
	"github.com/snapd-ml/snapd/internal/safeopen"
	"github.com/snapd-ml/snapd/pipeline/ring"
	"github.com/snapd-ml/snapd/snapshot"
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
		if (cfg.Policy == PolicyBlock && jobs >= cfg.QueueMax) || len(buf)-jobs >= maxSkipped {
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

// stageStart logs the start of a stage of the item's generation.
func (it *item) stageStart(name string) {
	if it.log != nil {
		it.log.Info("stage started", "stage", name, "gen", it.rec.Gen)
	}
	it.act.start(it, name)
}

// stage1 adds dt to the time the item spent in stage name and logs the
// stage's end.
func (it *item) stage1(name string, dt time.Duration) {
	it.act.finish(it, name)
	if it.log != nil {
		it.log.Info("stage finished", "stage", name, "gen", it.rec.Gen, "duration", dt)
	}
	if it.res.Stages == nil {
		it.res.Stages = map[string]time.Duration{}
	}
	it.res.Stages[name] += dt
}

// permanent marks an error that retrying cannot fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// transient reports whether err may go away by itself: disk full, quota,
// I/O errors, resource exhaustion, a source still being written
// (incomplete).
func transient(err error) bool {
	var p permanent
	if errors.As(err, &p) {
		return false
	}
	var inc incomplete
	if errors.As(err, &inc) {
		return true
	}
	for _, e := range transientErrnos() {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// retry runs fn until it succeeds, fails permanently or ctx ends,
// backing off exponentially (RetryBase..RetryMax, internal/backoff) after
// transient errors, logging by backoff.LogLimiter's rule (the first
// failure, a new error, else at most one a minute). The failing request holds the line: later
// requests wait (their order is the chain's order).
func (d *Daemon) retry(ctx context.Context, stage string, gen uint64, fn func() error) error {
	var logs backoff.LogLimiter
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !transient(err) || ctx.Err() != nil {
			return err
		}
		delay := backoff.Policy{Base: d.config().RetryBase, Max: d.config().RetryMax}.Delay(attempt)
		d.m.retries.WithLabelValues(stage).Inc()
		d.fail(stage, gen, fmt.Errorf("attempt %d (will retry in %s): %w", attempt, delay, err))
		if log, _, suppressed := logs.Failure(d.now(), err.Error()); log {
			d.log.Warn("transient failure, retrying", "stage", stage, "gen", gen, "attempt", attempt, "retry_in", delay, "suppressed", suppressed, "error", err)
		}
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
	}
}

// sourcePath checks a request's file source (directory sources are read
// by prepareDir). The source is opened without blocking and judged by the
// opened descriptor (safeopen), so a FIFO or device — also one swapped in
// after a check — is refused at once instead of hanging the daemon.
func sourcePath(gen uint64, src string) (string, error) {
	f, err := safeopen.Open(src, safeopen.AllowDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", permanent{fmt.Errorf("%w: gen %d: %s does not exist", ErrSource, gen, src)}
		}
		if errors.Is(err, safeopen.ErrNotRegular) {
			return "", permanent{fmt.Errorf("%w: gen %d: not a regular file or directory: %v", ErrSource, gen, err)}
		}
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if st.Mode().IsRegular() {
		return src, nil
	}
	return "", permanent{fmt.Errorf("%w: gen %d: %s is not a regular file or directory", ErrSource, gen, src)}
}

// prepare pins the request's generation (when its source is in the
// generation store) and decodes the source.
func (d *Daemon) prepare(ctx context.Context, it *item) error {
	it.release()
	gen, src := it.rec.Gen, it.rec.Source
	if err := snapshot.CheckGen(gen); err != nil {
		// Written by a tool that does not bound it (wal.Writer does): a
		// chain must not reach a generation that no later one can follow
		// or that the WTXT parser rejects.
		return permanent{fmt.Errorf("request: %w", err)}
	}
	if it.rec.WorldSize > 0 {
		// A sharded job: one rank's shard is not a generation of its own.
		return permanent{fmt.Errorf("%w: gen %d: a rank request (rank %d of %d) needs a daemon configured with ranks: (store/oci/ranks)", ErrSource, gen, it.rec.Rank, it.rec.WorldSize)}
	}
	// A store entry, or a file inside a directory generation, is pinned.
	if g, ok := d.gens.GenOf(src); ok {
		if g != gen {
			return permanent{fmt.Errorf("%w: request for gen %d names %s, which is generation %d", ErrSource, gen, src, g)}
		}
		pin, err := d.gens.Pin(ctx, gen)
		if errors.Is(err, snapshot.ErrGenNotFound) {
			return permanent{fmt.Errorf("%w: gen %d: %s is not published (or was reclaimed): %v", ErrSource, gen, src, err)}
		}
		if err != nil {
			return err
		}
		it.pin = pin
	}
	if st, err := os.Stat(src); err == nil && st.IsDir() {
		return d.prepareDir(ctx, it)
	}
	path, err := sourcePath(gen, src)
	if err != nil {
		return err
	}
	m, err := snapshot.MapFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, safeopen.ErrNotRegular) {
			return permanent{fmt.Errorf("%w: gen %d: %v", ErrSource, gen, err)}
		}
		return err
	}
	it.m = m
	// The source may change while mapped (a trainer or an attacker
	// truncates it): decoders and encoder workers read it only through
	// the fault-safe view, so a vanished page fails this generation
	// (snapshot.ErrSourceFault) instead of killing the daemon with SIGBUS.
	gm := m.Guarded()
	c, err := d.deps.Registry.Detect(path, gm, gm.Size())
	if err != nil {
		return permanent{fmt.Errorf("%w: gen %d: %s: %v", ErrSource, gen, path, err)}
	}
	s, err := c.Decode(ctx, gm, gm.Size(), formats.DecodeOptions{Name: path, Diagnostic: func(dg formats.Diagnostic) {
		d.log.Info("source diagnostic", "gen", gen, "path", path, "where", dg.Where, "note", dg.Message)
	}})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if strings.HasPrefix(err.Error(), c.Name()+":") { // the codec named itself
			return permanent{fmt.Errorf("%w: gen %d: %s: %w", ErrSource, gen, path, err)}
		}
		return permanent{fmt.Errorf("%w: gen %d: %s: %s: %w", ErrSource, gen, path, c.Name(), err)}
	}
	it.snap = s
	it.res.Format, it.res.SourceBytes = c.Name(), m.Size()
	d.m.bytes.WithLabelValues("source").Add(float64(m.Size()))
	return nil
}

// buildStage encodes, armors, makes the delta, writes the ring and
// persists the chain state; it is the only writer of the chain head.
func (d *Daemon) buildStage(ctx context.Context, in <-chan *item, out chan<- *item) {
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-in:
			if !it.skip && it.coalesced == 0 && it.err == nil && !it.aborted {
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

// fromRing fills the result of a request for a generation already in the
// ring (a redelivery or duplicate) from the ring; nothing is rewritten.
func (d *Daemon) fromRing(it *item, head *ChainState) {
	gen := it.rec.Gen
	p := ringPath(d.ringDir, gen, ExtWTXT)
	st, err := os.Stat(p)
	if err != nil {
		return
	}
	r := &it.res
	r.Redelivered, r.WTXT, r.WTXTBytes = true, p, st.Size()
	if gen == head.Gen {
		r.SHA256All, r.MerklePrev, r.MerkleThis, r.BaseGen = head.SHA256All, head.MerklePrev, head.MerkleThis, head.PrevGen
	} else if sb, err := os.ReadFile(armor.SealPath(p)); err == nil {
		if s, err := armor.ParseSeal(sb); err == nil {
			r.SHA256All, r.MerklePrev, r.MerkleThis = hexs(s.SHA256All), hexs(s.MerklePrev), hexs(s.MerkleThis)
		}
	} else if f, err := os.Open(p); err == nil {
		if h, err := wtxt.ReadHeader(f); err == nil && !h.Pending {
			r.SHA256All, r.MerklePrev, r.MerkleThis = hexs(h.SHA256All), hexs(h.MerklePrev), hexs(h.MerkleThis)
		}
		f.Close()
	}
	fl := d.ring.Lookup(gen)
	r.Delta, r.DeltaBytes, r.WSUM, r.Seal = fl.Delta, fl.DeltaBytes, fl.WSUM, fl.Seal
}

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
	headRoot, err := head.Root()
	if err != nil {
		return nil, permanent{err}
	}
	opts := wtxt.EncodeOptions{RowsPerChunk: cfg.RowsPerChunk, SignKey: cfg.SignKey, HMACKey: cfg.HMACKey, PrevMerkle: headRoot.MerkleThis, Stream: cfg.Stream, Workers: cfg.Workers}
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
			// The NaN/Inf check reads the WTXT by name: it runs as soon as
			// the WTXT's commit is done, beside the delta.
			nf := d.checkNonFiniteAsync(ctx, it, g, base)
			err = d.delta(ctx, it, g, bf, head.SHA256All)
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
			d.drawPicture(ctx, it, base, g.PlainPath(), head.Gen, gen, &cfg)
		} else {
			d.log.Warn("no delta: the previous generation is not in the ring", "gen", gen, "base_gen", head.Gen, "error", err)
		}
	}

	if err := g.Wait(); err != nil {
		return nil, err
	}
	if head.Gen == 0 {
		d.checkNonFinite(ctx, it, "", g.PlainPath()) // the first generation: against nothing
	}
	// Commit point: the chain state.
	t = d.now()
	next := newChainState(gen, res.Root, head, d.now().UTC())
	next.NonFinite = it.res.NonFinite
	next.Resume = rs
	var from uint64
	if rs != nil && rs.AtGen == gen {
		from = rs.From
	}
	if err := d.writeGenRequest(it, res, fp, from); err != nil {
		return nil, err
	}
	if err := writeChainState(d.ring, cfg.StateDir, next); err != nil {
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

// delta writes gen's DELTA v2 against the plaintext base.
//
// Both files are the daemon's own (the base was verified when it was made,
// the target was just encoded), so the delta indexes them by structure
// only instead of re-verifying ~2 × the WTXT size of hashing; baseAll is
// the base's sha256_all from the chain state. The target is g's plaintext
// WTXT (read through g.PlainFile while its rename into place may still be
// in progress).
func (d *Daemon) delta(ctx context.Context, it *item, g *ring.Gen, base *os.File, baseAll string) error {
	bst, err := base.Stat()
	if err != nil {
		return err
	}
	tf := g.PlainFile()
	if tf == nil {
		if tf, err = os.Open(g.PlainPath()); err != nil {
			return err
		}
		defer tf.Close()
	}
	tst, err := tf.Stat()
	if err != nil {
		return err
	}
	var info *wtxt.DeltaInfo
	dl, err := g.WriteDelta(func(w io.Writer) error {
		var err error
		opts := wtxt.DeltaOptions{Trusted: true}
		if b, herr := hex.DecodeString(baseAll); herr == nil && len(b) == 32 {
			opts.BaseSHA256All = (*[32]byte)(b)
		}
		info, err = wtxt.MakeDeltaWith(ctx, w, base, bst.Size(), tf, tst.Size(), opts)
		if err != nil && ctx.Err() == nil && !transient(err) {
			return permanent{fmt.Errorf("gen %d: delta against gen %d: %w", it.rec.Gen, it.res.BaseGen, err)}
		}
		return err
	}, tst.Size())
	if err != nil {
		return err
	}
	it.res.DeltaChunks, it.res.DeltaChanged = info.Chunks, info.Changed
	if dl.Path == "" {
		// Dense change (every chunk differs): the delta is no smaller than
		// the snapshot, so it earns nothing in the ring or in Git.
		d.log.Info("delta not smaller than the snapshot; not kept", "gen", it.rec.Gen, "delta_bytes", dl.Bytes, "wtxt_bytes", tst.Size())
		return nil
	}
	it.res.Delta, it.res.DeltaBytes = dl.Path, dl.Bytes
	return nil
}

// finishStage completes every record in the WAL in log order, commits
// finished generations to Git, hands them to the resend queue and trims
// the ring.
func (d *Daemon) finishStage(ctx context.Context, in <-chan *item) {
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-in:
			if it.aborted {
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
		// Git before the WAL acknowledgement: a done request is committed
		// and queued (or its failure is in last_error). A commit in
		// progress is finished even when the daemon is stopping.
		// (A redelivered generation was recommitted at Start.)
		if !r.Redelivered {
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
		d.m.snapshots.Inc()
		for st, dt := range r.Stages {
			d.m.stage.WithLabelValues(st).Observe(dt.Seconds())
		}
	}
	d.m.lastSuccess.Set(float64(d.now().Unix()))
	d.trim(rec.Gen)
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

// trim removes the oldest ring entries beyond RingKeep. acked is the
// generation just acknowledged in the WAL: newer entries (built ahead of
// their acknowledgement) are never removed, nor is the chain head.
func (d *Daemon) trim(acked uint64) {
	head := d.Head().Gen
	d.ring.Trim(d.config().RingKeep, func(gen uint64) bool { return gen == head || gen >= acked })
}
