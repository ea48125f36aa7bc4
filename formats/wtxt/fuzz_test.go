package wtxt

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// FuzzVerify: any input verifies or fails with an error, never a panic;
// whatever decodes re-encodes to a file that verifies and decodes to the
// same arrays.
func FuzzVerify(f *testing.F) {
	for _, b := range formatstest.Seeds(f, "testdata/golden-*.wtxt") {
		if len(b) < 8<<10 {
			f.Add(b)
		}
	}
	// Sizes near 2^63, overflowing idx products and short chunk lens
	// and a non-canonical rows_per_chunk.
	zero := strings.Repeat("0", 64)
	for _, body := range []string{
		"arr name=A dtype=u8 shape=9223372036854775807 order=C bytes=9223372036854775807 sha256=" + zero + " hmac=" + zero + " salt=0000000000000000\nidx rows_per_chunk=65536 row_size=1 row_blocking=on\nendarr\n",
		"arr name=A dtype=f64 shape=4,2 order=C bytes=64 sha256=" + zero + " hmac=" + zero + " salt=0000000000000000\nidx rows_per_chunk=9223372036854775807 row_size=16 row_blocking=on\nendarr\n",
		"arr name=A dtype=u8 shape=1,4611686018427387904 order=C bytes=4611686018427387904 sha256=" + zero + " hmac=" + zero + " salt=0000000000000000\nidx rows_per_chunk=1 row_size=4611686018427387904 row_blocking=on\nch ix=000000 off=000000000000 len=4611686018427387904 sha256=" + zero + " crc32c=00000000 b64=on width=76 lines=80906777516262878\nendch\nendarr\n",
	} {
		f.Add(signedFile(f, body))
	}
	if b, err := os.ReadFile("testdata/golden-tiny.wtxt"); err == nil {
		f.Add(bytes.Replace(b, []byte("rows_per_chunk=65536"), []byte("rows_per_chunk=3"), 1))
	}
	ctx := context.Background()
	fixed := append(fixedTexts(), testutil.SourceTexts(f, ".")...)
	f.Fuzz(func(t *testing.T, in []byte) {
		rep, err := Verify(ctx, bytes.NewReader(in), VerifyOptions{HMACKey: []byte("k"), WSUM: []byte("WSUM 1\n")})
		if rep == nil {
			t.Fatal("nil report")
		}
		if err != nil {
			// Errors never echo file content (a run of the input with
			// a byte no name, decimal or digest holds).
			if run, ok := testutil.EchoedRun(err.Error(), in, fixed...); ok {
				t.Fatalf("error echoes the input run %q: %v", run, err)
			}
		}
		// The WSUM-free path and the structure-only index never panic
		// either, and agree with the full verifier on structure.
		if drep, derr := Verify(ctx, bytes.NewReader(in), VerifyOptions{DeferWSUM: true}); derr == nil && drep.Header != nil {
			if _, _, serr := structIndex(ctx, "f", bytes.NewReader(in), int64(len(in))); serr != nil {
				t.Fatalf("verifies but structIndex refuses: %v", serr)
			}
		}
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

// FuzzApplyDelta: a hostile delta against a fixed base never panics, and
// whatever it rebuilds is checked by the verifier (never trusted blindly).
func FuzzApplyDelta(f *testing.F) {
	base, err := os.ReadFile("testdata/golden-signed.wtxt")
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{"testdata/golden-tiny.wtxt", "testdata/golden-signed.wtxt", "testdata/golden-ext.wtxt"} {
		target, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		d, _ := makeDelta(f, base, target)
		f.Add(d)
	}
	ctx := context.Background()
	fixed := append(fixedTexts(), testutil.SourceTexts(f, ".")...)
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		if _, err := ApplyDelta(ctx, &out, bytes.NewReader(base), int64(len(base)), bytes.NewReader(in), "fuzz.wtxtdelta"); err != nil {
			if run, ok := testutil.EchoedRun(err.Error(), in, fixed...); ok {
				t.Fatalf("error echoes the input run %q: %v", run, err)
			}
			return
		}
		if rep, _ := Verify(ctx, bytes.NewReader(out.Bytes()), VerifyOptions{DeferWSUM: true}); rep == nil {
			t.Fatal("nil report")
		}
	})
}
