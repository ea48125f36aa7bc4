package wtxt

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/snapshot"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeOptions tune the WTXT writer. The zero value writes an unsigned,
// unauthenticated, first-of-chain snapshot with the profile's default chunk
// geometry.
type EncodeOptions struct {
	// RowsPerChunk sets rows_per_chunk for every row-blocked array; 0
	// selects the profile default (largest power of two rows within 64 KiB).
	RowsPerChunk int
	// SignKey signs the header (or, with Stream, the WSUM).
	SignKey ed25519.PrivateKey
	// HMACKey enables per-array salt and HMAC.
	HMACKey []byte
	// PrevMerkle is merkle_this of the previous generation (zero for the
	// first of a chain).
	PrevMerkle [32]byte
	// Stream writes root_pending and no sign line; the final values and
	// signature go into Result.WSUM.
	Stream bool
	// Workers bounds parallelism; 0 means GOMAXPROCS. The output does not
	// depend on it.
	Workers int

	// maxSums overrides maxChunkSums (tests).
	maxSums int64
}

// ArrayInfo describes one array as written.
type ArrayInfo struct {
	Name    string
	Line    string // the arr line, without LF
	SHA256  [32]byte
	HMAC    [32]byte // zero without a key
	Chunks  int64
	Bytes   int64
	Blocked bool
	// NaN and Inf count the array's elements that are NaN and ±Inf
	// (snapshot.CountNonFinite; 0 for types other than floats), from the
	// bytes as they were hashed for its sha256. They are not written
	// into the WTXT: a caller keeps them to compare the next generation
	// without reading this one back.
	NaN, Inf int64
}

// Result reports what Encode wrote.
type Result struct {
	// Root is the written generation's chain values (for a streamed
	// file, those of its WSUM).
	Root
	Fastxor uint64
	// KeyID is the signer's keyid ("" when unsigned).
	KeyID string
	// Header holds the header bytes (from "WTXT 1" through the root or
	// root_pending line's LF, and the sign line when present).
	Header []byte
	// WSUM is the streaming finalization line including its LF (Stream only).
	WSUM   []byte
	Arrays []ArrayInfo
	// Written is the byte count of the WTXT output.
	Written int64
}

// arrPlan is one array on its way out.
type arrPlan struct {
	name    string
	dt      snapshot.DType
	shape   []int64
	nbytes  int64
	src     snapshot.Source
	mem     []byte // non-nil when src is memory-backed
	geo     geometry
	start   int64 // offset in the all-arrays stream (fastxor)
	salt    [8]byte
	sha     [32]byte
	mac     [32]byte
	fastxor uint64
	nan     int64  // NaN elements (floats), counted beside the sha256
	inf     int64  // ±Inf elements
	line    string // arr line
	idx     string // idx line or ""
	// gate, when not nil, is taken (high priority) around each block
	// eachBlock reads and hashes (EncodeSkeleton: see cpuGate).
	gate *cpuGate
	// sums holds the sha256 and crc32c of the array's first chunks when
	// they were computed ahead of the body (see sumChunks).
	sums []chunkSum
}

// chunkSum is a chunk's sha256 and crc32c.
type chunkSum struct {
	sha [32]byte
	crc uint32
}

