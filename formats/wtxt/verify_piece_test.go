package wtxt

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// TestVerifyPieceSizes verifies files whose chunks' raw sizes sit on both
// sides of the decode buffers' sizes (a buffer of the chunk's own size
// below ownPieceMax, a pooled pieceMax one above it, a chunk cut into
// pieces beyond pieceMax): each pristine file passes, and a changed
// base64 character in the last line of the middle chunk is found there.
func TestVerifyPieceSizes(t *testing.T) {
	rows := []int64{1, rawPerLine - 1, rawPerLine, rawPerLine + 1,
		ownPieceMax - 2*rawPerLine, ownPieceMax - rawPerLine - 1, ownPieceMax - rawPerLine, ownPieceMax, pieceMax + 3}
	for i, row := range rows {
		t.Run(fmt.Sprint(row), func(t *testing.T) {
			s := &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{
				randArray(uint64(i+1), "x", snapshot.U8, 3, row), // one row per chunk
			}}
			data, _ := encodeBytes(t, s, EncodeOptions{RowsPerChunk: 1})
			ctx := context.Background()
			if rep, err := Verify(ctx, bytes.NewReader(data), VerifyOptions{}); err != nil || !rep.OK() {
				t.Fatalf("pristine file: %v", err)
			}
			// The last base64 line of the second chunk.
			lines := bytes.SplitAfter(data, []byte("\n"))
			ends, off := 0, 0
			target := -1
			for k, l := range lines {
				if string(l) == "endch\n" {
					if ends++; ends == 2 {
						target = k - 1
						break
					}
				}
				off += len(l)
			}
			if target < 0 {
				t.Fatal("no second chunk")
			}
			off -= len(lines[target])
			bad := bytes.Clone(data)
			if bad[off] == 'A' {
				bad[off] = 'B'
			} else {
				bad[off] = 'A'
			}
			line, ch, _ := lineOf(bad, off)
			rep, err := Verify(ctx, bytes.NewReader(bad), VerifyOptions{})
			if err == nil {
				t.Fatalf("changed character at line %d not detected", line)
			}
			if !located(rep, line, ch) {
				t.Fatalf("changed character at line %d (chunk at line %d): %v", line, ch, rep.Failures)
			}
		})
	}
}
