package wtxt

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/snapd-ml/snapd/snapshot"
)

// EncodeSkeleton writes to skel the skeleton that SplitIndexed would write
// for the WTXT Encode(ctx, w, s, opts) writes, byte for byte, with the same
// segment cut (sopts.SegmentSize/MaxSegment, defaults as SplitIndexed), and
// returns Encode's Result, the segments and their keys exactly as
// SplitIndexed returns them. A segment that known recognizes (by its
// SegmentKey) is neither read nor hashed again: its seg line takes the known
// digest and sink is not called for it; every other segment's raw bytes are
// read from the snapshot's arrays, hashed (its digest), and handed to sink
// (when not nil) in file order, as SplitIndexed does. No base64 is produced.
//
// "Again" because every chunk is read once for its ch line (sha256,
// crc32c) and segment key, as the profile requires; a known segment's
// bytes are then dropped unhashed. The WTXT text itself is never
// produced; Result.Written is the length it would have (see EncodedSize).
// known is called once per segment, in file order, from one goroutine at
// a time (not necessarily the caller's), and may block; sink is called
// from one goroutine, in file order, with a context canceled when ctx is
// or the call fails, and may block (that is back-pressure: the workers
// stop a few segments ahead). A chunk longer than sopts.MaxSegment is
// refused (CheckGeometry) before anything is read, where SplitIndexed
// would refuse it when it reached it.
//
// With sopts.WholeArray and sopts.StreamSink, an array of 1..WholeArray
// bytes is one segment instead (not the split's cut): its digest is the
// array's sha256, known is not asked about it, and StreamSink gets a
// reader of its bytes (see SplitOptions.WholeArray).
//
// The work is the four SHA-256 passes of Encode (array sha256 with fastxor,
// array HMAC, each chunk's sha256 with its crc32c, sha256_all) plus one
// SHA-256 of every segment known does not recognize (none for a
// whole-array segment); they run concurrently
// on opts.Workers workers (0: GOMAXPROCS):
//
//   - the arrays are hashed in file order, sha256 and HMAC from one read
//     of each block on two goroutines, and sha256_all follows one array
//     behind (it needs the arr line);
//   - meanwhile the segments are cut, read (each chunk summed while it is
//     in cache), keyed and, unless known, hashed by the workers and handed
//     to sink in file order, so that uploads start at once;
//   - when both want the cores, the header's hashes go first (cpuGate):
//     they decide when the skeleton is done, and the workers fill the
//     time sha256_all of the last array would otherwise run alone.
//
// The skeleton starts with the header, which needs sha256_all; until it is
// known the segments' ch lines wait as chunk sums (36 bytes a chunk, at
// most maxChunkSums of them: beyond that the segment pipeline waits for
// the header). Memory is otherwise bounded by a few segments per worker.
// The bytes written and the values returned do not depend on Workers or
// GOMAXPROCS. Errors are Encode's for a bad snapshot (a failing or short
// array source names the array and offset) and sink's, wrapped as
// SplitIndexed wraps them.
func EncodeSkeleton(ctx context.Context, skel io.Writer, s *snapshot.Snapshot, opts EncodeOptions, sopts SplitOptions, known KnownSegment, sink SegmentSink) (*Result, []Segment, []SegmentKey, error) {
	plans, ext, workers, err := prepare(s, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	if sopts.SegmentSize <= 0 {
		sopts.SegmentSize = DefaultSegmentSize
	}
	if sopts.MaxSegment <= 0 {
		sopts.MaxSegment = DefaultMaxSegment
	}
	for _, p := range plans {
		// Chunk 0 is an array's longest.
		if _, n := p.geo.chunk(0); n > sopts.MaxSegment {
			return nil, nil, nil, &Error{File: sopts.File, Array: p.name, Chunk: 0, Check: CheckGeometry,
				Msg: fmt.Sprintf("len=%d exceeds the segment limit of %d bytes", n, sopts.MaxSegment)}
		}
	}
	maxSums := int64(maxChunkSums)
	if opts.maxSums > 0 {
		maxSums = opts.maxSums
	}
	whole := sopts.WholeArray > 0 && sopts.StreamSink != nil
	// Whole-array segments wait for their array's sha256: the header's
	// hashes then go first whatever SegmentsFirst says.
	gate := newCPUGate(workers, sopts.SegmentsFirst && !whole)
	for _, p := range plans {
		p.gate = gate
	}
	e := &skelEncoder{gate: gate,
		plans: plans, workers: workers, sopts: sopts, known: known, sink: sink,
		w: bufio.NewWriterSize(skel, 64<<10), maxPending: maxSums,
		hdr: make(chan struct{}), free: make(bufFree, 4*workers),
		hashed: make([]chan struct{}, len(plans)),
	}
	for i := range e.hashed {
		e.hashed[i] = make(chan struct{})
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return e.hashHeader(gctx, s, opts, ext) })
	g.Go(func() error { return e.segments(gctx) })
	if whole {
		g.Go(func() error { return e.stream(gctx) })
	}
	if err := g.Wait(); err != nil {
		return nil, nil, nil, err
	}
	if opts.Stream {
		e.res.WSUM = wsumLine(e.res, opts.SignKey)
	}
	e.res.Written = int64(len(e.res.Header)) + e.bodyLen
	return e.res, e.segs, e.keys, nil
}

