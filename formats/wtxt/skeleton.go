package wtxt

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"strconv"
)

// endLineExtra is the refusal of an endwtxt line with more than the
// keyword: the profile's last line is exactly "endwtxt", and a split or
// assembly that kept only the keyword would not give back its input.
const endLineExtra = "the endwtxt line has more than the keyword"

// The skeleton layout (docs/FORMAT.md, "Skeleton layout") keeps a WTXT's
// tensor bytes out of Git: the skeleton is the WTXT with every base64 line
// removed, a first line SkeletonMagic, and one seg line before each group
// of consecutive chunks of one array whose raw bytes are stored together
// as one content-addressed blob (a segment):
//
//	WTXT-SKELETON 1
//	WTXT 1
//	meta ... / cap ... / root ... / sign ...   (verbatim)
//	arr ...                                   (verbatim)
//	idx ...                                   (verbatim, iff present)
//	seg chunks=<DEC> len=<DEC> sha256=<hex64>
//	ch ix=... (verbatim)
//	endch
//	... the segment's other chunks ...
//	seg ... (next segment of the same array)
//	endarr
//	audit ... (verbatim, iff present)
//	endwtxt
//
// A segment's blob is the concatenation of its chunks' raw bytes; its
// sha256 is the blob's digest. Segments never span arrays and are cut
// greedily from chunk 0 (a chunk joins the open segment while the segment
// stays within the target size; a segment holds at least one chunk), so
// for unchanged array geometry the boundaries are the same in every
// generation and a changed row changes only its chunk's ch line and its
// segment's seg line.

// SkeletonMagic is the first line of a skeleton file.
const SkeletonMagic = "WTXT-SKELETON 1"

// DefaultSegmentSize is the default target size of a segment's blob.
const DefaultSegmentSize = 4 << 20

// DefaultMaxSegment bounds the bytes Split holds for one segment: a single
// chunk larger than this is refused.
const DefaultMaxSegment = 256 << 20

// Checks specific to the skeleton layout.
const (
	CheckSkeleton Check = "skeleton" // seg lines vs ch lines, skeleton grammar
	CheckBlob     Check = "blob"     // a segment blob: missing, short, long, wrong digest
)

// ErrBlobNotFound is wrapped by BlobSource implementations when the store
// has no blob with the asked digest.
var ErrBlobNotFound = errors.New("blob not found")

// Segment describes one segment blob.
type Segment struct {
	Digest     [32]byte // SHA-256 of the blob's bytes
	Size       int64    // blob length: the sum of its chunks' len
	Array      string   // the array whose chunks it holds
	FirstChunk int64    // ix of its first chunk
	Chunks     int64    // number of chunks
}

// DigestString returns the OCI form "sha256:<hex>".
func (s Segment) DigestString() string { return "sha256:" + hex.EncodeToString(s.Digest[:]) }

// SplitOptions tunes Split.
type SplitOptions struct {
	// SegmentSize is the target blob size (DefaultSegmentSize when 0).
	SegmentSize int64
	// MaxSegment bounds the bytes held for one segment
	// (DefaultMaxSegment when 0); a chunk longer than it is refused.
	MaxSegment int64
	// File names the input in errors.
	File string
	// Cache, for EncodeSkeleton only (Split and SplitIndexed ignore it),
	// skips the SHA-256 of the chunks of segments whose bytes the
	// previous generation had at the same place (see SegmentCache).
	Cache *SegmentCache
	// SegmentsFirst, for EncodeSkeleton only, gives its segment workers
	// the cores before the header's hashes (the reverse of its default,
	// see cpuGate): for a sink whose work runs elsewhere, such as an
	// upload to a registry that hashes and stores what it receives, the
	// sink's work then starts at once and runs beside the header's
	// hashes, which fill the time after the last segment. The output does
	// not depend on it.
	SegmentsFirst bool
	// WholeArray and StreamSink, for EncodeSkeleton only: when both are
	// set, an array of 1..WholeArray raw bytes is one segment whatever
	// SegmentSize says, its digest is the array's sha256 (one SHA-256
	// pass fewer) and its bytes are not held: StreamSink gets a reader of
	// them as soon as that sha256 is known, before the array's chunks are
	// summed (so the header's hashes go first, see cpuGate). Larger
	// arrays are cut at SegmentSize and go to the sink as before.
	WholeArray int64
	StreamSink SegmentStreamSink
}

