package wtxt

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/snapshot"
)

// encodeAllWays encodes s with opts to a file (the parallel WriterAt
// path), to a buffer (the ordered writer) and, when stream, streamed, and
// checks the three agree with each other as they must; it returns the
// file's bytes and the file encode's Result.
func encodeAllWays(t testing.TB, s *snapshot.Snapshot, opts EncodeOptions) ([]byte, *Result) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "out.wtxt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Encode(ctx, f, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	bres, err := Encode(ctx, &buf, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), file) {
		t.Fatalf("file and buffer encodes differ")
	}
	if bres.ChunksCopied != res.ChunksCopied || bres.ChunksCopyFailed != res.ChunksCopyFailed {
		t.Fatalf("copied %d/%d chunks to the buffer, %d/%d to the file", bres.ChunksCopied, bres.ChunksCopyFailed, res.ChunksCopied, res.ChunksCopyFailed)
	}
	return file, res
}

// prevOf indexes b as a previous generation.
func prevOf(t testing.TB, b []byte) *PrevWTXT {
	t.Helper()
	x, err := ReadIndex(context.Background(), "prev.wtxt", bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return &PrevWTXT{R: bytes.NewReader(b), Index: x}
}

func cloneSnap(s *snapshot.Snapshot, gen uint64) *snapshot.Snapshot {
	out := &snapshot.Snapshot{Meta: testMeta(gen)}
	for _, a := range s.Arrays {
		b, _ := snapshot.BytesOf(a.Data)
		out.Arrays = append(out.Arrays, &snapshot.Array{Name: a.Name, DType: a.DType, Shape: append([]int64(nil), a.Shape...), Data: snapshot.Bytes(bytes.Clone(b))})
	}
	return out
}

func arrayBytes(s *snapshot.Snapshot, name string) []byte {
	b, _ := snapshot.BytesOf(s.Array(name).Data)
	return b
}

// incBase is generation 1 of the synthetic model of the tests: a
// row-blocked matrix of 9 chunks whose last chunk is short, a 1-D array,
// a bf16 matrix (tensor_ext), a rank-0 and a zero-size array.
func incBase() *snapshot.Snapshot {
	return &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{
		randArray(1, "W", snapshot.F32, 8*256+5, 64), // 256 rows of 256 B per 64 KiB chunk
		randArray(2, "b", snapshot.U8, 200_000),
		randArray(3, "h", snapshot.BF16, 300, 100),
		randArray(4, "s", snapshot.F64),
		randArray(5, "z", snapshot.F32, 0, 7),
	}}
}

