package wtxt

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"io"
	"unsafe"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// Index is the structure of a WTXT file: its header, and every array and
// chunk with the line numbers and byte offsets of their lines. It is the
// one reading of the WTXT structure that other packages build on (the
// delta, the review, snapd diff, the split layout), so none of them parses
// WTXT lines itself. The byte ranges tile the file:
//
//	[0, BodyStart)                     header lines (WTXT 1 .. root/root_pending, sign)
//	[Arrays[i].Start, Arrays[i].End)   arr line .. endarr, in file order
//	[Chunks[j].Start, Chunks[j].End)   ch line .. endch, inside their array
//	[TrailerStart, Size)               audit line (if any) and endwtxt
type Index struct {
	Header *Header
	Arrays []IndexArray
	// Audit is the audit line (without LF), "" when there is none.
	Audit string
	// BodyStart is the byte offset of the first line after the header
	// (the first arr line, or the trailer of a file without arrays).
	BodyStart int64
	// TrailerStart is the byte offset of the audit line, or of endwtxt
	// without one; TrailerLine is that line's 1-based number.
	TrailerStart int64
	TrailerLine  int
	// Size is the file size the index was read with.
	Size int64
	// Segs are a skeleton's seg lines in file order (ReadSkeletonIndex;
	// a WTXT has none).
	Segs []IndexSeg
}

// IndexSeg is one seg line of a skeleton: it stands before the ch line of
// chunk Chunk of Arrays[Array]; Line is its 1-based number, Start its byte
// offset.
type IndexSeg struct {
	Array int
	Chunk int64
	Line  int
	Start int64
}

// IndexArray is one arr block.
type IndexArray struct {
	Name  string
	DType snapshot.DType
	Shape []int64
	Bytes int64
	// RowsPerChunk and RowSize are the idx line's values, 0 without one.
	RowsPerChunk, RowSize int64
	// Line is the 1-based number of the arr line; Start its byte offset,
	// End the offset just after endarr's LF.
	Line       int
	Start, End int64
	Chunks     []IndexChunk

	head *arrHead // the parsed arr (and idx) line
}

// SameGeometry reports whether a's chunks can be compared with b's chunk
// for chunk: same dtype, shape, bytes and chunk geometry (idx values).
func (a *IndexArray) SameGeometry(b *IndexArray) bool {
	if a.DType != b.DType || a.Bytes != b.Bytes || a.RowsPerChunk != b.RowsPerChunk || a.RowSize != b.RowSize || len(a.Shape) != len(b.Shape) {
		return false
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] {
			return false
		}
	}
	return true
}

// Array returns the array named name, nil when x (which may be nil) has
// none. Arrays are few; the search is linear.
func (x *Index) Array(name string) *IndexArray {
	if x == nil {
		return nil
	}
	for i := range x.Arrays {
		if x.Arrays[i].Name == name {
			return &x.Arrays[i]
		}
	}
	return nil
}

// IndexChunk is one ch block.
type IndexChunk struct {
	IX, Off, Len int64
	SHA256       [32]byte
	CRC32C       uint32
	// Lines is the number of base64 lines.
	Lines int64
	// Line is the 1-based number of the ch line; Start its byte offset,
	// Data the offset of the first base64 line, End the offset just after
	// endch's LF.
	Line             int
	Start, Data, End int64
}

// IndexOptions bound ReadIndexWith.
type IndexOptions struct {
	// MaxBytes caps the memory the index holds (about IndexChunkBytes per
	// chunk plus each array's name and shape). 0 means DefaultMaxIndexBytes.
	// A file's size does not bound its chunk count usefully (a hostile
	// file of one-byte chunks has one per ~190 bytes), so a reader of
	// untrusted files keeps this cap.
	MaxBytes int64
	// NoChunks leaves every IndexArray's Chunks empty: the index then
	// costs memory per array (and per seg line of a skeleton), not per
	// chunk. ReadIndexWith still parses each ch line (it needs its length
	// to skip the base64 lines); ReadSkeletonIndex then checks only the
	// ch lines' places (a "ch " line, then endch, as many as the arr line
	// declares chunks), not their fields: it is for a skeleton whose ch
	// lines were checked elsewhere (gitops cuts the skeleton Split has
	// just written from a WTXT it indexed).
	NoChunks bool
}

