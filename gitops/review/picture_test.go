package review

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/snapshot/diffsvg"
)

func decodeFile(t *testing.T, path string) *snapshot.Snapshot {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := wtxt.New().Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: path})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPictureFromChangedChunks: the picture drawn from the changed chunks
// alone is byte-identical to the one drawn from a full snapshot.Diff, and
// the budget refuses to read more than allowed.
func TestPictureFromChangedChunks(t *testing.T) {
	ctx := context.Background()
	base, head := filepath.Join("testdata", "gen1.wtxt"), filepath.Join("testdata", "gen2.wtxt")
	opts := diffsvg.Options{Title: "gen 000001 → 000002"}
	p, err := Picture(ctx, base, head, 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	bs, hs := decodeFile(t, base), decodeFile(t, head)
	ds, err := snapshot.Diff(ctx, bs, hs, snapshot.DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	full, err := diffsvg.Compute(ctx, bs, hs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.SVG(), full.SVG()) {
		t.Fatalf("picture from changed chunks differs from the full comparison:\n%s\n---\n%s", p.SVG(), full.SVG())
	}
	modified := 0
	for _, d := range ds {
		if d.Change == snapshot.Modified {
			modified++
		}
	}
	got := 0
	for _, s := range p.Strips {
		if s.Change == snapshot.Modified {
			got++
		}
	}
	if modified == 0 || got != modified {
		t.Fatalf("picture shows %d modified arrays, the diff %d", got, modified)
	}
	if _, err := Picture(ctx, base, head, 1, opts); !errors.Is(err, ErrPictureBudget) {
		t.Fatalf("budget of 1 byte: %v", err)
	}
	if _, err := Picture(ctx, base, filepath.Join(t.TempDir(), "missing.wtxt"), 0, opts); err == nil {
		t.Fatal("a missing head drew a picture")
	}
}