// TestEncodePrevIdentical: with the previous generation's file as Prev the
// output is byte-identical to a full encode for every kind of change, and
// exactly the chunks that kept their bytes, index and geometry are copied.
func TestEncodePrevIdentical(t *testing.T) {
	base := incBase()
	keys := EncodeOptions{SignKey: testKey(1), HMACKey: []byte("0123456789abcdef0123456789abcdef")}
	prevBytes, _ := encodeBytes(t, base, keys)
	_, full0 := encodeAllWays(t, cloneSnap(base, 2), keys)
	total := int64(0)
	for _, a := range full0.Arrays {
		total += a.Chunks
	}
	chunksOf := func(name string) int64 {
		for _, a := range full0.Arrays {
			if a.Name == name {
				return a.Chunks
			}
		}
		t.Fatalf("no array %s", name)
		return 0
	}
	cases := []struct {
		name   string
		change func(s *snapshot.Snapshot)
		opts   func(o *EncodeOptions)
		copied int64
	}{
		{"unchanged", func(*snapshot.Snapshot) {}, nil, total},
		{"first chunk", func(s *snapshot.Snapshot) { arrayBytes(s, "W")[3] ^= 1 }, nil, total - 1},
		{"last chunk", func(s *snapshot.Snapshot) { w := arrayBytes(s, "W"); w[len(w)-1] ^= 1 }, nil, total - 1},
		{"first and last chunk of two arrays", func(s *snapshot.Snapshot) {
			w := arrayBytes(s, "W")
			w[0] ^= 1
			w[len(w)-1] ^= 1
			b := arrayBytes(s, "b")
			b[len(b)-1] ^= 0x80
		}, nil, total - 3},
		{"rank 0 changed", func(s *snapshot.Snapshot) { arrayBytes(s, "s")[7] ^= 1 }, nil, total - 1},
		{"reshaped", func(s *snapshot.Snapshot) { s.Array("W").Shape = []int64{(8*256 + 5) * 64} }, nil, total - chunksOf("W")},
		{"renamed", func(s *snapshot.Snapshot) { s.Array("W").Name = "W2" }, nil, total - chunksOf("W")},
		{"dtype changed", func(s *snapshot.Snapshot) { s.Array("W").DType = snapshot.I32 }, nil, total - chunksOf("W")},
		{"tail chunk longer", func(s *snapshot.Snapshot) {
			a := s.Array("W")
			old := arrayBytes(s, "W")
			a.Shape = []int64{8*256 + 9, 64}
			a.Data = snapshot.Bytes(append(bytes.Clone(old), make([]byte, 4*256)...))
		}, nil, total - chunksOf("W")},
		{"array added", func(s *snapshot.Snapshot) {
			s.Arrays = append(s.Arrays, randArray(9, "a.new", snapshot.F32, 100, 100))
		}, nil, total},
		{"array removed", func(s *snapshot.Snapshot) { s.Arrays = s.Arrays[1:] }, nil, total - chunksOf("W")},
		{"rows per chunk changed", func(*snapshot.Snapshot) {}, func(o *EncodeOptions) { o.RowsPerChunk = 64 }, chunksOf("s") + chunksOf("z")},
		{"unsigned, no key", func(s *snapshot.Snapshot) { arrayBytes(s, "b")[100_000] ^= 1 }, func(o *EncodeOptions) { o.SignKey, o.HMACKey = nil, nil }, total - 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := cloneSnap(base, 2)
			tc.change(s)
			o := keys
			if tc.opts != nil {
				tc.opts(&o)
			}
			want, fres := encodeAllWays(t, s, o)
			if fres.ChunksCopied != 0 {
				t.Fatalf("full encode copied %d chunks", fres.ChunksCopied)
			}
			o.Prev = prevOf(t, prevBytes)
			got, res := encodeAllWays(t, s, o)
			if !bytes.Equal(got, want) {
				t.Fatalf("incremental encode differs from the full encode")
			}
			if res.ChunksCopied != tc.copied || res.ChunksCopyFailed != 0 {
				t.Fatalf("copied %d chunks (%d failed checks), want %d of %d", res.ChunksCopied, res.ChunksCopyFailed, tc.copied, total)
			}
			if _, err := Verify(context.Background(), bytes.NewReader(got), VerifyOptions{HMACKey: o.HMACKey}); err != nil {
				t.Fatal(err)
			}
			// Streamed: the same body.
			o.Stream = true
			var sb bytes.Buffer
			sres, err := Encode(context.Background(), &sb, s, o)
			if err != nil {
				t.Fatal(err)
			}
			o.Prev = nil
			var fb bytes.Buffer
			if _, err := Encode(context.Background(), &fb, s, o); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(sb.Bytes(), fb.Bytes()) || sres.ChunksCopied != tc.copied {
				t.Fatalf("streamed incremental encode differs (copied %d)", sres.ChunksCopied)
			}
		})
	}
}