// skelEncoder is one EncodeSkeleton call.
type skelEncoder struct {
	gate       *cpuGate // the header's hashes first (see cpuGate)
	plans      []*arrPlan
	workers    int
	sopts      SplitOptions
	known      KnownSegment
	sink       SegmentSink
	w          *bufio.Writer
	maxPending int64

	// Set by hashHeader before hdr is closed.
	hdr chan struct{}
	res *Result
	// hashed[i] is closed once plans[i]'s sha256 (and hmac) are set.
	hashed []chan struct{}

	free bufFree
	// cacheTries and cacheHits count the segments that went through the
	// segment cache and those it recognised (useCache).
	cacheTries, cacheHits atomic.Int64
	// Owned by the emitter (segments).
	segs          []Segment
	keys          []SegmentKey
	pending       []*segJob // emitted, their skeleton lines not yet written
	pendingChunks int64
	headerOut     bool
	bodyLen       int64 // of the WTXT Encode writes
	line          []byte
}

// hashHeader runs the array passes and sha256_all, the latter one array
// behind the former, and publishes the Result and header (e.hdr).
func (e *skelEncoder) hashHeader(ctx context.Context, s *snapshot.Snapshot, opts EncodeOptions, ext bool) error {
	gen := FormatGen(s.Meta.Gen)
	hashed := make(chan *arrPlan, len(e.plans))
	var all [32]byte
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(hashed)
		for i, p := range e.plans {
			if err := hashArrays(gctx, e.plans[i:i+1], opts.HMACKey, gen, e.workers, false, 0); err != nil {
				return err
			}
			close(e.hashed[i])
			p.setLines()
			hashed <- p
		}
		return nil
	})
	g.Go(func() error {
		h := sha256.New()
		for p := range hashed {
			if err := hashAllArray(gctx, h, p); err != nil {
				return err
			}
		}
		h.Sum(all[:0])
		return gctx.Err()
	})
	if err := g.Wait(); err != nil {
		return err
	}
	res, head := newResult(s, opts, e.plans, ext)
	res.finish(all)
	if opts.Stream {
		res.Header = pendingHeader(head)
	} else {
		res.Header = rootHeader(head, res, opts.SignKey)
	}
	e.res = res
	close(e.hdr)
	return nil
}

// segJob is one segment on its way through the workers to the emitter.
type segJob struct {
	p    *arrPlan
	seg  Segment
	sums []chunkSum
	key  SegmentKey
	buf  []byte // the raw bytes; nil once known recognized the segment
	hit  bool   // known recognized it
	err  error

	prev   <-chan struct{} // the previous segment's asked
	asked  chan struct{}   // closed once known was asked (or will not be)
	done   chan struct{}   // closed when the worker is through
	isLast bool            // the array's last segment

	// hashed, for a whole-array segment (SplitOptions.WholeArray), is
	// closed once its array's sha256 is known: its digest. Such a segment
	// goes to the stream sink (skelEncoder.stream), not to the sink, and
	// known is not asked about it: the sink reuses it by digest.
	hashed <-chan struct{}
}

