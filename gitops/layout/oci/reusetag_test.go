package oci

import (
	"context"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/registrytest"
)

func TestTagNames(t *testing.T) {
	for _, c := range []struct {
		tag  string
		gen  uint64
		ok   bool
		of   string // a gen text it is a tag of ("" none)
		notO string // a gen text it is not a tag of
	}{
		{"gen-000003", 3, true, "000003", "000004"},
		{"gen-000003-r1", 3, true, "000003", "000030"},
		{"gen-000003-r12", 3, true, "000003", ""},
		{"gen-1000000-r2", 1000000, true, "1000000", "000001"},
		{"gen-000003-r0", 0, false, "", "000003"},
		{"gen-000003-r01", 0, false, "", "000003"},
		{"gen-000003-r", 0, false, "", "000003"},
		{"gen-000003-rx", 0, false, "", "000003"},
		{"gen-000003-rank-1", 0, false, "", "000003"},
		{"gen-00003", 0, false, "", "000003"},
		{"gen-000003-r1-r2", 0, false, "", "000003"},
		{"other-000003", 0, false, "", "000003"},
	} {
		n, ok := ParseTag(c.tag)
		if ok != c.ok || n != c.gen {
			t.Errorf("ParseTag(%q) = %d, %v", c.tag, n, ok)
		}
		if c.of != "" && !IsTagOf(c.tag, c.of) {
			t.Errorf("IsTagOf(%q, %q) = false", c.tag, c.of)
		}
		if c.notO != "" && IsTagOf(c.tag, c.notO) {
			t.Errorf("IsTagOf(%q, %q) = true", c.tag, c.notO)
		}
	}
	if ReusedTag("000003", 0) != "gen-000003" || ReusedTag("000003", 2) != "gen-000003-r2" {
		t.Fatal(ReusedTag("000003", 2))
	}
}

// TestRegistryReusedNumber: a second generation with the same number and
// other content (a resumed run's) goes under gen-NNNNNN-r1, leaving the
// first one's tag; pushing either again keeps its tag; CheckGeneration
// reads each through its own tag (and refuses a tag of another
// generation); Generations lists both, in the order they were taken, GC
// removes the older, and Collected tells which one is gone.
func TestRegistryReusedNumber(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	repo, err := Open(reg.Host+"/snapd/reuse", Options{})
	if err != nil {
		t.Fatal(err)
	}
	const segSize = 256 << 10
	first, again := genWTXT(t, 2, 0, 0), genWTXT(t, 2, 8000, 8164)
	r1, skel1 := pushBytes(t, repo, first, segSize)
	r2, skel2 := pushBytes(t, repo, again, segSize)
	if r1.Tag != "gen-000002" || r2.Tag != "gen-000002-r1" || r1.Manifest.Digest == r2.Manifest.Digest {
		t.Fatalf("tags %s %s, manifests %s %s", r1.Tag, r2.Tag, r1.Manifest.Digest, r2.Manifest.Digest)
	}
	if r, _ := pushBytes(t, repo, again, segSize); r.Tag != "gen-000002-r1" || r.Manifest.Digest != r2.Manifest.Digest {
		t.Fatalf("re-push of the re-use: %s %s", r.Tag, r.Manifest.Digest)
	}
	if r, _ := pushBytes(t, repo, first, segSize); r.Tag != "gen-000002" {
		t.Fatalf("re-push of the first: %s", r.Tag)
	}
	ctx := context.Background()
	if g, err := repo.CheckGeneration(ctx, skel1, "a.skel", ""); err != nil || g.Manifest != r1.Manifest.Digest.String() {
		t.Fatalf("check the first: %v", err)
	}
	if g, err := repo.CheckGeneration(ctx, skel2, "b.skel", "gen-000002-r1"); err != nil || g.Manifest != r2.Manifest.Digest.String() {
		t.Fatalf("check the re-use through its tag: %v", err)
	}
	if _, err := repo.CheckGeneration(ctx, skel2, "b.skel", ""); err == nil || !strings.Contains(err.Error(), "disagrees") {
		t.Fatalf("the re-use through gen-000002: %v", err)
	}
	if _, err := repo.CheckGeneration(ctx, skel2, "b.skel", "gen-000003"); err == nil || !strings.Contains(err.Error(), "not one of its tags") {
		t.Fatalf("another generation's tag: %v", err)
	}
	gens, err := repo.Generations(ctx)
	if err != nil || len(gens) != 2 || gens[0].Gen != 2 || gens[1].Gen != 2 {
		t.Fatalf("generations %+v, %v", gens, err)
	}
	if gens[0].Tag != "gen-000002" || gens[1].Tag != "gen-000002-r1" {
		t.Fatalf("order %s %s", gens[0].Tag, gens[1].Tag)
	}
	removed, err := repo.GC(ctx, 1, false)
	if err != nil || len(removed) != 1 || removed[0].Tag != "gen-000002" {
		t.Fatalf("gc keep 1: %+v, %v", removed, err)
	}
	// The first one's manifest is gone, the re-use's is there: collected
	// through its own tag; without a tag the number still has one, so not.
	for _, c := range []struct {
		tag  string
		want bool
	}{{"gen-000002", true}, {"gen-000002-r1", false}, {"", false}} {
		if got, err := repo.Collected(ctx, "000002", c.tag); err != nil || got != c.want {
			t.Fatalf("Collected(000002, %q) = %v, %v; want %v", c.tag, got, err, c.want)
		}
	}
}