// SegmentSink receives each segment in file order with its raw bytes; b is
// valid only during the call.
type SegmentSink func(ctx context.Context, seg Segment, b []byte) error

// SegmentStreamSink receives a whole-array segment (SplitOptions.
// WholeArray) with a reader of its seg.Size raw bytes, in file order,
// from one goroutine. The reader stays valid after the call until the
// encoder's snapshot is closed (the sink may read it later, from any one
// goroutine); it reads the snapshot's array again and fails as a read of
// the array fails. Like SegmentSink, a sink error stops the encode.
type SegmentStreamSink func(ctx context.Context, seg Segment, r io.Reader) error

// Split reads a WTXT file and writes its skeleton to skel, handing every
// segment's bytes to sink (when not nil). It checks what it reads: the
// first line, ch line grammar, base64 shape and parity, each chunk's
// sha256 and crc32c, and that chunk ix and off follow on within an array.
// It does not check hashes above the chunk or signatures: run Verify on
// the input for that. It returns the segments in file order.
func Split(ctx context.Context, r io.Reader, skel io.Writer, sink SegmentSink, opts SplitOptions) ([]Segment, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if opts.MaxSegment <= 0 {
		opts.MaxSegment = DefaultMaxSegment
	}
	sp := &splitter{ctx: ctx, lr: newLineReader(r, opts.File), w: bufio.NewWriterSize(skel, 64<<10), sink: sink, opts: opts}
	if err := sp.run(); err != nil {
		return nil, err
	}
	return sp.segs, nil
}

type splitter struct {
	ctx  context.Context
	lr   *lineReader
	w    *bufio.Writer
	sink SegmentSink
	opts SplitOptions
	segs []Segment

	arr     string // current array name, "" outside arrays
	inArr   bool
	nextIx  int64
	nextOff int64

	// the open segment
	buf     []byte // raw bytes
	lines   []byte // skeleton lines (ch + endch) of its chunks
	first   int64
	nchunks int64
}

func (sp *splitter) fail(check Check, chunk int64, format string, a ...any) error {
	return &Error{File: sp.lr.file, Line: sp.lr.n, Array: sp.arr, Chunk: chunk, Check: check, Msg: fmt.Sprintf(format, a...)}
}

func (sp *splitter) run() error {
	line, err := sp.lr.next()
	if err != nil {
		return err
	}
	if string(line) != magicLine {
		return sp.fail(CheckGrammar, -1, "first line is not %q", magicLine)
	}
	sp.w.WriteString(SkeletonMagic + "\n" + magicLine + "\n")
	for {
		if err := sp.ctx.Err(); err != nil {
			return err
		}
		line, err := sp.lr.next()
		if err != nil {
			return err
		}
		kw, _, _ := bytes.Cut(line, []byte(" "))
		switch string(kw) {
		case "arr":
			if sp.inArr {
				return sp.fail(CheckGrammar, -1, "arr line inside an array (endarr missing)")
			}
			a, msg := parseArr(line)
			if msg != "" {
				return sp.fail(CheckGrammar, -1, "%s", msg)
			}
			sp.arr, sp.inArr, sp.nextIx, sp.nextOff = a.name, true, 0, 0
		case "ch":
			if !sp.inArr {
				return sp.fail(CheckGrammar, -1, "ch line outside an array")
			}
			if err := sp.chunk(line); err != nil {
				return err
			}
			continue
		case "endarr":
			if !sp.inArr {
				return sp.fail(CheckGrammar, -1, "endarr outside an array")
			}
			if err := sp.flush(); err != nil {
				return err
			}
			sp.inArr, sp.arr = false, ""
		case "endwtxt":
			if sp.inArr {
				return sp.fail(CheckGrammar, -1, "endwtxt inside an array")
			}
			if len(line) != len(endLine) {
				return sp.fail(CheckGrammar, -1, endLineExtra)
			}
			sp.w.WriteString(endLine + "\n")
			if _, err := sp.lr.raw(); err != io.EOF {
				if err == nil {
					return sp.fail(CheckGrammar, -1, "data after endwtxt")
				}
				return err
			}
			return sp.w.Flush()
		case "meta", "cap", "root", "root_pending", "sign", "idx", "audit":
		default:
			return sp.fail(CheckGrammar, -1, "unexpected line (not a WTXT line kind here)")
		}
		sp.w.Write(line)
		sp.w.WriteByte('\n')
	}
}