// IndexChunkBytes is the memory one chunk costs in an Index.
const IndexChunkBytes = int64(unsafe.Sizeof(IndexChunk{}))

// DefaultMaxIndexBytes is the default cap on an Index's memory: the floor
// of the decode budget (formats.DefaultBudgetFloor), about 2.5 million
// chunks, an 80 GB model at the default 32 KiB chunks.
const DefaultMaxIndexBytes = formats.DefaultBudgetFloor

// ReadIndex is ReadIndexWith with the default options.
func ReadIndex(ctx context.Context, name string, r io.ReaderAt, size int64) (*Index, error) {
	return ReadIndexWith(ctx, name, r, size, IndexOptions{})
}

// ReadIndexWith indexes the WTXT file r of the given size by its structure
// only: the grammar of the header, arr, idx and ch lines, the chunk
// geometry and line counts are checked, the base64 lines are skipped by
// their known length (neither decoded nor hashed, so the cost is per
// chunk, not per byte; see Verify for the content checks). Only the
// structure lines are read, in small pieces. Errors are *Error values
// naming the line, array and chunk; name is used in them. An index that
// would hold more than opts.MaxBytes fails with Check "limit"
// (formats.ErrLimit) at the chunk that passes it. Bytes after endwtxt
// are refused (Check "grammar", the line after endwtxt), so the index's
// ranges tile [0, size).
func ReadIndexWith(ctx context.Context, name string, r io.ReaderAt, size int64, opts IndexOptions) (*Index, error) {
	sec := io.NewSectionReader(r, 0, size)
	small := smallReader{sec}
	lr := newLineReader(small, name)
	h, line, err := readHeader(lr)
	if err != nil {
		return nil, err
	}
	x := &Index{Header: h, BodyStart: lr.last, Size: size}
	// A chunk's base64 lines are skipped by their length, computed from
	// the ch line.
	body := func(ch *chHead) (string, error) {
		skip := int64(0)
		if ch.lines > 0 {
			last := ch.n - (ch.lines-1)*rawPerLine
			skip = (ch.lines-1)*(B64Width+3) + int64(base64.StdEncoding.EncodedLen(int(last))) + 3
		}
		// A chunk longer than the file (its base64 length may even
		// overflow int64) ends the file inside the chunk.
		if ch.lines > size || skip < 0 || skip > size-lr.off {
			return "file ends inside the chunk", nil
		}
		if skip <= int64(lr.r.Buffered()) {
			lr.r.Discard(int(skip))
		} else {
			if _, err := sec.Seek(lr.off+skip, io.SeekStart); err != nil {
				return "", err
			}
			lr.r.Reset(small)
		}
		lr.off += skip
		lr.n += int(ch.lines)
		return "", nil
	}
	s := indexScan{ctx: ctx, lr: lr, x: x, what: "file", body: body,
		noEndch: func(ch *chHead) string { return fmt.Sprintf("want endch after %d base64 lines", ch.lines) }}
	if err := s.run(line, opts); err != nil {
		return nil, err
	}
	// The ranges tile the file: bytes after endwtxt are refused, as Verify
	// refuses them.
	switch _, err := lr.raw(); {
	case err == nil:
		return nil, lr.errf(CheckGrammar, "data after %q", endLine)
	case err != io.EOF:
		return nil, err
	}
	return x, nil
}

