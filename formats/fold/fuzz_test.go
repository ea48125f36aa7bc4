package fold

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// FuzzDecode: Decode never panics; whatever decodes re-encodes (through a
// simulated WTXT pass), the rebuilt file decodes to the same snapshot, and
// encoding that again gives the same bytes.
func FuzzDecode(f *testing.F) {
	for _, b := range formatstest.Seeds(f, "testdata/*.fold", "testdata/*.mind") {
		f.Add(b)
	}
	// Wrapped containers exercise the TSAV and STEN parsers.
	pts, err := filepath.Glob("testdata/torch/*.pt")
	if err != nil || len(pts) == 0 {
		f.Fatalf("no torch seeds: %v", err)
	}
	for i, p := range pts[:2] {
		pt, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(foldOf(f, chunkOf("torch_state", CTypeTSAV, uint32(i), "rs(16)", pt)))
	}
	f.Add(foldOf(f, chunkOf("torch_state", CTypeSTEN, 0, "none",
		sten(`{"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, f32s(1, 2)))))
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx := context.Background()
		testutil.NoEcho(t, func(b []byte) error {
			_, err := New().Decode(ctx, snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{MaxDecoded: 64 << 20})
			return err
		}, b, len(Magic))
		s, err := New().Decode(ctx, snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{MaxDecoded: 64 << 20})
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("decoded snapshot invalid: %v", err)
		}
		var buf bytes.Buffer
		if err := New().Encode(ctx, &buf, viaWTXT(t, s), formats.EncodeOptions{}); err != nil {
			t.Fatalf("decoded file does not re-encode: %v", err)
		}
		re := buf.Bytes()
		s2, err := New().Decode(ctx, snapshot.Bytes(re), int64(len(re)), formats.DecodeOptions{})
		if err != nil {
			t.Fatalf("re-encoded file does not decode: %v", err)
		}
		formatstest.EqualSorted(t, s, s2)
		buf.Reset()
		if err := New().Encode(ctx, &buf, viaWTXT(t, s2), formats.EncodeOptions{}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), re) {
			t.Fatal("encoding a re-decoded file is not stable")
		}
	})
}