// chunk reads one chunk block whose ch line is line.
func (sp *splitter) chunk(line []byte) error {
	ch, msg := parseCh(line)
	if msg != "" {
		return sp.fail(CheckGrammar, -1, "%s", msg)
	}
	line = bytes.Clone(line) // the reader's buffer is reused below
	chLineNo := sp.lr.n
	if ch.ix != sp.nextIx || ch.off != sp.nextOff {
		return sp.fail(CheckGeometry, ch.ix, "ch ix=%d off=%d, want ix=%d off=%d", ch.ix, ch.off, sp.nextIx, sp.nextOff)
	}
	if ch.lines != numLines(ch.n) {
		return sp.fail(CheckGeometry, ch.ix, "lines=%d but len=%d needs %d", ch.lines, ch.n, numLines(ch.n))
	}
	if ch.n > sp.opts.MaxSegment {
		return sp.fail(CheckGeometry, ch.ix, "len=%d exceeds the segment limit of %d bytes", ch.n, sp.opts.MaxSegment)
	}
	if sp.nchunks > 0 && int64(len(sp.buf))+ch.n > sp.opts.SegmentSize {
		if err := sp.flush(); err != nil {
			return err
		}
	}
	if sp.nchunks == 0 {
		sp.first = ch.ix
	}
	start := len(sp.buf)
	sp.buf = growBytes(sp.buf, int(ch.n))
	raw := sp.buf[start : start+int(ch.n)]
	var got int64
	fullLines := ch.n / rawPerLine
	for i := int64(0); i < ch.lines; i++ {
		// Whole 57-byte lines already buffered are decoded in one go (the
		// verifier's fast path); anything else, and any line that is not
		// exactly right, goes through the checked per-line path below.
		if i < fullLines {
			if m := sp.lr.fullLines(raw[got:], fullLines-i); m > 0 {
				got += m * rawPerLine
				i += m - 1
				continue
			}
		}
		l, err := sp.lr.next()
		if err != nil {
			return err
		}
		want := min(int64(rawPerLine), ch.n-got)
		chars := base64.StdEncoding.EncodedLen(int(want))
		if len(l) != chars+2 || l[chars] != ' ' {
			return sp.fail(CheckBase64, ch.ix, "base64 line %d of the chunk: want %d characters, a space and the parity digit", i+1, chars)
		}
		if parityNibble(l[:chars]) != l[chars+1] {
			return sp.fail(CheckParity, ch.ix, "base64 line %d of the chunk: parity digit does not match", i+1)
		}
		n, err := base64.StdEncoding.Strict().Decode(raw[got:got+want], l[:chars])
		if err != nil || int64(n) != want {
			return sp.fail(CheckBase64, ch.ix, "base64 line %d of the chunk does not decode to %d bytes", i+1, want)
		}
		got += want
	}
	if sum := sha256.Sum256(raw); sum != ch.sha {
		sp.lr.n = chLineNo // name the ch line whose sum fails
		return sp.fail(CheckChunkSHA, ch.ix, "sha256 of the decoded bytes does not match the ch line")
	}
	if crc32.Checksum(raw, castagnoli) != ch.crc {
		sp.lr.n = chLineNo
		return sp.fail(CheckCRC32C, ch.ix, "crc32c of the decoded bytes does not match the ch line")
	}
	end, err := sp.lr.next()
	if err != nil {
		return err
	}
	if string(end) != "endch" {
		return sp.fail(CheckGrammar, ch.ix, "want endch after %d base64 lines", ch.lines)
	}
	sp.lines = append(sp.lines, line...)
	sp.lines = append(sp.lines, "\nendch\n"...)
	sp.nchunks++
	sp.nextIx++
	sp.nextOff += ch.n
	return nil
}

