package oci

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/formats/wtxt/ranks/rankstest"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

func openRepo(t *testing.T, reg *registrytest.Registry, name string) *Repository {
	t.Helper()
	repo, err := Open(reg.Host+"/"+name, Options{DockerConfig: t.TempDir() + "/none.json"})
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

func TestPushFetchPart(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	repo := openRepo(t, reg, "job/ranks")
	ctx := context.Background()
	wt, skel, _ := rankstest.Part(t, 3, 1, rankstest.Chain, rankstest.Key(2))
	pushed, err := PushRankPart(ctx, repo, bytes.NewReader(wt), "rank1.wtxt", 1, 4, rankstest.Chain, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if pushed.Tag != "gen-000003.rank-1" || pushed.Stats.Uploaded == 0 {
		t.Fatalf("%+v", pushed.Stats)
	}
	// Again: idempotent, nothing uploaded.
	again, err := PushRankPart(ctx, repo, bytes.NewReader(wt), "rank1.wtxt", 1, 4, rankstest.Chain, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if again.Stats.Uploaded != 0 || again.Manifest.Digest != pushed.Manifest.Digest {
		t.Fatalf("re-push uploaded %d blobs, manifest %s vs %s", again.Stats.Uploaded, again.Manifest.Digest, pushed.Manifest.Digest)
	}
	p, gotSkel, err := FetchRankPart(ctx, repo, "000003", 1, 4, rankstest.Chain)
	if err != nil {
		t.Fatal(err)
	}
	if p.Manifest != pushed.Manifest.Digest.String() || p.SHA256All != pushed.Part.SHA256All {
		t.Fatalf("fetched %+v, pushed %+v", p, pushed.Part)
	}
	// The skeleton in the registry is the node's skeleton (the split is
	// deterministic) and assembles to the part byte for byte.
	if !bytes.Equal(gotSkel, pushed.Skeleton) {
		t.Fatal("skeleton differs")
	}
	_ = skel
	var out bytes.Buffer
	if _, err := wtxtAssemble(ctx, gotSkel, repo, &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), wt) {
		t.Fatal("assembled part is not the WTXT pushed")
	}
	// Missing rank: ErrNotFound.
	if _, _, err := FetchRankPart(ctx, repo, "000003", 2, 4, rankstest.Chain); !errors.Is(err, ErrNotFound) {
		t.Fatalf("want ErrNotFound, got %v", err)
	}

	t.Run("wrong world size", func(t *testing.T) {
		_, _, err := FetchRankPart(ctx, repo, "000003", 1, 3, rankstest.Chain)
		rankstest.WantCheck(t, err, wranks.CheckWorldSize, 1)
		_, err = PushRankPart(ctx, repo, bytes.NewReader(wt), "rank1.wtxt", 4, 4, rankstest.Chain, 1024)
		rankstest.WantCheck(t, err, wranks.CheckRank, -1)
	})
	t.Run("two shards claim one rank", func(t *testing.T) {
		other, _, _ := rankstest.Part(t, 3, 2, rankstest.Chain, rankstest.Key(3)) // rank 2's shard
		_, err := PushRankPart(ctx, repo, bytes.NewReader(other), "rank2-as-1.wtxt", 1, 4, rankstest.Chain, 1024)
		rankstest.WantCheck(t, err, wranks.CheckRank, 1)
		// The first claim stands.
		p2, _, err := FetchRankPart(ctx, repo, "000003", 1, 4, rankstest.Chain)
		if err != nil || p2.Manifest != pushed.Manifest.Digest.String() {
			t.Fatalf("rank 1 moved: %v", err)
		}
	})
	t.Run("another chain", func(t *testing.T) {
		foreign, _, _ := rankstest.Part(t, 3, 3, wranks.ChainID("other-job"), rankstest.Key(4))
		_, err := PushRankPart(ctx, repo, bytes.NewReader(foreign), "foreign.wtxt", 3, 4, rankstest.Chain, 1024)
		rankstest.WantCheck(t, err, wranks.CheckChain, 3)
		// RankPushed by the other job's node (its own chain), the committer of
		// this job refuses it.
		if _, err := PushRankPart(ctx, repo, bytes.NewReader(foreign), "foreign.wtxt", 3, 4, wranks.ChainID("other-job"), 1024); err != nil {
			t.Fatal(err)
		}
		_, _, err = FetchRankPart(ctx, repo, "000003", 3, 4, rankstest.Chain)
		rankstest.WantCheck(t, err, wranks.CheckChain, 3)
	})
	t.Run("another generation under this tag", func(t *testing.T) {
		// A hostile or buggy writer tags generation 2's part as gen 3 rank 0.
		old, _, _ := rankstest.Part(t, 2, 0, rankstest.Chain, rankstest.Key(1))
		var sk bytes.Buffer
		g, _, err := repo.UploadSegments(ctx, bytes.NewReader(old), "old.wtxt", &sk, 1024)
		if err != nil {
			t.Fatal(err)
		}
		g.SegmentSize = 1024
		if _, err := repo.PushManifestRef(ctx, g, rankRef(RankTag("000003", 0), 0, 4, rankstest.Chain, sk.Bytes()), true); err != nil {
			t.Fatal(err)
		}
		_, _, err = FetchRankPart(ctx, repo, "000003", 0, 4, rankstest.Chain)
		rankstest.WantCheck(t, err, wranks.CheckGen, 0)
	})
}

func TestParseRankTag(t *testing.T) {
	for tag, ok := range map[string]bool{
		"gen-000003.rank-0": true, "gen-1234567.rank-65535": true,
		"gen-000003": false, "gen-000003.rank-01": false, "gen-000003.rank-65536": false,
		"gen-00003.rank-1": false, "gen-000003.rank--1": false, "latest": false,
	} {
		if _, _, got := ParseRankTag(tag); got != ok {
			t.Errorf("%s: got %v", tag, got)
		}
	}
	g, r, _ := ParseRankTag(RankTag("000042", 7))
	if g != "000042" || r != 7 {
		t.Fatal(g, r)
	}
}

func startRegistry(t *testing.T) *registrytest.Registry { return registrytest.Start(t, "", "") }

// wtxtAssemble rebuilds a part's WTXT from its skeleton and the registry.
func wtxtAssemble(ctx context.Context, skel []byte, repo *Repository, w io.Writer) (*wtxt.AssembleInfo, error) {
	return wtxt.Assemble(ctx, bytes.NewReader(skel), repo, w)
}
