package chunkdiff

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/snapshot/diffsvg"
)

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
	// A damaged changed chunk: an error naming the file, array and chunk,
	// never a picture of wrong numbers, never the file's content.
	hb, err := os.ReadFile(head)
	if err != nil {
		t.Fatal(err)
	}
	hx, err := wtxt.ReadIndex(ctx, head, snapshot.Bytes(hb), int64(len(hb)))
	if err != nil {
		t.Fatal(err)
	}
	var victim *wtxt.IndexChunk
	var arrayName string
	bb, _ := os.ReadFile(base)
	bidx, _ := wtxt.ReadIndex(ctx, base, snapshot.Bytes(bb), int64(len(bb)))
	for _, a := range hx.Arrays {
		for i := range a.Chunks {
			if b := bidx.Array(a.Name); b != nil && len(b.Chunks) == len(a.Chunks) && b.Chunks[i].SHA256 != a.Chunks[i].SHA256 && victim == nil {
				victim, arrayName = &a.Chunks[i], a.Name
			}
		}
	}
	if victim == nil {
		t.Fatal("no changed chunk in the fixture")
	}
	bad := bytes.Clone(hb)
	if bad[victim.Data] == 'A' {
		bad[victim.Data] = 'B'
	} else {
		bad[victim.Data] = 'A'
	}
	badPath := filepath.Join(t.TempDir(), "bad.wtxt")
	if err := os.WriteFile(badPath, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Picture(ctx, base, badPath, 0, opts)
	if err == nil || !strings.Contains(err.Error(), badPath) || !strings.Contains(err.Error(), arrayName) || !strings.Contains(err.Error(), "parity") {
		t.Fatalf("damaged chunk: %v", err)
	}
}
