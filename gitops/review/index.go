package review

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// chunkEntry is one `ch` line of a WTXT file.
type chunkEntry struct {
	IX, Off, Len int64
	SHA256       string
	CRC32C       string
	Line         int   // 1-based line number of the ch line
	Pos          int64 // byte offset of the chunk's first base64 line
}

// arrayEntry is one `arr` block of a WTXT file, without its data.
type arrayEntry struct {
	Name         string
	DType        string
	Shape        string
	Bytes        int64
	Line         int   // line number of the arr line
	RowsPerChunk int64 // 0 without an idx line
	RowSize      int64 // 0 without an idx line
	Chunks       []chunkEntry
}

// fileIndex is the structure of a WTXT file: its arrays and chunks with
// the line numbers of their `arr` and `ch` lines.
type fileIndex struct {
	Arrays []*arrayEntry
	byName map[string]*arrayEntry
}

func (x *fileIndex) array(name string) *arrayEntry {
	if x == nil {
		return nil
	}
	return x.byName[name]
}

// readIndex is the structure of the WTXT file r (wtxt.ReadIndex, which
// checks the grammar of the structure lines and skips the base64 by its
// known length) in the review's terms. It does not verify the content
// (that is wtxt.Verify's job); name is used in errors.
func readIndex(ctx context.Context, name string, r io.ReaderAt, size int64) (*fileIndex, error) {
	wx, err := wtxt.ReadIndex(ctx, name, r, size)
	if err != nil {
		return nil, err
	}
	return newFileIndex(wx), nil
}

// newFileIndex is wx in the review's terms.
func newFileIndex(wx *wtxt.Index) *fileIndex {
	x := &fileIndex{byName: make(map[string]*arrayEntry, len(wx.Arrays))}
	for _, a := range wx.Arrays {
		dims := make([]string, len(a.Shape))
		for i, d := range a.Shape {
			dims[i] = strconv.FormatInt(d, 10)
		}
		e := &arrayEntry{Name: a.Name, DType: a.DType.String(), Shape: strings.Join(dims, ","), Bytes: a.Bytes,
			Line: a.Line, RowsPerChunk: a.RowsPerChunk, RowSize: a.RowSize, Chunks: make([]chunkEntry, 0, len(a.Chunks))}
		for _, c := range a.Chunks {
			e.Chunks = append(e.Chunks, chunkEntry{IX: c.IX, Off: c.Off, Len: c.Len,
				SHA256: hex.EncodeToString(c.SHA256[:]), CRC32C: fmt.Sprintf("%08x", c.CRC32C), Line: c.Line, Pos: c.Data})
		}
		x.Arrays = append(x.Arrays, e)
		x.byName[e.Name] = e
	}
	return x
}