// flush closes the open segment: seg line, its chunks' lines, the sink.
func (sp *splitter) flush() error {
	if sp.nchunks == 0 {
		return nil
	}
	seg := Segment{Digest: sha256.Sum256(sp.buf), Size: int64(len(sp.buf)), Array: sp.arr, FirstChunk: sp.first, Chunks: sp.nchunks}
	sp.w.Write(segLine(nil, seg))
	sp.w.WriteByte('\n')
	sp.w.Write(sp.lines)
	if sp.sink != nil {
		if err := sp.sink(sp.ctx, seg, sp.buf); err != nil {
			return fmt.Errorf("array %s: segment at chunk %d: %w", seg.Array, seg.FirstChunk, err)
		}
	}
	sp.segs = append(sp.segs, seg)
	sp.buf, sp.lines, sp.nchunks = sp.buf[:0], sp.lines[:0], 0
	return nil
}

func growBytes(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, max(2*cap(b), len(b)+n))
	copy(nb, b)
	return nb
}

// segLine appends a seg line (without LF).
func segLine(dst []byte, s Segment) []byte {
	dst = append(dst, "seg chunks="...)
	dst = strconv.AppendInt(dst, s.Chunks, 10)
	dst = append(dst, " len="...)
	dst = strconv.AppendInt(dst, s.Size, 10)
	dst = append(dst, " sha256="...)
	return hex.AppendEncode(dst, s.Digest[:])
}

func parseSeg(line []byte) (Segment, string) {
	v, msg := fields(line, "seg", []string{"chunks", "len", "sha256"}, false)
	if msg != "" {
		return Segment{}, msg
	}
	var s Segment
	var ok bool
	if s.Chunks, ok = parseDec(v[0], 0); !ok || s.Chunks < 1 {
		return Segment{}, fmt.Sprintf("seg chunks: want a canonical decimal >= 1 (got %d bytes)", len(v[0]))
	}
	if s.Size, ok = parseDec(v[1], 0); !ok {
		return Segment{}, fmt.Sprintf("seg len: not a canonical decimal (got %d bytes)", len(v[1]))
	}
	if s.Digest, ok = parseHex32(v[2]); !ok {
		return Segment{}, "seg sha256: want 64 lowercase hex digits"
	}
	return s, ""
}

// BlobSource opens segment blobs by digest.
type BlobSource interface {
	// OpenBlob returns a reader of the blob whose SHA-256 is seg.Digest and
	// whose length should be seg.Size. A missing blob is reported with an
	// error wrapping ErrBlobNotFound. The caller checks length and digest.
	OpenBlob(ctx context.Context, seg Segment) (io.ReadCloser, error)
}

// AssembleInfo summarises an Assemble.
type AssembleInfo struct {
	Segments int   // segment blobs read
	Bytes    int64 // raw bytes read from blobs
	Written  int64 // WTXT bytes written
}

// Assemble rebuilds the WTXT a skeleton was split from, byte for byte,
// streaming: each segment blob is read once, in order, each chunk's sha256
// and crc32c are checked as its lines are written, and each blob's length
// and digest are checked when its last chunk is done. On error w has received an incomplete prefix which
// the caller must discard (AssembleFile does).
func Assemble(ctx context.Context, skeleton io.Reader, src BlobSource, w io.Writer) (*AssembleInfo, error) {
	return AssembleNamed(ctx, skeleton, "", src, w)
}

