package wtxt

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"unsafe"

	"github.com/snapd-ml/snapd/formats"
)

// ReadSkeletonIndex indexes a skeleton (Split's output: SkeletonMagic, the
// WTXT's lines without the base64 lines, seg lines before their chunks) by
// its structure, as ReadIndexWith indexes a WTXT: the header, arr, idx and
// ch grammar and the chunk geometry are checked. Line numbers are the
// skeleton's (its first line is SkeletonMagic), so IndexArray.Line and
// IndexChunk.Line are where git shows the arr and ch lines of a skeleton;
// the byte offsets (Start, Data, End) are the skeleton's too and there is
// no chunk data: ReadChunk must not be used with this index. seg lines are
// skipped (SkeletonSegments and Assemble check them against the ch lines).
// Errors are *Error values naming the line, array and chunk; an index
// over opts.MaxBytes fails with Check "limit" (formats.ErrLimit).
func ReadSkeletonIndex(ctx context.Context, name string, r io.Reader, opts IndexOptions) (*Index, error) {
	maxBytes := opts.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxIndexBytes
	}
	lr := newLineReader(r, name)
	first, err := lr.next()
	if err != nil {
		return nil, err
	}
	if string(first) != SkeletonMagic {
		return nil, lr.errf(CheckSkeleton, "first line is not %q", SkeletonMagic)
	}
	h, line, err := readHeader(lr)
	if err != nil {
		return nil, err
	}
	x := &Index{Header: h, BodyStart: lr.last}
	fail := func(array string, ix int64, format string, a ...any) error {
		return &Error{File: name, Line: lr.n, Array: array, Chunk: ix, Check: CheckGrammar, Msg: fmt.Sprintf(format, a...)}
	}
	var held int64
	charge := func(array string, ix, n int64) error {
		if held += n; held > maxBytes {
			return &Error{File: name, Line: lr.n, Array: array, Chunk: ix, Check: CheckLimit, Err: formats.ErrLimit,
				Msg: fmt.Sprintf("the index of this skeleton would hold more than %d bytes (IndexOptions.MaxBytes)", maxBytes)}
		}
		return nil
	}
	for bytes.HasPrefix(line, []byte("arr ")) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start := lr.last
		head, msg := parseArr(line)
		if msg != "" {
			return nil, fail("", -1, "%s", msg)
		}
		head.lineNo = lr.n
		if err := charge(head.name, -1, int64(unsafe.Sizeof(IndexArray{})+unsafe.Sizeof(arrHead{}))+2*int64(len(line))); err != nil {
			return nil, err
		}
		if line, err = lr.next(); err != nil {
			return nil, err
		}
		head.geo = geometry{nbytes: head.nbytes, chunkLen: UnblockedChunk}
		if bytes.HasPrefix(line, []byte("idx ")) {
			if msg := parseIdx(line, head); msg != "" {
				return nil, fail(head.name, -1, "%s", msg)
			}
			if line, err = lr.next(); err != nil {
				return nil, err
			}
		}
		if msg := idxPresence(head); msg != "" {
			return nil, fail(head.name, -1, "%s", msg)
		}
		a := newIndexArray(head, start)
		for ix := range head.geo.numChunks() {
			for bytes.HasPrefix(line, []byte("seg ")) {
				if line, err = lr.next(); err != nil {
					return nil, err
				}
			}
			ch, msg := parseCh(line)
			if msg != "" {
				return nil, fail(head.name, ix, "%s", msg)
			}
			off, n := head.geo.chunk(ix)
			if ch.ix != ix || ch.off != off || ch.n != n || ch.lines != numLines(n) {
				return nil, fail(head.name, ix, "ch line does not match the array's geometry")
			}
			if err := charge(head.name, ix, IndexChunkBytes); err != nil {
				return nil, err
			}
			c := indexChunk(ch, lr.n, lr.last, lr.off)
			if line, err = lr.next(); err != nil {
				return nil, err
			}
			if string(line) != "endch" {
				return nil, fail(head.name, ix, "want endch after the ch line (a skeleton has no base64 lines)")
			}
			c.End = lr.off
			a.Chunks = append(a.Chunks, c)
			if line, err = lr.next(); err != nil {
				return nil, err
			}
		}
		if string(line) != "endarr" {
			return nil, fail(head.name, -1, "want endarr")
		}
		a.End = lr.off
		x.Arrays = append(x.Arrays, a)
		if line, err = lr.next(); err != nil {
			return nil, err
		}
	}
	x.TrailerStart, x.TrailerLine = lr.last, lr.n
	if bytes.HasPrefix(line, []byte("audit")) {
		x.Audit = string(line)
		if line, err = lr.next(); err != nil {
			return nil, err
		}
	}
	if string(line) != endLine {
		return nil, fail("", -1, "want arr, audit or endwtxt")
	}
	switch _, err := lr.raw(); {
	case err == nil:
		return nil, lr.errf(CheckSkeleton, "bytes after endwtxt")
	case err != io.EOF:
		return nil, err
	}
	x.Size = lr.off
	return x, nil
}
