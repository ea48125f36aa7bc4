package torch_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/torch"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestWTXTFixedPoint: every fixture goes .pt -> WTXT -> .pt -> WTXT with
// the real WTXT codec and both WTXT files are byte-identical (names,
// bytes, ties, views and the object tree all survive).
func TestWTXTFixedPoint(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.pt")
	if len(files) < 4 {
		t.Fatalf("found %d fixtures", len(files))
	}
	ctx := context.Background()
	tc, wc := torch.New(), wtxt.New()
	toWTXT := func(s *snapshot.Snapshot) []byte {
		t.Helper()
		s.Meta = snapshot.DefaultMeta()
		s.Meta.TS = time.Unix(1767225600, 0).UTC()
		var buf bytes.Buffer
		if err := wc.Encode(ctx, &buf, s, formats.EncodeOptions{}); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	dec := func(c formats.Codec, b []byte) *snapshot.Snapshot {
		t.Helper()
		s, err := c.Decode(ctx, snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			in, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			w1 := toWTXT(dec(tc, in))
			var pt bytes.Buffer
			if err := tc.Encode(ctx, &pt, dec(wc, w1), formats.EncodeOptions{}); err != nil {
				t.Fatal(err)
			}
			w2 := toWTXT(dec(tc, pt.Bytes()))
			if !bytes.Equal(w1, w2) {
				t.Fatal("WTXT of the rewritten .pt differs")
			}
		})
	}
}