// SkeletonSegments reads a skeleton's structure without any blob: every
// seg line against the ch lines it covers (count, lengths, ix and off
// continuity), and returns the segments in file order. name labels the
// skeleton in errors.
func SkeletonSegments(ctx context.Context, skeleton io.Reader, name string) ([]Segment, error) {
	a := &assembler{ctx: ctx, lr: newLineReader(skeleton, name), w: bufio.NewWriter(io.Discard), info: &AssembleInfo{}, dry: true}
	if err := a.run(); err != nil {
		return nil, err
	}
	return a.segs, nil
}

// AssembleNamed is Assemble with name labelling the skeleton in errors.
func AssembleNamed(ctx context.Context, skeleton io.Reader, name string, src BlobSource, w io.Writer) (*AssembleInfo, error) {
	cw := &countWriter{w: w}
	a := &assembler{ctx: ctx, lr: newLineReader(skeleton, name), w: bufio.NewWriterSize(cw, 256<<10), src: src, info: &AssembleInfo{}}
	err := a.run()
	if a.blob != nil {
		a.blob.Close()
	}
	if err != nil {
		return nil, err
	}
	a.info.Written = cw.n
	return a.info, nil
}

type assembler struct {
	ctx  context.Context
	lr   *lineReader
	w    *bufio.Writer
	src  BlobSource
	info *AssembleInfo

	arr     string
	inArr   bool
	nextIx  int64
	nextOff int64

	dry      bool                    // structure only: no blob is read (SkeletonSegments)
	pick     func(int, Segment) bool // CheckSkeletonSample: which segments' blobs are read
	skip     bool                    // the open segment's blob is not read (dry, or not picked)
	segs     []Segment               // segments seen, when dry or pick is set
	seg      Segment
	segLine  int
	blob     io.ReadCloser
	br       *bufio.Reader
	brBuf    *bufio.Reader // br's storage, reused segment after segment
	bh       hash.Hash
	left     int64 // bytes of the open segment not yet consumed by ch lines
	chLeft   int64 // chunks of the open segment still to come
	segOpen  bool
	raw, out []byte

	// keep names the array whose chunks' raw bytes (of picked segments)
	// are appended to kept, at most keepMax bytes (ReadSkeletonUserMeta).
	keep    string
	keepMax int64
	kept    []byte
}

func (a *assembler) fail(check Check, chunk int64, format string, args ...any) error {
	return &Error{File: a.lr.file, Line: a.lr.n, Array: a.arr, Chunk: chunk, Check: check, Msg: fmt.Sprintf(format, args...)}
}

func (a *assembler) run() error {
	for i, want := range []string{SkeletonMagic, magicLine} {
		line, err := a.lr.next()
		if err != nil {
			return err
		}
		if string(line) != want {
			return a.fail(CheckSkeleton, -1, "line %d is not %q", i+1, want)
		}
	}
	a.w.WriteString(magicLine + "\n")
	for {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		line, err := a.lr.next()
		if err != nil {
			return err
		}
		kw, _, _ := bytes.Cut(line, []byte(" "))
		switch string(kw) {
		case "seg":
			if err := a.openSeg(line); err != nil {
				return err
			}
			continue
		case "ch":
			if err := a.chunk(line); err != nil {
				return err
			}
			continue
		case "arr":
			if a.inArr {
				return a.fail(CheckGrammar, -1, "arr line inside an array (endarr missing)")
			}
			h, msg := parseArr(line)
			if msg != "" {
				return a.fail(CheckGrammar, -1, "%s", msg)
			}
			a.arr, a.inArr, a.nextIx, a.nextOff = h.name, true, 0, 0
		case "endarr":
			if !a.inArr {
				return a.fail(CheckGrammar, -1, "endarr outside an array")
			}
			if a.segOpen {
				return a.fail(CheckSkeleton, -1, "the seg line at line %d declares %d more chunk(s) than the array has", a.segLine, a.chLeft)
			}
			a.inArr, a.arr = false, ""
		case "endwtxt":
			if a.inArr {
				return a.fail(CheckGrammar, -1, "endwtxt inside an array")
			}
			if len(line) != len(endLine) {
				return a.fail(CheckGrammar, -1, endLineExtra)
			}
			a.w.WriteString(endLine + "\n")
			if _, err := a.lr.raw(); err != io.EOF {
				if err == nil {
					return a.fail(CheckGrammar, -1, "data after endwtxt")
				}
				return err
			}
			return a.w.Flush()
		case "meta", "cap", "root", "root_pending", "sign", "idx", "audit":
			if a.segOpen {
				return a.fail(CheckSkeleton, -1, "%s line inside the segment opened at line %d", kw, a.segLine)
			}
		default:
			return a.fail(CheckSkeleton, -1, "unexpected line: not a skeleton line kind (a skeleton has no base64 lines)")
		}
		a.w.Write(line)
		a.w.WriteByte('\n')
	}
}

