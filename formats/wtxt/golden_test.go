package wtxt

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

var update = flag.Bool("update", false, "rewrite testdata/golden-* from the current writer")

// goldenCase is a small snapshot whose WTXT is kept in testdata with its
// exact expected bytes. Signing uses ed25519 seed 0x09 repeated, HMAC key
// "0123456789abcdef0123456789abcdef" (test keys, published on purpose).
type goldenCase struct {
	name string
	snap func() *snapshot.Snapshot
	opts EncodeOptions
}

func goldenCases() []goldenCase {
	hk := []byte("0123456789abcdef0123456789abcdef")
	return []goldenCase{
		{"golden-tiny", func() *snapshot.Snapshot {
			return &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{{Name: "x", DType: snapshot.U8, Shape: []int64{3}, Data: snapshot.Bytes{1, 2, 3}}}}
		}, EncodeOptions{}},
		{"golden-signed", func() *snapshot.Snapshot {
			return &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{randArray(11, "W", snapshot.F32, 6, 8), randArray(12, "b", snapshot.U8, 3)}}
		}, EncodeOptions{SignKey: testKey(9), HMACKey: hk, RowsPerChunk: 2, PrevMerkle: [32]byte{7}}},
		{"golden-ext", func() *snapshot.Snapshot {
			s := &snapshot.Snapshot{Meta: testMeta(3), Attrs: map[string]string{"x.k": "v"}, Arrays: []*snapshot.Array{
				randArray(21, "model.layers.0/attn:q-proj", snapshot.BF16, 5, 4),
				randArray(22, "flags", snapshot.Bool, 7),
				randArray(23, "step", snapshot.I64),
				randArray(24, "none", snapshot.F16, 3, 0),
			}}
			s.Arrays[1].Attrs = map[string]string{"x.orig": "Flags"}
			return s
		}, EncodeOptions{SignKey: testKey(9), HMACKey: hk}},
		{"golden-stream", func() *snapshot.Snapshot {
			return &snapshot.Snapshot{Meta: testMeta(4), Arrays: []*snapshot.Array{randArray(31, "R", snapshot.F64, 10, 4)}}
		}, EncodeOptions{SignKey: testKey(9), Stream: true, RowsPerChunk: 3}},
		{"golden-widerow", func() *snapshot.Snapshot {
			return &snapshot.Snapshot{Meta: testMeta(5), Arrays: []*snapshot.Array{randArray(41, "E", snapshot.U8, 3, 40000)}}
		}, EncodeOptions{}},
	}
}

func TestGolden(t *testing.T) {
	ctx := context.Background()
	pub := testKey(9).Public().(ed25519.PublicKey)
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join("testdata", tc.name+".wtxt")
			got, res := encodeBytes(t, tc.snap(), tc.opts)
			if *update {
				os.WriteFile(path, got, 0o644)
				if res.WSUM != nil {
					os.WriteFile(filepath.Join("testdata", tc.name+".wsum"), res.WSUM, 0o644)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("writer output differs from %s at byte %d", path, firstDiff(got, want))
			}
			// Through a file.
			f, err := os.Create(filepath.Join(t.TempDir(), "o.wtxt"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Encode(ctx, f, tc.snap(), tc.opts); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if b, _ := os.ReadFile(f.Name()); !bytes.Equal(b, want) {
				t.Fatal("file path output differs")
			}
			vo := VerifyOptions{TrustedKeys: []ed25519.PublicKey{pub}, HMACKey: tc.opts.HMACKey, PrevMerkle: &tc.opts.PrevMerkle, RequireSignature: tc.opts.SignKey != nil, AllowUnsigned: tc.opts.SignKey == nil}
			if res.WSUM != nil {
				vo.WSUM, err = os.ReadFile(filepath.Join("testdata", tc.name+".wsum"))
				if err != nil || !bytes.Equal(vo.WSUM, res.WSUM) {
					t.Fatalf("WSUM differs from testdata (%v)", err)
				}
			}
			if _, err := Verify(ctx, bytes.NewReader(want), vo); err != nil {
				t.Fatal(err)
			}
			s, err := New().Decode(ctx, bytes.NewReader(want), int64(len(want)), decodeOpts())
			if err != nil {
				t.Fatal(err)
			}
			again, _ := encodeBytes(t, s, tc.opts)
			if !bytes.Equal(again, want) {
				t.Fatalf("decode+encode differs at %d", firstDiff(again, want))
			}
		})
	}
}
