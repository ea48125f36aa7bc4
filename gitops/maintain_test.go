package gitops

import (
	"bytes"
	"context"
	"testing"
)

// TestMaintainRepacks: a run whose generations each write a pack stays
// at a bounded pack count: Maintain does nothing up to Config.MaxPacks,
// then git repack --geometric rolls the small packs up. Afterwards the
// repository is fsck clean, the same Repo (its pack list re-read) and a
// reopened one read every generation byte for byte and commit the next,
// and every piece is still a delta against its base blob (git kept the
// literal deltas). A cancelled context stops the repack with an error
// and leaves the repository intact; MaxPacks < 0 turns it off.
func TestMaintainRepacks(t *testing.T) {
	key, _ := testKey(t)
	dir := t.TempDir()
	base := []testArray{{name: "w", data: pseudo(21, 400_000), chunk: 1024}}
	const gens = 7
	chain := genChain(t, dir, gens, base, func(g int, a []testArray) {
		for i := 97 * g; g > 1 && i < len(a[0].data); i += 3 * 1024 {
			a[0].data[i] ^= 0x33 // one row in every third chunk: a pack per generation
		}
	})
	repoDir := dir + "/repo.git"
	cfg := Config{SigningKey: key, Layout: LayoutSegments, SegmentSize: 1024, SegmentPiece: 256, MaxPacks: 3}
	r, err := OpenRepo(repoDir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var tags []string
	repacked := 0
	for i, p := range chain.paths[:gens-1] {
		res, err := r.Commit(ctx, Generation{WTXT: p})
		if err != nil {
			t.Fatalf("gen %d: %v", i+1, err)
		}
		tags = append(tags, res.Tag)
		m, err := r.Maintain(ctx)
		if err != nil {
			t.Fatalf("gen %d: maintain: %v", i+1, err)
		}
		switch {
		case m.PacksBefore <= cfg.MaxPacks && (m.Repacked || m.PacksAfter != m.PacksBefore):
			t.Fatalf("gen %d: %d packs, at most %d: repacked anyway (%+v)", i+1, m.PacksBefore, cfg.MaxPacks, m)
		case m.PacksBefore > cfg.MaxPacks && (!m.Repacked || m.PacksAfter >= m.PacksBefore):
			t.Fatalf("gen %d: %d packs over %d, not reduced (%+v)", i+1, m.PacksBefore, cfg.MaxPacks, m)
		case m.PacksAfter > cfg.MaxPacks:
			t.Fatalf("gen %d: %d packs left, more than %d", i+1, m.PacksAfter, cfg.MaxPacks)
		}
		if m.Repacked {
			repacked++
		}
	}
	if repacked == 0 {
		t.Fatalf("%d generations, MaxPacks %d: never repacked", gens-1, cfg.MaxPacks)
	}
	gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")
	// The same Repo commits the last generation on the repacked store;
	// it and a reopened Repo read every generation.
	res, err := r.Commit(ctx, Generation{WTXT: chain.paths[gens-1]})
	if err != nil {
		t.Fatalf("gen %d after repacks: %v", gens, err)
	}
	tags = append(tags, res.Tag)
	r2, err := OpenRepo(repoDir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, tag := range tags {
		for _, rr := range []*Repo{r, r2} {
			var out bytes.Buffer
			if err := rr.WriteWTXT(tag, &out); err != nil || !bytes.Equal(out.Bytes(), chain.data[i]) {
				t.Fatalf("WriteWTXT %s: %v", tag, err)
			}
		}
	}
	got := deltaBases(t, repoDir)
	for piece, b := range pieceBases(t, repoDir, tags[gens-2]) {
		if got[piece] != b {
			t.Fatalf("after the repacks piece %s is not a delta against its base %s (%q)", piece, b, got[piece])
		}
	}

	// A cancelled repack: an error, the repository as it was.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	r3, err := OpenRepo(repoDir, Config{SigningKey: key, Layout: LayoutSegments, MaxPacks: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := countPacks(objectsDir(repoDir)); n > 1 {
		if _, err := r3.Maintain(cctx); err == nil {
			t.Fatal("Maintain with a cancelled context: no error")
		}
	}
	gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")
	// Off.
	r4, err := OpenRepo(repoDir, Config{SigningKey: key, Layout: LayoutSegments, MaxPacks: -1})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := r4.Maintain(ctx); err != nil || m.Repacked {
		t.Fatalf("MaxPacks -1: %+v, %v", m, err)
	}
}