// indexScan reads the arr/idx/ch structure after the header, from the
// first body line to endwtxt, into x: the one loop of ReadIndexWith (a
// WTXT) and ReadSkeletonIndex (a skeleton). What differs is a chunk's body
// (base64 lines, or none), passed by body, and the seg lines a skeleton
// has before its ch lines, recorded when lead is set.
type indexScan struct {
	ctx  context.Context
	lr   *lineReader
	x    *Index
	what string // "file" or "skeleton", for the limit error
	// lead, when set, is offered each line where a ch line is due (chunk
	// ix of the array being read); it reports whether the line is one to
	// pass over (a skeleton's seg line) and may record it.
	lead func(line []byte, ix int64) (bool, error)
	// body passes the chunk's body after its ch line (ch is nil with
	// placeOnly): a non-empty message is a grammar failure of the chunk.
	body func(ch *chHead) (string, error)
	// placeOnly: ch lines are not parsed, only their place is checked (a
	// "ch " line where one is due, followed by the body and endch); set
	// only with IndexOptions.NoChunks and a body that needs no chHead.
	placeOnly bool
	// noEndch is the message when the chunk's body is not followed by
	// endch.
	noEndch func(ch *chHead) string
	held    int64
	max     int64
}

func (s *indexScan) fail(array string, ix int64, format string, a ...any) error {
	return &Error{File: s.lr.file, Line: s.lr.n, Array: array, Chunk: ix, Check: CheckGrammar, Msg: fmt.Sprintf(format, a...)}
}

// charge counts n bytes against the index's memory cap.
func (s *indexScan) charge(array string, ix, n int64) error {
	if s.held += n; s.held > s.max {
		return &Error{File: s.lr.file, Line: s.lr.n, Array: array, Chunk: ix, Check: CheckLimit, Err: formats.ErrLimit,
			Msg: fmt.Sprintf("the index of this %s would hold more than %d bytes (IndexOptions.MaxBytes)", s.what, s.max)}
	}
	return nil
}

// run reads from line (the first line after the header) to endwtxt.
func (s *indexScan) run(line []byte, opts IndexOptions) error {
	s.max = opts.MaxBytes
	if s.max <= 0 {
		s.max = DefaultMaxIndexBytes
	}
	lr, x := s.lr, s.x
	var err error
	for bytes.HasPrefix(line, []byte("arr ")) {
		if err := s.ctx.Err(); err != nil {
			return err
		}
		start := lr.last
		head, msg := parseArr(line)
		if msg != "" {
			return s.fail("", -1, "%s", msg)
		}
		head.lineNo = lr.n
		if err := s.charge(head.name, -1, int64(unsafe.Sizeof(IndexArray{})+unsafe.Sizeof(arrHead{}))+2*int64(len(line))); err != nil {
			return err
		}
		if line, err = lr.next(); err != nil {
			return err
		}
		head.geo = geometry{nbytes: head.nbytes, chunkLen: UnblockedChunk}
		if bytes.HasPrefix(line, []byte("idx ")) {
			if msg := parseIdx(line, head); msg != "" {
				return s.fail(head.name, -1, "%s", msg)
			}
			if line, err = lr.next(); err != nil {
				return err
			}
		}
		if msg := idxPresence(head); msg != "" {
			return s.fail(head.name, -1, "%s", msg)
		}
		a := newIndexArray(head, start)
		for ix := range head.geo.numChunks() {
			for s.lead != nil {
				pass, err := s.lead(line, ix)
				if err != nil {
					return err
				}
				if !pass {
					break
				}
				if line, err = lr.next(); err != nil {
					return err
				}
			}
			var ch *chHead
			if s.placeOnly {
				if !bytes.HasPrefix(line, []byte("ch ")) {
					return s.fail(head.name, ix, "want the ch line of chunk %d", ix)
				}
			} else {
				var msg string
				if ch, msg = parseCh(line); msg != "" {
					return s.fail(head.name, ix, "%s", msg)
				}
				off, n := head.geo.chunk(ix)
				if ch.ix != ix || ch.off != off || ch.n != n || ch.lines != numLines(n) {
					return s.fail(head.name, ix, "ch line does not match the array's geometry")
				}
			}
			var c IndexChunk
			if !opts.NoChunks {
				if err := s.charge(head.name, ix, IndexChunkBytes); err != nil {
					return err
				}
				c = indexChunk(ch, lr.n, lr.last, lr.off)
			}
			if msg, err := s.body(ch); err != nil {
				return err
			} else if msg != "" {
				return s.fail(head.name, ix, "%s", msg)
			}
			if line, err = lr.next(); err != nil {
				return err
			}
			if string(line) != "endch" {
				return s.fail(head.name, ix, "%s", s.noEndch(ch))
			}
			c.End = lr.off
			if !opts.NoChunks {
				a.Chunks = append(a.Chunks, c)
			}
			if line, err = lr.next(); err != nil {
				return err
			}
		}
		if string(line) != "endarr" {
			return s.fail(head.name, -1, "want endarr")
		}
		a.End = lr.off
		x.Arrays = append(x.Arrays, a)
		if line, err = lr.next(); err != nil {
			return err
		}
	}
	x.TrailerStart, x.TrailerLine = lr.last, lr.n
	if bytes.HasPrefix(line, []byte("audit")) {
		x.Audit = string(line)
		if line, err = lr.next(); err != nil {
			return err
		}
	}
	if string(line) != endLine {
		return s.fail("", -1, "want arr, audit or endwtxt")
	}
	return nil
}