// segments cuts the segments, has the workers read, sum, key and hash
// them, and emits them in file order: sink, then the skeleton lines (held
// as chunk sums until the header is known).
func (e *skelEncoder) segments(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan *segJob)
	window := make(chan *segJob, 2*e.workers)
	go e.cut(ctx, jobs, window)
	done := make(chan struct{})
	for range e.workers {
		go func() {
			defer func() { done <- struct{}{} }()
			var ic []IndexChunk
			for j := range jobs {
				ic = e.work(ctx, j, ic)
				close(j.done)
			}
		}()
	}
	err := e.emit(ctx, window)
	cancel()
	for range window { // the producer exits on ctx; drain what it queued
	}
	for range e.workers {
		<-done
	}
	return err
}

// cut enumerates the segments in file order, cut greedily as
// SplitIndexed cuts them, and hands each to a worker (jobs) and, in the
// same order, to the emitter (window).
func (e *skelEncoder) cut(ctx context.Context, jobs, window chan<- *segJob) {
	defer close(window)
	defer close(jobs)
	prev := make(chan struct{})
	close(prev)
	// send hands a job to a worker and, in the same order, to the
	// emitter; false when ctx ends first.
	send := func(job *segJob) bool {
		prev = job.asked
		select {
		case jobs <- job:
		case <-ctx.Done():
			close(job.asked)
			return false
		}
		select {
		case window <- job:
			return true
		case <-ctx.Done():
			return false
		}
	}
	size := e.sopts.SegmentSize
	for pi, p := range e.plans {
		nch := p.geo.numChunks()
		if e.wholeArray(p) {
			if !send(&segJob{p: p, seg: Segment{Size: p.nbytes, Array: p.name, Chunks: nch},
				prev: prev, asked: make(chan struct{}), done: make(chan struct{}), isLast: true, hashed: e.hashed[pi]}) {
				return
			}
			continue
		}
		for i := int64(0); i < nch; {
			j, n := i, int64(0)
			for j < nch {
				_, l := p.geo.chunk(j)
				if j > i && l > size-n { // n+l > size, overflow-safe
					break
				}
				n += l
				j++
			}
			if !send(&segJob{p: p, seg: Segment{Size: n, Array: p.name, FirstChunk: i, Chunks: j - i},
				prev: prev, asked: make(chan struct{}), done: make(chan struct{}), isLast: j == nch}) {
				return
			}
			i = j
		}
	}
}

// work reads, sums and keys j's chunks, asks known in file order and,
// unless it recognizes the segment, hashes the bytes. ic is scratch space,
// returned for reuse.
func (e *skelEncoder) work(ctx context.Context, j *segJob, ic []IndexChunk) []IndexChunk {
	asked := false
	defer func() {
		if !asked {
			close(j.asked)
		}
	}()
	p, seg := j.p, j.seg
	if j.hashed != nil {
		asked = true
		return e.workWhole(ctx, j, ic)
	}
	j.buf = e.free.get(seg.Size)
	j.sums = make([]chunkSum, seg.Chunks)
	ic = ic[:0]
	if c := e.sopts.Cache; c != nil && e.useCache(c) {
		if ic, j.err = e.workCached(ctx, c, j, ic); j.err != nil {
			return ic
		}
	} else {
		var base int64
		for k := range seg.Chunks {
			if j.err = ctx.Err(); j.err != nil {
				return ic
			}
			ix := seg.FirstChunk + k
			off, n := p.geo.chunk(ix)
			b := j.buf
			e.gate.acquire(false)
			cs, err := sumChunkInto(p, ix, func(o, k int64) []byte { return b[base+o : base+o+k] })
			e.gate.release()
			if err != nil {
				j.err = err
				return ic
			}
			j.sums[k] = cs
			ic = append(ic, IndexChunk{IX: ix, Off: off, Len: n, SHA256: cs.sha, CRC32C: cs.crc})
			base += n
		}
		j.key = segmentKey(p.name, ic)
	}
	select {
	case <-j.prev:
	case <-ctx.Done():
		j.err = ctx.Err()
		return ic
	}
	if j.err = ctx.Err(); j.err != nil {
		return ic
	}
	if e.known != nil {
		j.seg.Digest, j.hit = e.known(j.key)
	}
	asked = true
	close(j.asked)
	if j.hit {
		e.free.put(j.buf)
		j.buf = nil
		return ic
	}
	j.seg.Digest = sha256.Sum256(j.buf)
	return ic
}