// TestEncodePrevFixtures: every WTXT fixture (testdata and the shared
// conformance vectors), decoded and encoded again as a later generation
// with the fixture itself as Prev, gives the full encode's bytes with
// every chunk copied.
func TestEncodePrevFixtures(t *testing.T) {
	files, _ := filepath.Glob("testdata/golden-*.wtxt")
	shared, _ := filepath.Glob(filepath.Join(vectorsDir, "*.wtxt"))
	files = append(files, shared...)
	if len(files) < 5 {
		t.Fatalf("fixtures: found only %v", files)
	}
	ctx := context.Background()
	var copiedAll int64
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			s, err := New().Decode(ctx, bytes.NewReader(b), int64(len(b)), decodeOpts())
			if err != nil {
				t.Fatal(err)
			}
			s.Meta.Gen++
			opts := EncodeOptions{SignKey: testKey(2)}
			want, full := encodeAllWays(t, s, opts)
			opts.Prev = prevOf(t, b)
			got, res := encodeAllWays(t, s, opts)
			if !bytes.Equal(got, want) {
				t.Fatal("incremental encode differs from the full encode")
			}
			// Expected: the chunks of arrays with the fixture's geometry
			// (a fixture may use another rows_per_chunk) and its bytes.
			wx := prevOf(t, want).Index
			var expect int64
			for i := range wx.Arrays {
				a := &wx.Arrays[i]
				if pa := opts.Prev.Index.Array(a.Name); pa != nil && a.SameGeometry(pa) {
					for j := range a.Chunks {
						if a.Chunks[j].SHA256 == pa.Chunks[j].SHA256 {
							expect++
						}
					}
				}
			}
			if res.ChunksCopied != expect || res.ChunksCopyFailed != 0 || full.ChunksCopied != 0 {
				t.Fatalf("copied %d chunks, want %d; %d failed", res.ChunksCopied, expect, res.ChunksCopyFailed)
			}
			copiedAll += res.ChunksCopied
		})
	}
	if copiedAll == 0 {
		t.Fatal("no fixture chunk was copied")
	}
}

// TestEncodePrevDamaged: a previous file that lies (edited lines with the
// parity fixed, a parity-preserving character swap, a truncated file, an
// index of another file, a missing endch) never changes the output: the
// chunk is encoded and counted in ChunksCopyFailed.
func TestEncodePrevDamaged(t *testing.T) {
	base := incBase()
	opts := EncodeOptions{HMACKey: []byte("k")}
	prev, _ := encodeBytes(t, base, opts)
	s := cloneSnap(base, 2)
	want, _ := encodeBytes(t, s, opts)
	good := prevOf(t, prev)
	w := good.Index.Array("W")
	c0 := w.Chunks[0]
	edit := func(f func(b []byte)) []byte { b := bytes.Clone(prev); f(b); return b }
	cases := []struct {
		name   string
		r      []byte // the bytes read (the index is good's)
		failed int64
	}{
		{"character changed, parity fixed", edit(func(b []byte) {
			l := b[c0.Data : c0.Data+lineOut]
			l[10] = map[bool]byte{true: 'B', false: 'A'}[l[10] == 'A']
			l[B64Width+1] = parityNibble(l[:B64Width])
		}), 1},
		{"parity-preserving swap", edit(func(b []byte) {
			l := b[c0.Data+lineOut : c0.Data+2*lineOut]
			// 'A' (0x41) and 'Q' (0x51) have the same low nibble.
			if l[5] == 'A' {
				l[5] = 'Q'
			} else if l[5] == 'Q' {
				l[5] = 'A'
			} else {
				l[5], l[6] = l[6], l[5] // a swap keeps the XOR
				if l[5] == l[6] {
					l[5], l[7] = l[7], l[5]
				}
			}
		}), 1},
		{"last line of the last chunk", edit(func(b []byte) {
			c := w.Chunks[len(w.Chunks)-1]
			b[c.End-len64("endch\n")-5] ^= 0x01
		}), 1},
		{"endch replaced", edit(func(b []byte) { copy(b[c0.End-6:], "endcx\n") }), 1},
		{"non-alphabet character", edit(func(b []byte) { b[c0.Data+3] = '*' }), 1},
		{"truncated in W", prev[:c0.Data+100], -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := opts
			o.Prev = &PrevWTXT{R: bytes.NewReader(tc.r), Index: good.Index}
			got, res := encodeAllWays(t, s, o)
			if !bytes.Equal(got, want) {
				t.Fatal("a damaged previous file changed the output")
			}
			if tc.failed < 0 {
				if res.ChunksCopied != 0 || res.ChunksCopyFailed == 0 {
					t.Fatalf("copied %d, failed %d", res.ChunksCopied, res.ChunksCopyFailed)
				}
				return
			}
			if res.ChunksCopyFailed != tc.failed {
				t.Fatalf("failed checks %d, want %d (copied %d)", res.ChunksCopyFailed, tc.failed, res.ChunksCopied)
			}
		})
	}
	// The index of another file (same arrays, shifted offsets).
	other := cloneSnap(base, 1)
	other.Meta.Build = "a-longer-build-string-shifts-every-offset"
	ob, _ := encodeBytes(t, other, opts)
	o := opts
	o.Prev = &PrevWTXT{R: bytes.NewReader(prev), Index: prevOf(t, ob).Index}
	got, res := encodeAllWays(t, s, o)
	if !bytes.Equal(got, want) || res.ChunksCopied != 0 || res.ChunksCopyFailed == 0 {
		t.Fatalf("shifted index: equal %v, copied %d, failed %d", bytes.Equal(got, want), res.ChunksCopied, res.ChunksCopyFailed)
	}
}

