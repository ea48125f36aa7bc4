package review

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIsRankSkeleton(t *testing.T) {
	for p, want := range map[string]bool{
		"snapshots/ranks/rank-00000.skel":  true,
		"snapshots/ranks/rank-01023.skel":  true,
		"ranks/rank-123456.skel":           true,
		"snapshots/ranks/index.ranks":      false,
		"snapshots/ranks/rank-0001.skel":   false,
		"snapshots/ranks/rank-0000x.skel":  false,
		"snapshots/other/rank-00000.skel":  false,
		"snapshots/ranks/rank-00000.skelx": false,
	} {
		if IsRankSkeleton(p) != want || reviewed(p) != (want || p == "snapshots/ranks/index.ranks") {
			t.Errorf("IsRankSkeleton(%q) = %v, reviewed %v, want %v", p, IsRankSkeleton(p), reviewed(p), want)
		}
	}
}

// TestBuildRankSkeleton: a rank skeleton of a multi-rank generation is
// reviewed from its ch lines exactly like a single-node skeleton (same
// changed chunks and rows as the full WTXT review), with comments only on
// its changed ch lines, and no per-file chain verdict (the index carries
// the generation's chain).
func TestBuildRankSkeleton(t *testing.T) {
	f := newFixture(t, nil, nil)
	ctx := context.Background()
	dir := t.TempDir()
	w1, w2 := filepath.Join(dir, "1.wtxt"), filepath.Join(dir, "2.wtxt")
	os.WriteFile(w1, f.gen1, 0o644)
	os.WriteFile(w2, f.gen2, 0o644)
	opts := Options{TrustedKeys: []ed25519.PublicKey{f.pub}, HMACKey: f.hmac}
	full, err := Build(ctx, []FileInput{{Path: wtxtPath, Base: w1, Head: w2}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	blobs := blobMap{}
	s1, s2 := skeletonOf(t, dir, "r1.skel", f.gen1, blobs), skeletonOf(t, dir, "r2.skel", f.gen2, blobs)
	patch, err := LocalPatch(ctx, "", s1, s2)
	if err != nil {
		t.Fatal(err)
	}
	in := FileInput{Path: "snapshots/ranks/rank-00003.skel", Base: s1, Head: s2, HasPatch: true, Parsed: patch}
	rv, err := Build(ctx, []FileInput{in}, opts)
	if err != nil {
		t.Fatal(err)
	}
	fr := rv.Files[0]
	if got, want := fmt.Sprint(chunkKeys(fr, false)), fmt.Sprint(chunkKeys(full.Files[0], false)); got != want || len(fr.Chunks) == 0 {
		t.Fatalf("rank skeleton chunks %s\nWTXT review chunks %s", got, want)
	}
	if len(fr.Problems) != 0 || fr.Report == nil || fr.Report.Chain != "unchecked" {
		t.Fatalf("problems %v, report %+v", fr.Problems, fr.Report)
	}
	lines := strings.Split(string(mustRead(t, s2)), "\n")
	n := 0
	for _, c := range rv.Comments {
		if c.Chunk >= 0 {
			n++
			if c.Path != in.Path || !strings.HasPrefix(lines[c.Line-1], "ch ") {
				t.Fatalf("comment on %s line %d %q", c.Path, c.Line, lines[c.Line-1])
			}
		}
	}
	if n == 0 || !strings.Contains(rv.Body, "rank-00003.skel") || !strings.Contains(rv.Body, "reviewed from the skeletons' ch lines") {
		t.Fatalf("%d chunk comments\n%s", n, rv.Body)
	}
}