func (a *assembler) openSeg(line []byte) error {
	if !a.inArr {
		return a.fail(CheckSkeleton, -1, "seg line outside an array")
	}
	if a.segOpen {
		return a.fail(CheckSkeleton, -1, "seg line while the segment opened at line %d still declares %d chunk(s)", a.segLine, a.chLeft)
	}
	s, msg := parseSeg(line)
	if msg != "" {
		return a.fail(CheckSkeleton, -1, "%s", msg)
	}
	s.Array, s.FirstChunk = a.arr, a.nextIx
	a.seg, a.segLine, a.segOpen, a.left, a.chLeft = s, a.lr.n, true, s.Size, s.Chunks
	a.bh = sha256.New()
	a.blob, a.br = nil, nil
	if a.dry || a.pick != nil {
		a.segs = append(a.segs, s)
	}
	a.skip = a.dry || a.pick != nil && !a.pick(len(a.segs)-1, s)
	if !a.skip && s.Size > 0 {
		rc, err := a.src.OpenBlob(a.ctx, s)
		if err != nil {
			return &Error{File: a.lr.file, Line: a.lr.n, Array: a.arr, Chunk: s.FirstChunk, Check: CheckBlob, Msg: "segment blob " + s.DigestString() + " cannot be read", Err: err}
		}
		a.blob = rc
		if a.brBuf == nil {
			a.brBuf = bufio.NewReaderSize(nil, 256<<10)
		}
		a.brBuf.Reset(io.TeeReader(rc, a.bh)) // one buffer for every segment
		a.br = a.brBuf
	}
	a.info.Segments++
	return nil
}

// chunkPiece is how many raw bytes a chunk is written in at a time (a
// multiple of 57, so every piece but the last is whole lines).
const chunkPiece = rawPerLine * 1024

