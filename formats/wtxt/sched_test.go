package wtxt

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// readerSource hides a Bytes behind a plain io.ReaderAt, so the encoder
// takes its read-into-buffer paths instead of the memory-backed ones.
type readerSource struct{ b snapshot.Bytes }

func (r readerSource) ReadAt(p []byte, off int64) (int, error) { return r.b.ReadAt(p, off) }
func (r readerSource) Size() int64                             { return r.b.Size() }

// TestEncodePathsAgree: the chunk sums may be computed ahead of the body
// (all of them, some of them, or none: a budget or sha256_all finishing
// first cuts the pass short), arrays may be memory-backed or read through
// ReadAt, and the writer may be a buffer, a file or a stream; the bytes
// must not depend on any of it. The reference is Workers=1, where nothing
// is computed ahead.
//
// The whole matrix runs on arrays of at most 80 KB a chunk. The paths of
// a chunk above bigChunk (streamed by the writer) run on big_rows, two
// such chunks, for each key, source and writer, with maxSums=1: the first
// chunk is summed ahead and the second is not, so one run takes both of
// streamChunk's branches (each run encodes 8 MiB, slow under -race).
func TestEncodePathsAgree(t *testing.T) {
	// The arrays' bytes are made once; every run wraps them afresh.
	bigRows := randArray(1, "big_rows", snapshot.F32, 2, (bigChunk/4)+100)
	rows := randArray(1, "rows", snapshot.F32, 2, 20000) // two rows above the default chunk
	rest := []*snapshot.Array{
		randArray(2, "many", snapshot.U8, 3000, 7),
		randArray(3, "scalar", snapshot.I16),
		randArray(4, "w", snapshot.F32, 700, 33),
		randArray(5, "z", snapshot.U8, 0),
	}
	arrays := func(first *snapshot.Array, viaReader bool) *snapshot.Snapshot {
		s := &snapshot.Snapshot{Meta: testMeta(4)}
		for _, a := range append([]*snapshot.Array{first}, rest...) {
			c := *a
			if viaReader {
				b, _ := snapshot.BytesOf(a.Data)
				c.Data = readerSource{snapshot.Bytes(b)}
			}
			s.Arrays = append(s.Arrays, &c)
		}
		return s
	}
	for _, first := range []*snapshot.Array{rows, bigRows} {
		maxSumsSet := []int64{0, 1, 40}
		if first == bigRows {
			maxSumsSet = []int64{1}
		}
		for _, key := range [][]byte{nil, []byte("key")} {
			if raceEnabled && first == bigRows && key == nil {
				continue // the 8 MiB array is slow under the race detector: the keyed run covers its paths
			}
			ref := EncodeOptions{SignKey: testKey(2), HMACKey: key, RowsPerChunk: 0, Workers: 1}
			want, _ := encodeBytes(t, arrays(first, false), ref)
			for _, viaReader := range []bool{false, true} {
				for _, maxSums := range maxSumsSet {
					for _, workers := range []int{2} {
						o := ref
						o.Workers, o.maxSums = workers, maxSums
						s := arrays(first, viaReader)
						got, _ := encodeBytes(t, s, o)
						if !bytes.Equal(got, want) {
							t.Fatalf("%s key=%v reader=%v maxSums=%d workers=%d: buffer output differs at %d", first.Name, key != nil, viaReader, maxSums, workers, firstDiff(got, want))
						}
						if got := encodeFile(t, s, o); !bytes.Equal(got, want) {
							t.Fatalf("%s key=%v reader=%v maxSums=%d workers=%d: file output differs at %d", first.Name, key != nil, viaReader, maxSums, workers, firstDiff(got, want))
						}
					}
				}
			}
		}
	}
	// A tiny row-blocked layout (one 7-byte row a chunk) with a budget far
	// below the chunk count.
	s := &snapshot.Snapshot{Meta: testMeta(4), Arrays: []*snapshot.Array{randArray(9, "rows", snapshot.U8, 5000, 7)}}
	ref := EncodeOptions{HMACKey: []byte("k"), RowsPerChunk: 1, Workers: 1}
	want, _ := encodeBytes(t, s, ref)
	o := ref
	o.Workers, o.maxSums = 2, 1000
	if got, _ := encodeBytes(t, s, o); !bytes.Equal(got, want) {
		t.Fatalf("rows_per_chunk=1: output differs at %d", firstDiff(got, want))
	}
	if got := encodeFile(t, s, o); !bytes.Equal(got, want) {
		t.Fatalf("rows_per_chunk=1: file output differs at %d", firstDiff(got, want))
	}
	// Many small arrays, batched into shared body ranges in a file.
	s = &snapshot.Snapshot{Meta: testMeta(4)}
	for i := range 300 {
		s.Arrays = append(s.Arrays, randArray(uint64(i), fmt.Sprintf("a%03d", i), snapshot.U8, int64(i*37%1000)))
	}
	want, _ = encodeBytes(t, s, ref)
	if got := encodeFile(t, s, o); !bytes.Equal(got, want) {
		t.Fatalf("small arrays: file output differs at %d", firstDiff(got, want))
	}
}

func encodeFile(t *testing.T, s *snapshot.Snapshot, o EncodeOptions) []byte {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "x.wtxt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := Encode(context.Background(), f, s, o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if res.Written != int64(len(got)) {
		t.Fatalf("Written = %d, file has %d bytes", res.Written, len(got))
	}
	return got
}
