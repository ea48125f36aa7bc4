package wtxt

import (
	"bytes"
	"context"
	"io"
	"unsafe"
)

// ReadSkeletonIndex indexes a skeleton (Split's output: SkeletonMagic, the
// WTXT's lines without the base64 lines, seg lines before their chunks) by
// its structure, as ReadIndexWith indexes a WTXT: the header, arr, idx and
// ch grammar and the chunk geometry are checked (with opts.NoChunks the
// ch lines' places only, see IndexOptions). Line numbers are the
// skeleton's (its first line is SkeletonMagic), so IndexArray.Line and
// IndexChunk.Line are where git shows the arr and ch lines of a skeleton;
// the byte offsets (Start, Data, End) are the skeleton's too and there is
// no chunk data: ReadChunk must not be used with this index. seg lines are
// recorded in Index.Segs (their position only: SkeletonSegments and
// Assemble check them against the ch lines).
// Errors are *Error values naming the line, array and chunk; an index
// over opts.MaxBytes fails with Check "limit" (formats.ErrLimit).
func ReadSkeletonIndex(ctx context.Context, name string, r io.Reader, opts IndexOptions) (*Index, error) {
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
	var s indexScan
	s = indexScan{ctx: ctx, lr: lr, x: x, what: "skeleton", placeOnly: opts.NoChunks,
		lead: func(line []byte, ix int64) (bool, error) {
			if !bytes.HasPrefix(line, []byte("seg ")) {
				return false, nil
			}
			if err := s.charge("", ix, int64(unsafe.Sizeof(IndexSeg{}))); err != nil {
				return false, err
			}
			x.Segs = append(x.Segs, IndexSeg{Array: len(x.Arrays), Chunk: ix, Line: lr.n, Start: lr.last})
			return true, nil
		},
		body:    func(*chHead) (string, error) { return "", nil },
		noEndch: func(*chHead) string { return "want endch after the ch line (a skeleton has no base64 lines)" }}
	if err := s.run(line, opts); err != nil {
		return nil, err
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