// wholeArray reports whether p is one whole-array segment
// (SplitOptions.WholeArray).
func (e *skelEncoder) wholeArray(p *arrPlan) bool {
	return e.sopts.WholeArray > 0 && e.sopts.StreamSink != nil && p.nbytes > 0 && p.nbytes <= e.sopts.WholeArray
}

// workWhole sums and keys the chunks of j, a whole-array segment, through a
// small scratch buffer (its bytes are not held), keeps the order of known's
// calls without asking it, and takes the array's sha256 as the digest.
func (e *skelEncoder) workWhole(ctx context.Context, j *segJob, ic []IndexChunk) []IndexChunk {
	p, seg := j.p, j.seg
	j.sums = make([]chunkSum, seg.Chunks)
	ic = ic[:0]
	scratch := e.free.get(min(blockSize, seg.Size))
	defer e.free.put(scratch)
	for k := range seg.Chunks {
		if j.err = ctx.Err(); j.err != nil {
			break
		}
		off, n := p.geo.chunk(k)
		e.gate.acquire(false)
		cs, err := sumChunkInto(p, k, func(_, n int64) []byte { return scratch[:n] })
		e.gate.release()
		if err != nil {
			j.err = err
			break
		}
		j.sums[k] = cs
		ic = append(ic, IndexChunk{IX: k, Off: off, Len: n, SHA256: cs.sha, CRC32C: cs.crc})
	}
	select {
	case <-j.prev:
	case <-ctx.Done():
	}
	close(j.asked)
	if j.err != nil {
		return ic
	}
	j.key = segmentKey(p.name, ic)
	select {
	case <-j.hashed:
		j.seg.Digest = p.sha
	case <-ctx.Done():
		j.err = ctx.Err()
	}
	return ic
}

// stream hands each whole-array segment to the stream sink, in file
// order, as soon as its array's sha256 is known.
func (e *skelEncoder) stream(ctx context.Context) error {
	for i, p := range e.plans {
		if !e.wholeArray(p) {
			continue
		}
		select {
		case <-e.hashed[i]:
		case <-ctx.Done():
			return ctx.Err()
		}
		seg := Segment{Digest: p.sha, Size: p.nbytes, Array: p.name, Chunks: p.geo.numChunks()}
		if err := e.sopts.StreamSink(ctx, seg, &arrayReader{p: p}); err != nil {
			return fmt.Errorf("array %s: segment at chunk 0: %w", p.name, err)
		}
	}
	return nil
}

// arrayReader reads an array's raw bytes from its source, releasing what
// it has read from a mapped source's resident set block by block.
type arrayReader struct {
	p        *arrPlan
	off, rel int64
}

func (r *arrayReader) Read(b []byte) (int, error) {
	p := r.p
	if r.off >= p.nbytes {
		return 0, io.EOF
	}
	n := min(int64(len(b)), p.nbytes-r.off, blockSize)
	if p.mem != nil {
		copy(b[:n], p.mem[r.off:r.off+n])
	} else if err := readAt(p, b[:n], r.off); err != nil {
		return 0, err
	}
	r.off += n
	if r.off-r.rel >= blockSize || r.off == p.nbytes {
		snapshot.Release(p.src, r.rel, r.off-r.rel)
		r.rel = r.off
	}
	return int(n), nil
}

// cacheProbe is how many segments a push tries its segment cache on
// before it judges whether the cache pays (useCache).
const cacheProbe = 16

// useCache reports whether the next segment goes through the segment
// cache. A cache that knows a previous generation is tried on cacheProbe
// segments and then used only while at least one in ten of the segments
// tried was recognised: on a dense update its keyed BLAKE3 of every
// segment comes on top of the chunks' SHA-256, and the segments left out
// are summed as without a cache (the output is the same either way). A
// cache without a previous generation only learns, and is always used.
func (e *skelEncoder) useCache(c *SegmentCache) bool {
	if len(c.prev) == 0 {
		return true
	}
	tries := e.cacheTries.Load()
	return tries < cacheProbe || e.cacheHits.Load()*10 >= tries
}