// newIndexArray starts the index entry of the array whose arr line (parsed
// into head, idx line included) starts at byte offset start.
func newIndexArray(head *arrHead, start int64) IndexArray {
	a := IndexArray{Name: head.name, DType: head.dt, Shape: head.shape, Bytes: head.nbytes,
		Line: head.lineNo, Start: start, head: head}
	if head.geo.blocked {
		a.RowsPerChunk, a.RowSize = head.geo.rowsPerChunk, head.geo.rowSize
	}
	return a
}

// indexChunk is the index entry of the ch line ch, line number lineNo,
// at byte offset start; its base64 lines start at data.
func indexChunk(ch *chHead, lineNo int, start, data int64) IndexChunk {
	return IndexChunk{IX: ch.ix, Off: ch.off, Len: ch.n, SHA256: ch.sha, CRC32C: ch.crc, Lines: ch.lines,
		Line: lineNo, Start: start, Data: data}
}

// smallReader caps each Read at 4 KiB so that a bufio.Reader over it reads
// little more than the lines asked for.
type smallReader struct{ r io.Reader }

func (s smallReader) Read(p []byte) (int, error) {
	if len(p) > 4096 {
		p = p[:4096]
	}
	return s.r.Read(p)
}

// ReadChunk returns the raw bytes of chunk c of array a, indexed from the
// file r (by ReadIndex): its base64 lines are decoded and their width,
// parity, the length and the crc32c are checked against the ch line (not
// the sha256: that, and authenticity, is Verify's job). It guards against
// misreading a torn or damaged file; errors are *Error values naming the
// line, array, chunk and check. It allocates c.Len bytes, which ReadIndex
// checked lie inside the file.
func ReadChunk(r io.ReaderAt, name string, a *IndexArray, c *IndexChunk) ([]byte, error) {
	fail := func(line int, check Check, format string, args ...any) error {
		return &Error{File: name, Line: line, Array: a.Name, Chunk: c.IX, Check: check, Msg: fmt.Sprintf(format, args...)}
	}
	n := c.End - c.Data - int64(len("endch\n"))
	if c.Len < 0 || c.Lines != numLines(c.Len) || n < 0 || c.Len > n || c.Data < 0 {
		return nil, fail(c.Line, CheckGeometry, "the index entry does not describe a chunk inside the file")
	}
	text := make([]byte, n)
	if _, err := r.ReadAt(text, c.Data); err != nil {
		return nil, fmt.Errorf("%s: array %s: chunk %d: %w", name, a.Name, c.IX, err)
	}
	out, text, err := decodeChunkLines(make([]byte, 0, c.Len), text, c, 0, c.Lines-1, fail)
	if err != nil {
		return nil, err
	}
	if len(text) != 0 {
		return nil, fail(c.Line, CheckGeometry, "more base64 lines than lines=%d", c.Lines)
	}
	if got := crc32.Checksum(out, castagnoli); got != c.CRC32C {
		return nil, fail(c.Line, CheckCRC32C, "crc32c of the decoded bytes is %08x, the ch line says %08x", got, c.CRC32C)
	}
	return out, nil
}

