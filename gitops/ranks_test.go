package gitops

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	git "github.com/go-git/go-git/v5"

	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
)

// ranksGen returns generation gen of a world of 2 ranks chained to prev:
// its index and skeletons (any bytes: CommitRanks checks only their
// SHA-256 against the index).
func ranksGen(t *testing.T, gen uint64, prev [32]byte) RanksGeneration {
	t.Helper()
	chain := wranks.ChainID("job")
	g := fmt.Sprintf("%06d", gen)
	var parts []wranks.Part
	var skels [][]byte
	for r := range 2 {
		sk := []byte(fmt.Sprintf("skeleton of rank %d gen %d\n", r, gen))
		parts = append(parts, wranks.Part{Rank: r, Gen: g, TS: fmt.Sprintf("2026-11-24T08:00:%02dZ", gen), MerklePrev: chain,
			SHA256All: sha256.Sum256(sk), MerkleThis: sha256.Sum256(append(sk, 1)), Skeleton: wranks.SkeletonName(r),
			SkeletonSHA256: sha256.Sum256(sk), Manifest: fmt.Sprintf("sha256:%x", sha256.Sum256(sk))})
		skels = append(skels, sk)
	}
	ix, err := wranks.New(g, 2, chain, parts, prev, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	return RanksGeneration{Index: ix, Skeletons: skels}
}

// TestCommitRanks: a multi-rank generation is one signed commit and tag
// whose snapshot directory holds exactly its index and skeletons; a
// repeated commit is Existing; an older generation, a broken chain or a
// skeleton that is not the index's are refused; the ledger reads back.
func TestCommitRanks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ledger.git")
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32))
	r, err := OpenRepo(dir, Config{SigningKey: key})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g1 := ranksGen(t, 1, [32]byte{})
	res, err := r.CommitRanks(ctx, g1)
	if err != nil || res.Layout != LayoutRanks || res.Tag != "gen-000001" || res.Existing {
		t.Fatalf("%+v %v", res, err)
	}
	if again, err := r.CommitRanks(ctx, g1); err != nil || !again.Existing || again.Commit != res.Commit {
		t.Fatalf("repeat: %+v %v", again, err)
	}
	g3 := ranksGen(t, 3, g1.Index.MerkleThis)
	g3.Skipped = []uint64{2}
	if _, err := r.CommitRanks(ctx, g3); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CommitRanks(ctx, ranksGen(t, 2, g1.Index.MerkleThis)); !errors.Is(err, ErrGenOrder) {
		t.Fatalf("older generation: %v", err)
	}
	if _, err := r.CommitRanks(ctx, ranksGen(t, 4, g1.Index.MerkleThis)); !errors.Is(err, ErrChainBreak) {
		t.Fatalf("chain break: %v", err)
	}
	bad := ranksGen(t, 4, g3.Index.MerkleThis)
	bad.Skeletons[1] = []byte("another skeleton\n")
	if _, err := r.CommitRanks(ctx, bad); !wranks.IsCheck(err) {
		t.Fatalf("wrong skeleton: %v", err)
	}
	head, err := r.RanksHead()
	if err != nil || head.Index.Gen != "000003" {
		t.Fatalf("head %+v %v", head, err)
	}
	if got := head.Names(); !slices.Equal(got, []string{wranks.IndexName, wranks.SkeletonName(0), wranks.SkeletonName(1)}) {
		t.Fatalf("files %v", got)
	}
	if sk, err := head.Skeleton(1); err != nil || !bytes.Equal(sk, g3.Skeletons[1]) {
		t.Fatalf("skeleton %q %v", sk, err)
	}
	if skipped, err := ParseSkipped(head.Commit.Message); err != nil || !slices.Equal(skipped, []uint64{2}) {
		t.Fatalf("skipped %v %v", skipped, err)
	}
	gr, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	if gens, err := RanksGenerations(gr, DefaultBranch); err != nil || !slices.Equal(gens, []uint64{3, 1}) {
		t.Fatalf("generations %v %v", gens, err)
	}
	if !IsRanks(gr, DefaultBranch, "") {
		t.Fatal("not recognised as a multi-rank ledger")
	}
	if rc, err := ResolveRanks(gr, "gen-000001", ""); err != nil || rc.Index.Gen != "000001" {
		t.Fatalf("resolve: %v", err)
	}
}