// workCached reads j's segment whole, hashes it with the cache's keyed
// BLAKE3 and, when the cache proves the bytes are the previous
// generation's at that place, takes that generation's chunk sums and key;
// otherwise it sums the chunks from the buffer (SHA-256 and CRC32C). It
// sets j.sums and j.key and tells the cache the segment's tag.
func (e *skelEncoder) workCached(ctx context.Context, c *SegmentCache, j *segJob, ic []IndexChunk) ([]IndexChunk, error) {
	p, seg := j.p, j.seg
	e.gate.acquire(false)
	defer e.gate.release()
	var base int64
	for k := range seg.Chunks {
		if err := ctx.Err(); err != nil {
			return ic, err
		}
		off, n := p.geo.chunk(seg.FirstChunk + k)
		if err := readChunkInto(p, off, j.buf[base:base+n]); err != nil {
			return ic, err
		}
		base += n
	}
	inner := c.inner(j.buf)
	pos := segPos{seg.Array, seg.FirstChunk, seg.Chunks, seg.Size}
	cs, ok := c.lookup(pos, inner, p.geo.chunk)
	e.cacheTries.Add(1)
	if ok {
		e.cacheHits.Add(1)
		copy(j.sums, cs.sums)
		j.key = cs.key
	} else {
		base = 0
		for k := range seg.Chunks {
			ix := seg.FirstChunk + k
			off, n := p.geo.chunk(ix)
			b := j.buf[base : base+n]
			cs := chunkSum{sha: sha256.Sum256(b), crc: crc32.Checksum(b, castagnoli)}
			j.sums[k] = cs
			ic = append(ic, IndexChunk{IX: ix, Off: off, Len: n, SHA256: cs.sha, CRC32C: cs.crc})
			base += n
		}
		j.key = segmentKey(p.name, ic)
	}
	c.learn(pos, j.key, inner)
	return ic, nil
}

// readChunkInto reads the n = len(b) raw bytes of p at off into b, copied
// from memory-backed data or read from the source (in blockSize reads),
// and releases them from a mapped source's resident set.
func readChunkInto(p *arrPlan, off int64, b []byte) error {
	for o := int64(0); o < int64(len(b)); o += blockSize {
		k := min(blockSize, int64(len(b))-o)
		if p.mem != nil {
			copy(b[o:o+k], p.mem[off+o:off+o+k])
		} else if err := readAt(p, b[o:o+k], off+o); err != nil {
			return err
		}
		snapshot.Release(p.src, off+o, k)
	}
	return nil
}

