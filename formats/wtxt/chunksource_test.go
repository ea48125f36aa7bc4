package wtxt

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestChunkSourceReadAt: a decoded array's ReadAt returns the array's
// bytes for any window — inside one line, across lines, chunks and the
// short last line of a chunk, longer than a line batch, at the end (EOF)
// — from memory and from a guarded file mapping (pread for batched
// reads).
func TestChunkSourceReadAt(t *testing.T) {
	s := &snapshot.Snapshot{Meta: testMeta(3), Arrays: []*snapshot.Array{
		randArray(1, "rows", snapshot.F32, 700, 97), // row-blocked: chunks end on short lines
		randArray(2, "flat", snapshot.U8, 3*UnblockedChunk+1000),
		randArray(3, "tiny", snapshot.I64),
	}}
	file, _ := encodeBytes(t, s, EncodeOptions{SignKey: testKey(1), RowsPerChunk: 13})
	path := filepath.Join(t.TempDir(), "a.wtxt")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.MapFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for name, ra := range map[string]interface {
		ReadAt([]byte, int64) (int, error)
		Size() int64
	}{"memory": snapshot.Bytes(file), "guarded": m.Guarded()} {
		d, err := New().Decode(context.Background(), ra, ra.Size(), formats.DecodeOptions{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(9, 9))
		for _, a := range d.Arrays {
			want, _ := snapshot.ReadAll(s.Array(a.Name).Data)
			got := make([]byte, len(want))
			if n, err := a.Data.ReadAt(got, 0); n != len(want) || (err != nil && len(want) > 0) || !bytes.Equal(got, want) {
				t.Fatalf("%s: %s: whole read: n=%d err=%v equal=%v", name, a.Name, n, err, bytes.Equal(got, want))
			}
			for range 300 {
				off := r.IntN(len(want))
				n := 1 + r.IntN(min(len(want)-off, []int{1, 60, 200, 3 * maxBatch}[r.IntN(4)]))
				p := make([]byte, n)
				if k, err := a.Data.ReadAt(p, int64(off)); k != n || err != nil || !bytes.Equal(p, want[off:off+n]) {
					t.Fatalf("%s: %s: ReadAt(%d, %d) = %d, %v; equal=%v", name, a.Name, n, off, k, err, bytes.Equal(p[:k], want[off:off+k]))
				}
			}
			p := make([]byte, 10)
			if k, err := a.Data.ReadAt(p, int64(len(want)-3)); k != 3 || err == nil || !bytes.Equal(p[:3], want[len(want)-3:]) {
				t.Fatalf("%s: %s: read past the end = %d, %v", name, a.Name, k, err)
			}
		}
	}
}