// ReadChunkRange is ReadChunk for the n raw bytes at offset off of chunk
// c (0 <= off, off+n <= c.Len): it reads and decodes only the base64
// lines that hold them (every line but a chunk's last carries 57 bytes in
// B64Width characters, a space, a parity digit and LF), each checked for
// its width, parity and base64. The crc32c covers the whole chunk and is
// not checked: a sampling reader's cheap look, not a verified read.
func ReadChunkRange(r io.ReaderAt, name string, a *IndexArray, c *IndexChunk, off, n int64) ([]byte, error) {
	if _, err := chunkLines(name, a, c, off, n); err != nil {
		return nil, err
	}
	if n == 0 {
		return []byte{}, nil
	}
	d := make([]byte, n)
	if _, err := ReadChunkPieces(r, name, a, []ChunkPiece{{Chunk: c, Off: off, Dst: d}}, 0, nil); err != nil {
		return nil, err
	}
	return d, nil
}

// ChunkPiece is one request of ReadChunkPieces: the len(Dst) raw bytes at
// offset Off of Chunk, a chunk of the array the call names.
type ChunkPiece struct {
	Chunk *IndexChunk
	Off   int64
	Dst   []byte
}

// maxPiecesRead bounds one read of ReadChunkPieces that serves several
// pieces (a single piece's lines are read whole however long).
const maxPiecesRead = 1 << 20

// ReadChunkPieces is ReadChunkRange for several pieces of array a's
// chunks at once, filling each piece's Dst: the base64 lines of
// consecutive pieces (in ascending file order) at most gap bytes apart in
// the file are read with one ReadAt (a pread: its cost is mostly the
// call, not the bytes), and only the lines holding the pieces are
// decoded, each checked as ReadChunkRange checks it. buf is scratch
// space for the text (nil: allocated); it is returned, possibly grown,
// for the next call. Errors are ReadChunkRange's: a *Error naming the
// line, array, chunk and check, or the ReaderAt's error naming the file,
// array and chunk.
func ReadChunkPieces(r io.ReaderAt, name string, a *IndexArray, ps []ChunkPiece, gap int64, buf []byte) ([]byte, error) {
	spans := make([]lineSpan, len(ps))
	var most int64 // the most lines a piece needs
	for i, p := range ps {
		sp, err := chunkLines(name, a, p.Chunk, p.Off, int64(len(p.Dst)))
		if err != nil {
			return buf, err
		}
		spans[i] = sp
		most = max(most, sp.k1-sp.k0+1)
	}
	raw := make([]byte, 0, most*rawPerLine)
	for i := 0; i < len(ps); {
		if len(ps[i].Dst) == 0 {
			i++
			continue
		}
		lo, hi := spans[i].from, spans[i].to
		j := i + 1
		for ; j < len(ps); j++ {
			if len(ps[j].Dst) == 0 {
				continue
			}
			sp := spans[j]
			if sp.from < lo || sp.from-hi > gap || sp.to-lo > maxPiecesRead {
				break
			}
			hi = max(hi, sp.to)
		}
		if int64(cap(buf)) < hi-lo {
			buf = make([]byte, hi-lo)
		}
		text := buf[:hi-lo]
		if _, err := r.ReadAt(text, lo); err != nil {
			return buf, fmt.Errorf("%s: array %s: chunk %d: %w", name, a.Name, ps[i].Chunk.IX, err)
		}
		for k := i; k < j; k++ {
			p, sp := &ps[k], &spans[k]
			if len(p.Dst) == 0 {
				continue
			}
			out, _, err := decodeChunkLines(raw[:0], text[sp.from-lo:sp.to-lo], p.Chunk, sp.k0, sp.k1, chunkFail(name, a, p.Chunk))
			if err != nil {
				return buf, err
			}
			skip := p.Off - sp.k0*rawPerLine
			copy(p.Dst, out[skip:])
		}
		i = j
	}
	return buf, nil
}

// lineSpan is where the base64 lines k0..k1 (0-based) of a chunk lie in
// the file: [from, to).
type lineSpan struct{ from, to, k0, k1 int64 }