// emit takes the segments in file order as the workers finish them.
func (e *skelEncoder) emit(ctx context.Context, window <-chan *segJob) error {
	for j := range window {
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case <-j.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if j.err != nil {
			return j.err
		}
		if !j.hit && j.hashed == nil && e.sink != nil {
			if err := e.sink(ctx, j.seg, j.buf); err != nil {
				return fmt.Errorf("array %s: segment at chunk %d: %w", j.seg.Array, j.seg.FirstChunk, err)
			}
		}
		e.free.put(j.buf)
		j.buf = nil
		e.segs = append(e.segs, j.seg)
		e.keys = append(e.keys, j.key)
		e.pending = append(e.pending, j)
		e.pendingChunks += j.seg.Chunks
		if !e.headerOut {
			select {
			case <-e.hdr:
			default:
				if e.pendingChunks < e.maxPending {
					continue
				}
				select { // too many sums held: wait for the header
				case <-e.hdr:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		if err := e.flush(); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-e.hdr:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := e.flush(); err != nil {
		return err
	}
	e.w.WriteString(endLine + "\n")
	e.bodyLen += int64(len(endLine)) + 1
	return e.w.Flush()
}

// flush writes the skeleton's magic and header when not yet written, then
// the lines of the pending segments (the header must be known).
func (e *skelEncoder) flush() error {
	if !e.headerOut {
		e.w.WriteString(SkeletonMagic + "\n")
		e.w.Write(e.res.Header)
		e.headerOut = true
	}
	for _, j := range e.pending {
		p := j.p
		l := e.line[:0]
		if j.seg.FirstChunk == 0 {
			l = appendArrHead(l, p)
			e.bodyLen += int64(len(l))
		}
		l = append(segLine(l, j.seg), '\n')
		for k, cs := range j.sums {
			ix := j.seg.FirstChunk + int64(k)
			off, n := p.geo.chunk(ix)
			l = chLine(l, ix, off, n, cs.sha, cs.crc)
			l = append(l, "\nendch\n"...)
			e.bodyLen += chunkBlockLen(ix, off, n)
		}
		if j.isLast {
			l = append(l, endarrLine...)
			e.bodyLen += int64(len(endarrLine))
		}
		if _, err := e.w.Write(l); err != nil {
			return err
		}
		e.line = l
	}
	clear(e.pending)
	e.pending, e.pendingChunks = e.pending[:0], 0
	return nil
}

// bufFree is a bounded free list of segment buffers.
type bufFree chan []byte

// get returns a buffer of n bytes, reused when one large enough is free.
func (f bufFree) get(n int64) []byte {
	select {
	case b := <-f:
		if int64(cap(b)) >= n {
			return b[:n]
		}
	default:
	}
	return make([]byte, n)
}

// put returns b (nil is ignored); it is dropped when the list is full.
func (f bufFree) put(b []byte) {
	if b == nil {
		return
	}
	select {
	case f <- b:
	default:
	}
}

// EncodedSize returns the length of the WTXT Encode(ctx, w, s, opts) would
// write (Result.Written), from the snapshot's structure alone: no array is
// read. A caller that sizes segments by the WTXT's size (as the OCI push
// does for a WTXT file) can so pick the same segment size for
// EncodeSkeleton. It fails as Encode fails on a bad snapshot.
func EncodedSize(s *snapshot.Snapshot, opts EncodeOptions) (int64, error) {
	plans, ext, _, err := prepare(s, opts)
	if err != nil {
		return 0, err
	}
	// Every value in the header and the arr lines has a fixed width, so
	// the lengths with zero hashes are the lengths.
	res, head := newResult(s, opts, plans, ext)
	var n int64
	if opts.Stream {
		n = int64(len(pendingHeader(head)))
	} else {
		n = int64(len(rootHeader(head, res, opts.SignKey)))
	}
	for _, p := range plans {
		n += headLen(p) + int64(len(endarrLine))
		for ix := range p.geo.numChunks() {
			off, l := p.geo.chunk(ix)
			n += chunkBlockLen(ix, off, l)
		}
	}
	return n + int64(len(endLine)) + 1, nil
}

// cpuGate shares an EncodeSkeleton's cores between its two kinds of work,
// the header's hashes first. The header (array sha256 and HMAC, then
// sha256_all one array behind, which is serial) decides when the
// skeleton can be finished; the segment workers' chunk sums can run in
// any order before their segment is emitted. Left to the Go scheduler,
// the workers finish early and sha256_all of the last array then runs
// alone on one core (about a quarter of a second per 256 MiB array);
// with the header first, the workers fill that time instead. A worker
// still runs whenever a header task waits for its input (sha256_all for
// the next arr line) or the header is done, and the uploads of changed
// segments start as soon as a worker reaches them. Each hold is one
// read-and-hash of at most blockSize (header) or one chunk (worker), so
// cancellation waits at most that long. A nil gate does nothing.
//
// With segmentsFirst (SplitOptions.SegmentsFirst) the order is reversed:
// the workers before the header's hashes.
type cpuGate struct {
	mu            sync.Mutex
	cond          sync.Cond
	free          int  // tokens not held
	highWait      int  // first-served tasks waiting for a token
	lowWait       int  // the others waiting for a token
	segmentsFirst bool // the workers are served first
}

func newCPUGate(n int, segmentsFirst bool) *cpuGate {
	g := &cpuGate{free: max(n, 1), segmentsFirst: segmentsFirst}
	g.cond.L = &g.mu
	return g
}

// acquire takes a token: a header task (header true) before any worker
// waiter, or the reverse with segmentsFirst.
func (g *cpuGate) acquire(header bool) {
	if g == nil {
		return
	}
	high := header != g.segmentsFirst
	g.mu.Lock()
	if high {
		g.highWait++
		for g.free == 0 {
			g.cond.Wait()
		}
		g.highWait--
	} else {
		g.lowWait++
		for g.free == 0 || g.highWait > 0 {
			g.cond.Wait()
		}
		g.lowWait--
	}
	g.free--
	g.mu.Unlock()
}

// release returns a token.
func (g *cpuGate) release() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.free++
	g.mu.Unlock()
	g.cond.Broadcast()
}
