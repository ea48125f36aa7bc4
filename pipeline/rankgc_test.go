package pipeline

import (
	"context"
	"slices"
	"testing"

	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/verify"
)

// Retention: rank manifests of generations older than the newest kept
// committed ones are deleted; kept and pending ones stay; the ledger then
// verifies from the oldest kept generation (Since).
func TestGCRankTags(t *testing.T) {
	t.Parallel()
	f := newRankFixture(t, 2)
	ctx := context.Background()
	c := f.committerFor(RankOnTimeoutWait)
	for g := uint64(1); g <= 3; g++ {
		f.publish(g, 0)
		f.publish(g, 1)
	}
	if st, err := c.Step(ctx); err != nil || st.LastCommitted != 3 {
		t.Fatalf("%+v %v", st, err)
	}
	f.publish(4, 0) // pending
	if _, err := oci.GCRanks(ctx, f.repo, []uint64{1, 2, 3}, 0, false); err == nil {
		t.Fatal("keep 0 accepted")
	}
	dry, err := oci.GCRanks(ctx, f.repo, []uint64{1, 2, 3}, 2, true)
	if err != nil || !slices.Equal(dry, []string{"gen-000001.rank-0", "gen-000001.rank-1"}) {
		t.Fatalf("dry run: %v %v", dry, err)
	}
	removed, err := oci.GCRanks(ctx, f.repo, []uint64{3, 1, 2}, 1, false)
	want := []string{"gen-000001.rank-0", "gen-000001.rank-1", "gen-000002.rank-0", "gen-000002.rank-1"}
	if err != nil || !slices.Equal(removed, want) {
		t.Fatalf("removed %v %v", removed, err)
	}
	tags, err := f.repo.Tags(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(tags)
	if !slices.Equal(tags, []string{"gen-000003.rank-0", "gen-000003.rank-1", "gen-000004.rank-0"}) {
		t.Fatalf("left %v", tags)
	}
	clone, opts := f.clone()
	// Until the registry collects the blobs, the whole history still
	// verifies (the skeletons are in Git); after it, only from gen 3 on.
	if gens, err := verify.VerifyRanks(ctx, clone, opts); err != nil || len(gens) != 3 {
		t.Fatalf("before the registry's gc: %+v %v", gens, err)
	}
	f.reg.GarbageCollect(t)
	if _, err := verify.VerifyRanks(ctx, clone, opts); err == nil {
		t.Fatal("ledger with collected parts verified")
	} else {
		t.Log(err)
	}
	opts.Since = "gen-000003"
	gens, err := verify.VerifyRanks(ctx, clone, opts)
	if err != nil || len(gens) != 1 || gens[0].Gen != 3 {
		t.Fatalf("since gen 3: %+v %v", gens, err)
	}
	opts.Since = "nonexistent"
	if _, err := verify.VerifyRanks(ctx, clone, opts); err == nil {
		t.Fatal("bad --since accepted")
	}
}
