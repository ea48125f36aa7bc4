package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNumpyThroughWTXT: every NumPy fixture goes X -> WTXT -> X -> WTXT
// through `snapd convert`, found by sniffing (no --from). X comes back
// byte for byte (deflated members: Go's deflate is not zlib's, so the same
// arrays and attributes instead) and the second WTXT equals the first (a
// fixed point). The object array is refused, naming the file.
func TestNumpyThroughWTXT(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(fixtures, "numpy", "*.np[yz]"))
	if len(files) < 6 {
		t.Fatalf("found only %d numpy fixtures", len(files))
	}
	ctx := context.Background()
	reg := newRegistry()
	for _, in := range files {
		t.Run(filepath.Base(in), func(t *testing.T) {
			d := t.TempDir()
			w1 := filepath.Join(d, "x.wtxt")
			if strings.HasPrefix(filepath.Base(in), "object") {
				code, _, errs := snapd(t, nil, "convert", in, w1)
				if code != exitInvalid || !strings.Contains(errs, "object") || !strings.Contains(errs, "object_array.npy") {
					t.Fatalf("exit %d: %s", code, errs)
				}
				return
			}
			back := filepath.Join(d, "back"+filepath.Ext(in))
			w2 := filepath.Join(d, "y.wtxt")
			mustRun(t, "convert", in, w1, "--ts", "2026-01-01T00:00:00Z")
			mustRun(t, "convert", w1, back)
			mustRun(t, "convert", back, w2, "--ts", "2026-01-01T00:00:00Z")
			x, _ := os.ReadFile(in)
			y, _ := os.ReadFile(back)
			if !bytes.Equal(x, y) {
				if !strings.HasPrefix(filepath.Base(in), "deflated") {
					t.Fatal("X -> WTXT -> X is not byte-identical")
				}
				a, err := openSnapshot(ctx, reg, in, "")
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				b, err := openSnapshot(ctx, reg, back, "")
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				sameSnapshot(t, a.Snapshot, b.Snapshot)
			}
			p, _ := os.ReadFile(w1)
			q, _ := os.ReadFile(w2)
			if !bytes.Equal(p, q) {
				t.Fatal("X -> WTXT -> X -> WTXT is not a fixed point")
			}
		})
	}
}