// chunkFail returns the constructor of *Error values about chunk c of
// array a of file name.
func chunkFail(name string, a *IndexArray, c *IndexChunk) func(line int, check Check, format string, args ...any) error {
	return func(line int, check Check, format string, args ...any) error {
		return &Error{File: name, Line: line, Array: a.Name, Chunk: c.IX, Check: check, Msg: fmt.Sprintf(format, args...)}
	}
}

// chunkLines returns the lines holding the n raw bytes at offset off of
// chunk c (the zero lineSpan for n = 0), after checking that c's index
// entry describes a chunk inside the file and the bytes lie inside it.
func chunkLines(name string, a *IndexArray, c *IndexChunk, off, n int64) (lineSpan, error) {
	fail := chunkFail(name, a, c)
	end := c.End - int64(len("endch\n"))
	if c.Len < 0 || c.Lines != numLines(c.Len) || c.Data < 0 || end < c.Data || c.Len > end-c.Data {
		return lineSpan{}, fail(c.Line, CheckGeometry, "the index entry does not describe a chunk inside the file")
	}
	if off < 0 || n < 0 || off > c.Len-n {
		return lineSpan{}, fail(c.Line, CheckGeometry, "bytes %d+%d are not inside the chunk's %d bytes", off, n, c.Len)
	}
	if n == 0 {
		return lineSpan{}, nil
	}
	const lineBytes = B64Width + 3 // characters, space, parity digit, LF
	k0, k1 := off/rawPerLine, (off+n-1)/rawPerLine
	from, to := c.Data+k0*lineBytes, min(end, c.Data+(k1+1)*lineBytes)
	if from >= to {
		return lineSpan{}, fail(c.Line, CheckGeometry, "the index entry does not describe a chunk inside the file")
	}
	return lineSpan{from: from, to: to, k0: k0, k1: k1}, nil
}

// decodeChunkLines decodes base64 lines k0..k1 (0-based) of chunk c from
// text, which starts at line k0, appending the raw bytes to out; each
// line's width, parity digit and base64 are checked. It returns out and
// the text after line k1. A line of the full shape (57 bytes as 76
// characters of the standard alphabet, a space, the right parity digit,
// LF) is decoded with the pair tables (decodeFullLine); any other line
// takes the checked path below, which reports what is wrong with it.
func decodeChunkLines(out, text []byte, c *IndexChunk, k0, k1 int64, fail func(line int, check Check, format string, args ...any) error) ([]byte, []byte, error) {
	var raw [rawPerLine]byte
	for k := k0; k <= k1; k++ {
		if c.Len-k*rawPerLine >= rawPerLine && len(text) >= lineOut && text[B64Width] == ' ' && text[lineOut-1] == '\n' {
			n := len(out)
			out = append(out, raw[:]...)
			if p, ok := decodeFullLine(out[n:], text); ok && p == text[B64Width+1] {
				text = text[lineOut:]
				continue
			}
			out = out[:n]
		}
		line := c.Line + 1 + int(k)
		nl := bytes.IndexByte(text, '\n')
		if nl < 0 {
			return nil, nil, fail(line, CheckTruncated, "the chunk ends inside its base64 lines")
		}
		l := text[:nl]
		text = text[nl+1:]
		want := min(c.Len-k*rawPerLine, rawPerLine)
		wd := base64.StdEncoding.EncodedLen(int(want))
		if len(l) != wd+2 || l[wd] != ' ' {
			return nil, nil, fail(line, CheckBase64, "base64 line %d of the chunk: want %d characters, a space and a parity digit", k+1, wd)
		}
		if l[wd+1] != parityNibble(l[:wd]) {
			return nil, nil, fail(line, CheckParity, "base64 line %d of the chunk: parity digit does not match", k+1)
		}
		m, err := base64.StdEncoding.Strict().Decode(raw[:], l[:wd])
		if err != nil || int64(m) != want {
			return nil, nil, fail(line, CheckBase64, "base64 line %d of the chunk does not decode", k+1)
		}
		out = append(out, raw[:m]...)
	}
	return out, text, nil
}