func len64(s string) int64 { return int64(len(s)) }

// FuzzEncodePrev: generation 2 encoded with a previous generation's file
// as Prev equals the full encode, whatever the change between the
// generations and whatever damage the previous file took (one byte set at
// any offset, or the file cut short). Seeds: the testdata fixtures' first
// array.
func FuzzEncodePrev(f *testing.F) {
	seeds := formatstest.Seeds(f, "testdata/golden-*.wtxt")
	ctx := context.Background()
	for _, b := range seeds {
		s, err := New().Decode(ctx, bytes.NewReader(b), int64(len(b)), decodeOpts())
		if err != nil || len(s.Arrays) == 0 {
			continue
		}
		raw := make([]byte, s.Arrays[0].Data.Size())
		if _, err := s.Arrays[0].Data.ReadAt(raw, 0); err != nil && len(raw) > 0 {
			continue
		}
		f.Add(raw, uint16(3), uint32(0), byte(0), uint32(1), byte(0))
		f.Add(raw, uint16(8), uint32(len(raw)/2), byte(1), uint32(400), byte('B'))
	}
	f.Add(bytes.Repeat([]byte("ab"), 5000), uint16(57), uint32(4999), byte(7), uint32(0), byte(0))
	f.Fuzz(func(t *testing.T, raw []byte, cols uint16, at uint32, flip byte, damage uint32, val byte) {
		if len(raw) > 1<<16 {
			raw = raw[:1<<16]
		}
		c := int64(cols%64) + 1
		rows := int64(len(raw)) / c
		raw = raw[:rows*c]
		mk := func(gen uint64, b []byte) *snapshot.Snapshot {
			return &snapshot.Snapshot{Meta: testMeta(gen), Arrays: []*snapshot.Array{
				{Name: "m", DType: snapshot.U8, Shape: []int64{rows, c}, Data: snapshot.Bytes(b)},
				{Name: "v", DType: snapshot.U8, Shape: []int64{int64(len(b))}, Data: snapshot.Bytes(b)},
			}}
		}
		opts := EncodeOptions{RowsPerChunk: 1 + int(cols>>8)%32}
		var pb bytes.Buffer
		if _, err := Encode(ctx, &pb, mk(1, raw), opts); err != nil {
			t.Fatal(err)
		}
		next := bytes.Clone(raw)
		if len(next) > 0 {
			next[int(at)%len(next)] ^= flip
		}
		pf := pb.Bytes()
		x, err := ReadIndex(ctx, "prev", bytes.NewReader(pf), int64(len(pf)))
		if err != nil {
			t.Fatal(err)
		}
		damaged := bytes.Clone(pf)
		if d := int(damage) % (len(damaged) + 1); damage&(1<<31) != 0 {
			damaged = damaged[:d]
		} else if d < len(damaged) {
			damaged[d] = val
		}
		var want, got bytes.Buffer
		if _, err := Encode(ctx, &want, mk(2, next), opts); err != nil {
			t.Fatal(err)
		}
		opts.Prev = &PrevWTXT{R: bytes.NewReader(damaged), Index: x}
		res, err := Encode(ctx, &got, mk(2, next), opts)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("incremental encode differs (copied %d, failed %d)", res.ChunksCopied, res.ChunksCopyFailed)
		}
		if bytes.Equal(damaged, pf) && flip == 0 && res.ChunksCopyFailed != 0 {
			t.Fatalf("undamaged previous file: %d failed checks", res.ChunksCopyFailed)
		}
	})
}