// Encode writes s as WTXT 1.1 to w, byte for byte as the profile
// prescribes. Arrays are read from their Sources (which must allow
// concurrent ReadAt) several times; memory stays bounded by a few chunks
// per worker (plus at most maxChunkSums precomputed chunk sums) whatever
// the snapshot size. The bytes written do not depend on Workers or
// GOMAXPROCS.
//
// The work is four SHA-256 passes over every byte plus base64, scheduled
// so that two cores stay busy whatever the array sizes:
//
//   - pass 1: each array's sha256 (+fastxor) and its HMAC as two tasks;
//   - when w is an *os.File (io.WriterAt and io.Seeker): the body is
//     rendered by the workers in parallel, each range written at its
//     offset (writeBodyAt), while sha256_all is computed; the header goes
//     in front last;
//   - otherwise sha256_all must precede the body: it runs while the chunk
//     sums are computed ahead (sumChunks; without a key that already
//     happens during pass 1), then the workers only base64-encode.
//
// A snapshot with Attrs gets the reserved array snapshot.AttrsArrayName
// (docs/FORMAT.md section 1).
func Encode(ctx context.Context, w io.Writer, s *snapshot.Snapshot, opts EncodeOptions) (*Result, error) {
	plans, ext, workers, err := prepare(s, opts)
	if err != nil {
		return nil, err
	}
	gen := FormatGen(s.Meta.Gen)

	// Pass 1: array sha256, hmac and fastxor, in parallel. Without a key
	// (one hash per array) a non-seekable, non-streaming writer also gets
	// the chunk sums computed here, on the core the hmac would have used.
	_, seekable := w.(interface {
		io.WriterAt
		io.Seeker
	})
	early := opts.HMACKey == nil && !opts.Stream && !seekable && workers > 1
	maxSums := int64(maxChunkSums)
	if opts.maxSums > 0 {
		maxSums = opts.maxSums
	}
	if err := hashArrays(ctx, plans, opts.HMACKey, gen, workers, early, maxSums); err != nil {
		return nil, err
	}
	res, head := newResult(s, opts, plans, ext)
	finish := res.finish
	body := func(w io.Writer) (int64, error) { return writeBody(ctx, w, plans, workers) }

	cw := &countWriter{w: w}
	if opts.Stream {
		res.Header = pendingHeader(head)
		if _, err := cw.Write(res.Header); err != nil {
			return nil, err
		}
		var sum [32]byte
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error { _, err := writeBody(gctx, cw, plans, workers); return err })
		g.Go(func() (err error) { sum, err = hashAll(gctx, plans); return err })
		if err := g.Wait(); err != nil {
			return nil, err
		}
		finish(sum)
		res.WSUM = wsumLine(res, opts.SignKey)
		res.Written = cw.n
		return res, nil
	}

	rootSign := func() []byte { return rootHeader(head, res, opts.SignKey) }

	if wa, ok := w.(interface {
		io.WriterAt
		io.Seeker
	}); ok {
		// The header's length is known before its values: write the body
		// after it while sha256_all is computed, then the header.
		start, err := wa.Seek(0, io.SeekCurrent)
		if err == nil {
			hlen := int64(len(rootSign()))
			var sum [32]byte
			var n int64
			g, gctx := errgroup.WithContext(ctx)
			g.Go(func() (err error) {
				n, err = writeBodyAt(gctx, wa, start+hlen, plans, workers)
				return err
			})
			g.Go(func() (err error) { sum, err = hashAll(gctx, plans); return err })
			if err := g.Wait(); err != nil {
				return nil, err
			}
			finish(sum)
			res.Header = rootSign()
			if _, err := wa.WriteAt(res.Header, start); err != nil {
				return nil, err
			}
			if _, err := wa.Seek(start+hlen+n, io.SeekStart); err != nil {
				return nil, err
			}
			res.Written = hlen + n
			return res, nil
		}
	}
	// sha256_all must precede the body. With a key the chunk sums are
	// computed meanwhile on the other core (without one they already are).
	// sumChunks stops when sha256_all is done, leaving the rest to the body
	// workers, so that neither core waits for the other.
	var sum [32]byte
	g, gctx := errgroup.WithContext(ctx)
	allDone := make(chan struct{})
	g.Go(func() (err error) {
		defer close(allDone)
		sum, err = hashAll(gctx, plans)
		return err
	})
	if !early && workers > 1 {
		g.Go(func() error { return sumChunks(gctx, plans, allDone, maxSums) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	finish(sum)
	res.Header = rootSign()
	if _, err := cw.Write(res.Header); err != nil {
		return nil, err
	}
	if _, err := body(cw); err != nil {
		return nil, err
	}
	res.Written = cw.n
	return res, nil
}

// prepare validates s and opts, plans the arrays (plan) and resolves
// opts.Workers: the part of Encode before any array is read.
func prepare(s *snapshot.Snapshot, opts EncodeOptions) (plans []*arrPlan, ext bool, workers int, err error) {
	plans, ext, err = plan(s, opts)
	if err != nil {
		return nil, false, 0, err
	}
	workers = opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if opts.SignKey != nil && len(opts.SignKey) != ed25519.PrivateKeySize {
		return nil, false, 0, errors.New("wtxt: sign key is not an Ed25519 private key")
	}
	return plans, ext, workers, nil
}

// setLines sets p's arr line and idx line ("" when unblocked); p's
// sha256, hmac and salt must be final.
func (p *arrPlan) setLines() {
	p.line = arrLine(p)
	p.idx = ""
	if p.geo.blocked {
		p.idx = "idx rows_per_chunk=" + strconv.FormatInt(p.geo.rowsPerChunk, 10) +
			" row_size=" + strconv.FormatInt(p.geo.rowSize, 10) + " row_blocking=on"
	}
}

// appendArrHead appends p's arr line and, when blocked, its idx line,
// each with its LF.
func appendArrHead(dst []byte, p *arrPlan) []byte {
	dst = append(dst, p.line...)
	dst = append(dst, '\n')
	if p.idx != "" {
		dst = append(dst, p.idx...)
		dst = append(dst, '\n')
	}
	return dst
}

// newResult returns the Result of hashed plans (their lines set here)
// with everything but sha256_all and merkle_this (see finish), and head,
// the header's text before its root or root_pending line.
func newResult(s *snapshot.Snapshot, opts EncodeOptions, plans []*arrPlan, ext bool) (res *Result, head string) {
	gen := FormatGen(s.Meta.Gen)
	ts := FormatTS(s.Meta.TS)
	res = &Result{Root: Root{Gen: gen, TS: ts, Build: s.Meta.Build, MerklePrev: opts.PrevMerkle}}
	for _, p := range plans {
		p.setLines()
		res.Fastxor ^= p.fastxor
		res.Arrays = append(res.Arrays, ArrayInfo{Name: p.name, Line: p.line, SHA256: p.sha, HMAC: p.mac,
			Chunks: p.geo.numChunks(), Bytes: p.nbytes, Blocked: p.geo.blocked, NaN: p.nan, Inf: p.inf})
	}
	caps := baseCaps
	if ext {
		caps += "," + capTensorExt
	}
	head = "WTXT 1\nmeta schema=" + s.Meta.Schema + " gen=" + gen + " ts=" + ts + " build=" + s.Meta.Build +
		" endian=LE host=" + s.Meta.Host + " cuda=" + s.Meta.Cuda + "\ncap ext=" + caps + "\n"
	if opts.SignKey != nil {
		res.KeyID = keys.KeyID(opts.SignKey.Public().(ed25519.PublicKey))
	}
	return res, head
}

// finish sets sha256_all and the merkle_this that follows from it.
func (r *Result) finish(all [32]byte) {
	r.SHA256All = all
	r.MerkleThis = r.Root.Merkle()
}

// rootHeader is the header of a finished res: head, the root line and,
// with key, the sign line. Its length does not depend on the hash values.
func rootHeader(head string, res *Result, key ed25519.PrivateKey) []byte {
	h := head + "root sha256_all=" + hex.EncodeToString(res.SHA256All[:]) +
		" merkle_prev=" + hex.EncodeToString(res.MerklePrev[:]) +
		" merkle_this=" + hex.EncodeToString(res.MerkleThis[:]) +
		" fastxor=" + fmt.Sprintf("%016x", res.Fastxor) + "\n"
	if key != nil {
		sig := ed25519.Sign(key, []byte(h))
		h += "sign ed25519=" + base64.StdEncoding.EncodeToString(sig) + " keyid=" + res.KeyID + "\n"
	}
	return []byte(h)
}

// pendingHeader is a streamed file's header: head and root_pending.
func pendingHeader(head string) []byte {
	return []byte(head + "root_pending sha256_all=" + hex.EncodeToString(zero32[:]) + " " + pendingNote + "\n")
}

// wsumLine builds the WSUM line (with LF) for a streamed snapshot.
func wsumLine(res *Result, key ed25519.PrivateKey) []byte {
	l := "WSUM 1 sha256_all=" + hex.EncodeToString(res.SHA256All[:]) +
		" merkle_prev=" + hex.EncodeToString(res.MerklePrev[:]) +
		" merkle_this=" + hex.EncodeToString(res.MerkleThis[:])
	if key != nil {
		msg := append(append([]byte(nil), res.Header...), l...)
		l += " sign=" + base64.StdEncoding.EncodeToString(ed25519.Sign(key, msg))
	}
	return []byte(l + "\n")
}

func arrLine(p *arrPlan) string {
	return "arr name=" + p.name + " dtype=" + p.dt.String() + " shape=" + formatShape(p.shape) +
		" order=C bytes=" + strconv.FormatInt(p.nbytes, 10) + " sha256=" + hex.EncodeToString(p.sha[:]) +
		" hmac=" + hex.EncodeToString(p.mac[:]) + " salt=" + hex.EncodeToString(p.salt[:])
}

// plan validates s and lays out its arrays in WTXT order.
func plan(s *snapshot.Snapshot, opts EncodeOptions) ([]*arrPlan, bool, error) {
	if err := checkMeta(s.Meta); err != nil {
		return nil, false, fmt.Errorf("wtxt: %w", err)
	}
	if err := s.Validate(); err != nil {
		return nil, false, fmt.Errorf("wtxt: %w", err)
	}
	if opts.RowsPerChunk < 0 {
		return nil, false, fmt.Errorf("wtxt: rows per chunk %d < 0", opts.RowsPerChunk)
	}
	arrays := s.Arrays
	attrs, err := snapshot.EncodeAttrs(s)
	if err != nil {
		return nil, false, fmt.Errorf("wtxt: attributes: %w", err)
	}
	if attrs != nil {
		if s.Array(snapshot.AttrsArrayName) != nil {
			return nil, false, fmt.Errorf("wtxt: array name %q is reserved", snapshot.AttrsArrayName)
		}
		arrays = append(append([]*snapshot.Array(nil), arrays...), &snapshot.Array{
			Name: snapshot.AttrsArrayName, DType: snapshot.U8, Shape: []int64{int64(len(attrs))}, Data: snapshot.Bytes(attrs)})
	}
	sorted := (&snapshot.Snapshot{Arrays: arrays}).Sorted()
	var plans []*arrPlan
	ext := false
	var start int64
	for _, a := range sorted {
		if _, ok := NameNeedsExt(a.Name); !ok {
			return nil, false, fmt.Errorf("wtxt: array %q: name must be 1..%d bytes of A-Z a-z 0-9 _ . : / -", a.Name, MaxNameLen)
		}
		if len(a.Shape) > MaxRank {
			return nil, false, fmt.Errorf("wtxt: array %q: rank %d exceeds %d", a.Name, len(a.Shape), MaxRank)
		}
		n, _ := a.NumBytes() // checked by Validate
		p := &arrPlan{name: a.Name, dt: a.DType, shape: a.Shape, nbytes: n, src: a.Data, start: start}
		if p.src == nil {
			p.src = snapshot.Bytes(nil)
		}
		if b, ok := snapshot.BytesOf(p.src); ok {
			p.mem = b[:n:n]
		}
		p.geo = writerGeometry(a.DType, a.Shape, n, int64(opts.RowsPerChunk))
		if arrayNeedsExt(a.Name, a.DType, a.Shape, n) {
			ext = true
		}
		start += n
		plans = append(plans, p)
	}
	return plans, ext, nil
}

// blockSize is the unit in which non-memory sources are read.
const blockSize = 1 << 20

// copyPiece is the unit in which memory-backed data is copied into a
// core-local buffer before it is hashed or encoded. SHA-256 (SHA-NI)
// reading a large array straight from DRAM costs about 40% more CPU than
// memmove into an L2-resident buffer plus hashing that (measured: 0.87 vs
// 0.65 s/GiB per pass), and every byte is read by four hashes.
const copyPiece = 64 << 10

// eachBlock calls fn with the bytes of p.src in order, in blocks of at most
// blockSize bytes; fn must not keep b or hand it to another goroutine.
// Memory-backed data is handed over as copies of at most copyPiece bytes
// (see copyPiece) and released from the resident set (snapshot.Release)
// block by block; a snapshot.Viewer's (a mapped checkpoint that may shrink
// under us) straight from its mapping, a fault becoming an error; any
// other source is read into a buffer.
func eachBlock(ctx context.Context, p *arrPlan, fn func(b []byte, off int64)) error {
	if p.mem != nil {
		buf := make([]byte, min(copyPiece, p.nbytes))
		for off := int64(0); off < p.nbytes; off += blockSize {
			if err := ctx.Err(); err != nil {
				return err
			}
			end := min(off+blockSize, p.nbytes)
			p.gate.acquire(true)
			for o := off; o < end; o += copyPiece {
				b := buf[:copy(buf, p.mem[o:min(o+copyPiece, end)])]
				fn(b, o)
			}
			p.gate.release()
			snapshot.Release(p.src, off, end-off)
		}
		return nil
	}
	if v, ok := p.src.(snapshot.Viewer); ok {
		for off := int64(0); off < p.nbytes; off += blockSize {
			if err := ctx.Err(); err != nil {
				return err
			}
			p.gate.acquire(true)
			err := v.View(off, min(blockSize, p.nbytes-off), func(b []byte) { fn(b, off) })
			p.gate.release()
			if err != nil {
				return fmt.Errorf("wtxt: array %q: block at %d: %w", p.name, off, err)
			}
		}
		return nil
	}
	buf := make([]byte, min(blockSize, p.nbytes))
	for off := int64(0); off < p.nbytes; off += blockSize {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := buf[:min(blockSize, p.nbytes-off)]
		p.gate.acquire(true)
		err := readAt(p, b, off)
		if err == nil {
			fn(b, off)
		}
		p.gate.release()
		if err != nil {
			return err
		}
	}
	return nil
}

func readAt(p *arrPlan, b []byte, off int64) error {
	n, err := p.src.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("wtxt: array %q: read %d bytes at %d: %w", p.name, len(b), off, err)
}

// hashArrays computes every array's sha256 (with fastxor and, for float
// arrays, the NaN and ±Inf counts) and, with a key, salt and hmac. The sequential hashes of one array run as separate tasks
// so two cores share even a single large array.
//
// withSums also runs sumChunks alongside, stopped when the hashes are done.
func hashArrays(ctx context.Context, plans []*arrPlan, key []byte, gen string, workers int, withSums bool, maxSums int64) (err error) {
	if withSums {
		stop := make(chan struct{})
		sumErr := make(chan error, 1)
		go func() { sumErr <- sumChunks(ctx, plans, stop, maxSums) }()
		defer func() {
			close(stop)
			if e := <-sumErr; err == nil {
				err = e
			}
		}()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, p := range plans {
		if _, view := p.src.(snapshot.Viewer); key != nil && p.mem == nil && !view {
			g.Go(func() error { return hashShaMAC(gctx, p, key, gen) })
			continue
		}
		g.Go(func() error {
			h := sha256.New()
			var fx uint64
			var nf nonFinite
			err := eachBlock(gctx, p, func(b []byte, off int64) {
				h.Write(b)
				fx ^= fastxorAt(b, p.start+off)
				nf.add(p.dt, b)
			})
			if err != nil {
				// A fault inside Write (a mapped file that shrank)
				// leaves the digest inconsistent: no Sum.
				return err
			}
			h.Sum(p.sha[:0])
			p.fastxor = fx
			p.nan, p.inf = nf.nan, nf.inf
			return nil
		})
		if key != nil {
			g.Go(func() error {
				p.salt = Salt(key, gen, p.name)
				m := hmac.New(sha256.New, key)
				m.Write(p.salt[:])
				if err := eachBlock(gctx, p, func(b []byte, _ int64) { m.Write(b) }); err != nil {
					return err // no Sum of a digest a fault interrupted
				}
				m.Sum(p.mac[:0])
				return nil
			})
		}
	}
	return g.Wait()
}

// hashShaMAC computes p's sha256 with fastxor and its HMAC (salt
// included) from one read of each block: this goroutine reads a block and
// hashes it for sha256 while the previous block goes through the HMAC on
// another (the two hashes still run on two cores, and the source is read
// once instead of twice). It serves sources that can only be read:
// memory-backed ones and Viewers (mapped checkpoints) are hashed where
// they lie, by eachBlock.
func hashShaMAC(ctx context.Context, p *arrPlan, key []byte, gen string) error {
	p.salt = Salt(key, gen, p.name)
	m := hmac.New(sha256.New, key)
	m.Write(p.salt[:])
	h := sha256.New()
	var fx uint64
	var nf nonFinite
	const nbuf = 3
	free := make(chan []byte, nbuf)
	for range nbuf {
		free <- make([]byte, min(blockSize, p.nbytes))
	}
	toMAC := make(chan []byte, nbuf)
	macDone := make(chan struct{})
	go func() {
		defer close(macDone)
		for b := range toMAC {
			p.gate.acquire(true)
			m.Write(b)
			p.gate.release()
			free <- b
		}
	}()
	var err error
	for off := int64(0); off < p.nbytes; off += blockSize {
		if err = ctx.Err(); err != nil {
			break
		}
		b := (<-free)[:min(blockSize, p.nbytes-off)]
		p.gate.acquire(true)
		if err = readAt(p, b, off); err == nil {
			h.Write(b)
			fx ^= fastxorAt(b, p.start+off)
			nf.add(p.dt, b)
		}
		p.gate.release()
		if err != nil {
			break
		}
		toMAC <- b
	}
	close(toMAC)
	<-macDone
	if err != nil {
		return err
	}
	h.Sum(p.sha[:0])
	m.Sum(p.mac[:0])
	p.fastxor = fx
	p.nan, p.inf = nf.nan, nf.inf
	return nil
}

// nonFinite sums snapshot.CountNonFinite over an array's blocks, which
// hold whole elements (every block starts at a multiple of copyPiece or
// blockSize, multiples of every element size).
type nonFinite struct{ nan, inf int64 }

func (n *nonFinite) add(dt snapshot.DType, b []byte) {
	if dt.IsFloat() {
		nan, inf := snapshot.CountNonFinite(dt, b)
		n.nan, n.inf = n.nan+nan, n.inf+inf
	}
}

// maxChunkSums bounds the chunk sums computed ahead of the body (36 bytes
// each: 4.5 MiB, or 8 GiB of raw data in default 64 KiB chunks); chunks
// past it are summed by the body workers as they encode them.
const maxChunkSums = 1 << 17

// sumChunks fills p.sums for the arrays' chunks in order, at most max in
// all (maxChunkSums), until stop is closed. It is a separate pass so that
// it can run on an otherwise idle core before the body may be written; the
// body workers sum whatever chunks it did not reach. Callers read p.sums
// only after sumChunks has returned.
func sumChunks(ctx context.Context, plans []*arrPlan, stop <-chan struct{}, max int64) error {
	budget := max
	var buf []byte
	for _, p := range plans {
		n := min(p.geo.numChunks(), budget)
		if n == 0 {
			return nil
		}
		budget -= n
		p.sums = make([]chunkSum, 0, n)
		for ix := range n {
			if err := ctx.Err(); err != nil {
				return err
			}
			select {
			case <-stop:
				return nil
			default:
			}
			cs, b, err := sumChunk(p, ix, buf)
			if err != nil {
				return err
			}
			buf = b
			p.sums = append(p.sums, cs)
		}
	}
	return nil
}

// sumChunk computes chunk ix's sums, reading it in pieces of at most
// blockSize bytes into buf (which it returns, possibly grown).
func sumChunk(p *arrPlan, ix int64, buf []byte) (chunkSum, []byte, error) {
	cs, err := sumChunkInto(p, ix, func(_, k int64) []byte {
		if int64(cap(buf)) < k {
			buf = make([]byte, k)
		}
		return buf[:k]
	})
	return cs, buf, err
}

// sumChunkInto computes chunk ix's sums, reading it in pieces of at most
// blockSize bytes, the piece at offset o (from the chunk's start) of k
// bytes into piece(o, k), which returns a buffer of k bytes; each piece
// is hashed right after it is read, while it is in cache.
func sumChunkInto(p *arrPlan, ix int64, piece func(o, k int64) []byte) (chunkSum, error) {
	var cs chunkSum
	off, n := p.geo.chunk(ix)
	h := sha256.New()
	for o := int64(0); o < n || o == 0; o += blockSize {
		k := min(blockSize, n-o)
		b := piece(o, k)
		if err := readChunkInto(p, off+o, b); err != nil { // a copy for memory-backed data: see copyPiece
			return cs, err
		}
		if n <= blockSize {
			cs.sha = sha256.Sum256(b)
		} else {
			h.Write(b)
		}
		cs.crc = crc32.Update(cs.crc, castagnoli, b)
		if k == 0 {
			break
		}
	}
	if n > blockSize {
		h.Sum(cs.sha[:0])
	}
	return cs, nil
}

// hashAll computes sha256_all over every arr line and the array's bytes.
func hashAll(ctx context.Context, plans []*arrPlan) ([32]byte, error) {
	h := sha256.New()
	for _, p := range plans {
		if err := hashAllArray(ctx, h, p); err != nil {
			return [32]byte{}, err
		}
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum, nil
}

// hashAllArray writes p's share of sha256_all to h: its arr line (which
// must be set), then its bytes.
func hashAllArray(ctx context.Context, h hash.Hash, p *arrPlan) error {
	io.WriteString(h, p.line)
	return eachBlock(ctx, p, func(b []byte, _ int64) { h.Write(b) })
}

// countWriter counts bytes written.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// bigChunk is the raw chunk size above which a chunk is streamed by the
// writer goroutine instead of being encoded whole in a worker's buffer.
const bigChunk = 4 << 20

// chunkJob is one chunk being encoded by a worker.
type chunkJob struct {
	p    *arrPlan
	ix   int64
	done chan struct{}
	out  *[]byte
	err  error
}

var chunkBufs = sync.Pool{New: func() any { b := make([]byte, 0, 96<<10); return &b }}

// writeBody writes every array block in order. Chunks are encoded in
// parallel by workers; a bounded window of jobs keeps memory in check and
// the output order fixed.
func writeBody(ctx context.Context, w io.Writer, plans []*arrPlan, workers int) (int64, error) {
	cw := &countWriter{w: w}
	// Whole chunk blocks (about 88 KiB for a default 64 KiB chunk) are
	// larger than this buffer, so bufio hands most of them to w directly
	// instead of copying them; the buffer gathers the small lines between.
	bw := bufio.NewWriterSize(cw, 64<<10)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	jobs := make(chan *chunkJob)
	window := make(chan *chunkJob, 4*workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte // read buffer for non-memory sources
			for j := range jobs {
				j.out = chunkBufs.Get().(*[]byte)
				var raw []byte
				raw, j.err = chunkRaw(j.p, j.ix, buf)
				if j.err == nil {
					buf = raw
					off, n := j.p.geo.chunk(j.ix)
					var cs *chunkSum
					if j.ix < int64(len(j.p.sums)) {
						cs = &j.p.sums[j.ix]
					}
					*j.out = appendChunk((*j.out)[:0], j.ix, off, raw, cs)
					snapshot.Release(j.p.src, off, n)
				}
				close(j.done)
			}
		}()
	}
	// Producer: enumerate chunks; big ones are left to the writer.
	go func() {
		defer close(window)
		defer close(jobs)
		for _, p := range plans {
			for ix := range p.geo.numChunks() {
				j := &chunkJob{p: p, ix: ix, done: make(chan struct{})}
				if _, n := p.geo.chunk(ix); n > bigChunk {
					close(j.done) // streamed by the writer
				} else {
					select {
					case jobs <- j:
					case <-ctx.Done():
						return
					}
				}
				select {
				case window <- j:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	err := func() error {
		var cur *arrPlan
		for j := range window {
			if j.p != cur {
				if cur != nil {
					bw.WriteString("endarr\n")
				}
				cur = j.p
				bw.Write(appendArrHead(nil, cur))
			}
			select {
			case <-j.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			if j.out == nil { // big chunk
				if err := streamChunk(bw, j.p, j.ix); err != nil {
					return err
				}
				continue
			}
			if j.err != nil {
				return j.err
			}
			if _, err := bw.Write(*j.out); err != nil {
				return err
			}
			chunkBufs.Put(j.out)
		}
		if cur != nil {
			bw.WriteString("endarr\n")
		}
		bw.WriteString(endLine + "\n")
		return ctx.Err()
	}()
	cancel()
	for range window { // drain so the producer exits
	}
	wg.Wait()
	if err != nil {
		return cw.n, err
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	return cw.n, nil
}

// chunkRaw returns chunk ix's raw bytes in buf (grown when needed): read
// from the source, or copied from memory-backed data (see copyPiece: the
// chunk is then hashed and encoded from cache).
func chunkRaw(p *arrPlan, ix int64, buf []byte) ([]byte, error) {
	off, n := p.geo.chunk(ix)
	if int64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if p.mem != nil {
		copy(buf, p.mem[off:off+n])
		return buf, nil
	}
	return buf, readAt(p, buf, off)
}

// chLine appends a chunk's ch line (without LF).
func chLine(dst []byte, ix, off, n int64, sha [32]byte, crc uint32) []byte {
	dst = append(dst, "ch ix="...)
	dst = appendPadded(dst, ix, 6)
	dst = append(dst, " off="...)
	dst = appendPadded(dst, off, 12)
	dst = append(dst, " len="...)
	dst = strconv.AppendInt(dst, n, 10)
	dst = append(dst, " sha256="...)
	dst = hex.AppendEncode(dst, sha[:])
	dst = append(dst, " crc32c="...)
	var cb [4]byte
	binary.BigEndian.PutUint32(cb[:], crc)
	dst = hex.AppendEncode(dst, cb[:])
	dst = append(dst, " b64=on width=76 lines="...)
	dst = strconv.AppendInt(dst, numLines(n), 10)
	return dst
}

func appendPadded(dst []byte, v int64, width int) []byte {
	var tmp [20]byte
	s := strconv.AppendInt(tmp[:0], v, 10)
	for i := len(s); i < width; i++ {
		dst = append(dst, '0')
	}
	return append(dst, s...)
}

// appendChunk appends a whole chunk block (ch line, base64 lines, endch);
// cs, when not nil, holds the chunk's sums computed earlier.
func appendChunk(dst []byte, ix, off int64, raw []byte, cs *chunkSum) []byte {
	if cs == nil {
		cs = &chunkSum{sha: sha256.Sum256(raw), crc: crc32.Checksum(raw, castagnoli)}
	}
	dst = chLine(dst, ix, off, int64(len(raw)), cs.sha, cs.crc)
	dst = append(dst, '\n')
	dst = appendLines(dst, raw)
	return append(dst, "endch\n"...)
}

// streamChunk writes a big chunk without holding it whole: one pass for
// sha256/crc32c, one for the lines.
func streamChunk(w *bufio.Writer, p *arrPlan, ix int64) error {
	off, n := p.geo.chunk(ix)
	h := sha256.New()
	var crc uint32
	piece := int64(rawPerLine * 16384) // multiple of 57
	buf := make([]byte, 0, piece)
	each := func(fn func(b []byte) error) error {
		for o := int64(0); o < n; o += piece {
			k := min(piece, n-o)
			b := buf[:k]
			if p.mem != nil {
				copy(b, p.mem[off+o:off+o+k])
			} else if err := readAt(p, b, off+o); err != nil {
				return err
			}
			if err := fn(b); err != nil {
				return err
			}
			snapshot.Release(p.src, off+o, k)
		}
		return nil
	}
	var sha [32]byte
	if ix < int64(len(p.sums)) {
		sha, crc = p.sums[ix].sha, p.sums[ix].crc
	} else {
		if err := each(func(b []byte) error { h.Write(b); crc = crc32.Update(crc, castagnoli, b); return nil }); err != nil {
			return err
		}
		h.Sum(sha[:0])
	}
	line := chLine(nil, ix, off, n, sha, crc)
	w.Write(line)
	w.WriteByte('\n')
	out := make([]byte, 0, int(piece/rawPerLine)*(B64Width+3))
	if err := each(func(b []byte) error { _, err := w.Write(appendLines(out[:0], b)); return err }); err != nil {
		return err
	}
	_, err := w.WriteString("endch\n")
	return err
}
