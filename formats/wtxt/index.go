package wtxt

import (
	"context"
	"io"

	"github.com/snapd-ml/snapd/snapshot"
)

// Index is the structure of a WTXT file: its header, and every array and
// chunk with the line numbers and byte offsets of their lines. It is the
// one reading of the WTXT structure that other packages build on (the
// delta's, the review's and snapd diff's), so none of them parses WTXT
// lines itself.
type Index struct {
	Header *Header
	Arrays []IndexArray
	// Audit is the audit line (without LF), "" when there is none.
	Audit string
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
}

// IndexChunk is one ch block.
type IndexChunk struct {
	IX, Off, Len int64
	SHA256       [32]byte
	CRC32C       uint32
	// Line is the 1-based number of the ch line; Start its byte offset,
	// Data the offset of the first base64 line, End the offset just after
	// endch's LF.
	Line             int
	Start, Data, End int64
}

// ReadIndex indexes the WTXT file r of the given size by its structure
// only: the grammar of the header, arr, idx and ch lines, the chunk
// geometry and line counts are checked, the base64 lines are skipped by
// their known length (neither decoded nor hashed, so the cost is per
// chunk, not per byte; see Verify for the content checks). Errors are
// *Error values naming the line and array; name is used in them.
func ReadIndex(ctx context.Context, name string, r io.ReaderAt, size int64) (*Index, error) {
	rep, _, err := structIndex(ctx, name, r, size)
	if err != nil {
		return nil, err
	}
	x := &Index{Header: rep.Header, Audit: rep.Audit, Arrays: make([]IndexArray, 0, len(rep.index))}
	for _, ai := range rep.index {
		h := ai.head
		a := IndexArray{Name: h.name, DType: h.dt, Shape: h.shape, Bytes: h.nbytes,
			Line: h.lineNo, Start: ai.start, End: ai.end, Chunks: make([]IndexChunk, 0, len(ai.chunks))}
		if h.geo.blocked {
			a.RowsPerChunk, a.RowSize = h.geo.rowsPerChunk, h.geo.rowSize
		}
		for _, c := range ai.chunks {
			a.Chunks = append(a.Chunks, IndexChunk{IX: c.head.ix, Off: c.head.off, Len: c.head.n,
				SHA256: c.sha, CRC32C: c.head.crc, Line: c.lineNo, Start: c.start, Data: c.data, End: c.end})
		}
		x.Arrays = append(x.Arrays, a)
	}
	return x, nil
}
