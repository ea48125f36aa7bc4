package wtxt

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// FuzzVerify: any input verifies or fails with an error, never a panic;
// whatever decodes re-encodes to a file that verifies and decodes to the
// same arrays.
func FuzzVerify(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/golden-*.wtxt")
	if len(seeds) == 0 {
		f.Fatal("no seeds in testdata/golden-*.wtxt")
	}
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if len(b) < 8<<10 {
			f.Add(b)
		}
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, in []byte) {
		rep, err := Verify(ctx, bytes.NewReader(in), VerifyOptions{HMACKey: []byte("k"), WSUM: []byte("WSUM 1\n")})
		if rep == nil {
			t.Fatal("nil report")
		}
		_ = err
		s, err := New().Decode(ctx, bytes.NewReader(in), int64(len(in)), decodeOpts())
		if err != nil {
			return
		}
		var buf bytes.Buffer
		res, err := Encode(ctx, &buf, s, EncodeOptions{PrevMerkle: rep.Header.MerklePrev})
		if err != nil {
			t.Fatalf("decoded snapshot does not encode: %v", err)
		}
		if _, err := Verify(ctx, bytes.NewReader(buf.Bytes()), VerifyOptions{}); err != nil {
			t.Fatalf("re-encoded file does not verify: %v", err)
		}
		s2, err := New().Decode(ctx, bytes.NewReader(buf.Bytes()), int64(buf.Len()), decodeOpts())
		if err != nil {
			t.Fatal(err)
		}
		if len(s2.Arrays) != len(s.Arrays) || res.SHA256All != mustSum(t, buf.Bytes()) {
			t.Fatal("arrays changed through re-encoding")
		}
		for i, a := range s.Arrays {
			x, err1 := snapshot.ReadAll(a.Data)
			y, err2 := snapshot.ReadAll(s2.Arrays[i].Data)
			if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
				t.Fatalf("array %s bytes changed (%v %v)", a.Name, err1, err2)
			}
		}
	})
}

func mustSum(t *testing.T, b []byte) [32]byte {
	rep, err := Verify(context.Background(), bytes.NewReader(b), VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := ReadHeader(bytes.NewReader(b))
	_ = rep
	return h.SHA256All
}

// FuzzParseWSUM: no panics; accepted lines re-serialize identically.
func FuzzParseWSUM(f *testing.F) {
	b, err := os.ReadFile("testdata/golden-stream.wsum")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, in []byte) {
		w, err := ParseWSUM(in)
		if err != nil {
			return
		}
		if !bytes.HasPrefix(in, w.Unsigned) {
			t.Fatal("unsigned part is not a prefix")
		}
	})
}