func (a *assembler) chunk(line []byte) error {
	if !a.inArr {
		return a.fail(CheckGrammar, -1, "ch line outside an array")
	}
	ch, msg := parseCh(line)
	if msg != "" {
		return a.fail(CheckGrammar, -1, "%s", msg)
	}
	if !a.segOpen {
		return a.fail(CheckSkeleton, ch.ix, "ch line not covered by a seg line")
	}
	if ch.ix != a.nextIx || ch.off != a.nextOff {
		return a.fail(CheckGeometry, ch.ix, "ch ix=%d off=%d, want ix=%d off=%d", ch.ix, ch.off, a.nextIx, a.nextOff)
	}
	if ch.lines != numLines(ch.n) {
		return a.fail(CheckGeometry, ch.ix, "lines=%d but len=%d needs %d", ch.lines, ch.n, numLines(ch.n))
	}
	if ch.n > a.left {
		return a.fail(CheckSkeleton, ch.ix, "chunk len=%d exceeds the %d bytes left of the segment declared at line %d", ch.n, a.left, a.segLine)
	}
	if a.skip {
		return a.endChunk(ch)
	}
	a.w.Write(line)
	a.w.WriteByte('\n')
	sh := sha256.New()
	var crc uint32
	if a.raw == nil {
		a.raw = make([]byte, chunkPiece)
	}
	for done := int64(0); done < ch.n; {
		n := min(int64(chunkPiece), ch.n-done)
		p := a.raw[:n]
		if got, err := io.ReadFull(a.br, p); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return a.fail(CheckBlob, ch.ix, "segment blob %s is truncated: it ends at byte %d of %d", a.seg.DigestString(), a.seg.Size-a.left+done+int64(got), a.seg.Size)
			}
			return &Error{File: a.lr.file, Line: a.lr.n, Array: a.arr, Chunk: ch.ix, Check: CheckBlob, Msg: "reading segment blob " + a.seg.DigestString(), Err: err}
		}
		sh.Write(p)
		crc = crc32.Update(crc, castagnoli, p)
		if a.keep != "" && a.arr == a.keep {
			if int64(len(a.kept))+n > a.keepMax {
				return a.fail(CheckGeometry, ch.ix, "array %s holds more than %d bytes", a.keep, a.keepMax)
			}
			a.kept = append(a.kept, p...)
		}
		a.out = appendLines(a.out[:0], p)
		a.w.Write(a.out)
		done += n
	}
	var sum [32]byte
	sh.Sum(sum[:0])
	if sum != ch.sha {
		return a.fail(CheckChunkSHA, ch.ix, "sha256 of the blob's bytes does not match the ch line (segment blob %s)", a.seg.DigestString())
	}
	if crc != ch.crc {
		return a.fail(CheckCRC32C, ch.ix, "crc32c of the blob's bytes does not match the ch line (segment blob %s)", a.seg.DigestString())
	}
	return a.endChunk(ch)
}

// endChunk reads the endch line after a chunk and closes the segment
// after its last chunk.
func (a *assembler) endChunk(ch *chHead) error {
	end, err := a.lr.next()
	if err != nil {
		return err
	}
	if string(end) != "endch" {
		return a.fail(CheckSkeleton, ch.ix, "want endch after a ch line (a skeleton has no base64 lines)")
	}
	a.w.WriteString("endch\n")
	a.info.Bytes += ch.n
	a.left -= ch.n
	a.chLeft--
	a.nextIx++
	a.nextOff += ch.n
	if a.chLeft == 0 {
		return a.closeSeg(ch.ix)
	}
	return nil
}

// closeSeg checks the blob ends where the segment does and has its digest.
func (a *assembler) closeSeg(ix int64) error {
	a.segOpen = false
	if a.left != 0 {
		return a.fail(CheckSkeleton, ix, "the seg line at line %d declares len=%d but its %d chunk(s) hold %d bytes", a.segLine, a.seg.Size, a.seg.Chunks, a.seg.Size-a.left)
	}
	if a.skip {
		return nil
	}
	if a.blob == nil {
		if a.seg.Digest != sha256.Sum256(nil) {
			return a.fail(CheckSkeleton, ix, "the seg line at line %d has len=0 but not the digest of no bytes", a.segLine)
		}
		return nil
	}
	if _, err := a.br.ReadByte(); err != io.EOF {
		if err == nil {
			return a.fail(CheckBlob, ix, "segment blob %s is longer than its %d bytes", a.seg.DigestString(), a.seg.Size)
		}
		return &Error{File: a.lr.file, Line: a.lr.n, Array: a.arr, Chunk: ix, Check: CheckBlob, Msg: "reading segment blob " + a.seg.DigestString(), Err: err}
	}
	var sum [32]byte
	a.bh.Sum(sum[:0])
	err := a.blob.Close()
	a.blob = nil
	if sum != a.seg.Digest {
		return a.fail(CheckBlob, ix, "segment blob's sha256 is %x, the seg line at line %d says %s", sum, a.segLine, a.seg.DigestString())
	}
	if err != nil {
		return &Error{File: a.lr.file, Line: a.lr.n, Array: a.arr, Chunk: ix, Check: CheckBlob, Msg: "closing segment blob " + a.seg.DigestString(), Err: err}
	}
	return nil
}
