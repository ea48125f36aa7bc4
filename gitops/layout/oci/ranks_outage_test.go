package oci

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/formats/wtxt/ranks/rankstest"
)

// A push that fails during a registry outage succeeds once the registry
// is back, from the same Repository (no state of the failed attempt
// sticks).
func TestPushPartAfterOutage(t *testing.T) {
	reg := startRegistry(t)
	repo := openRepo(t, reg, "job/outage")
	ctx := context.Background()
	wt, _, _ := rankstest.Part(t, 1, 0, rankstest.Chain, rankstest.Key(1))
	reg.Stop()
	if _, err := PushRankPart(ctx, repo, bytes.NewReader(wt), "p.wtxt", 0, 2, rankstest.Chain, 1024); err == nil {
		t.Fatal("push with the registry down succeeded")
	} else {
		t.Log(err)
	}
	if _, err := PushRankPart(ctx, repo, bytes.NewReader(wt), "p.wtxt", 0, 2, rankstest.Chain, 1024); err == nil {
		t.Fatal("push with the registry down succeeded")
	} else {
		t.Log(err)
	}
	reg.Restart(t)
	if _, err := PushRankPart(ctx, repo, bytes.NewReader(wt), "p.wtxt", 0, 2, rankstest.Chain, 1024); err != nil {
		t.Fatal(err)
	}
	if _, _, err := FetchRankPart(ctx, repo, "000001", 0, 2, rankstest.Chain); err != nil {
		t.Fatal(err)
	}
}

// A rank manifest whose segment blob is gone from the registry is refused,
// located (the committer leaves the generation pending).
func TestFetchPartMissingBlob(t *testing.T) {
	reg := startRegistry(t)
	repo := openRepo(t, reg, "job/missing")
	ctx := context.Background()
	wt, _, _ := rankstest.Part(t, 1, 0, rankstest.Chain, rankstest.Key(1))
	p, err := PushRankPart(ctx, repo, bytes.NewReader(wt), "p.wtxt", 0, 1, rankstest.Chain, 1024)
	if err != nil {
		t.Fatal(err)
	}
	segs, err := wtxt.SkeletonSegments(ctx, bytes.NewReader(p.Skeleton), "skel")
	if err != nil {
		t.Fatal(err)
	}
	hexd := hex.EncodeToString(segs[len(segs)-1].Digest[:])
	blob := filepath.Join(reg.Storage, "docker/registry/v2/blobs/sha256", hexd[:2], hexd)
	if err := os.RemoveAll(blob); err != nil {
		t.Fatal(err)
	}
	_, _, err = FetchRankPart(ctx, repo, "000001", 0, 1, rankstest.Chain)
	rankstest.WantCheck(t, err, wranks.CheckManifest, 0)
	if !strings.Contains(err.Error(), "missing blob sha256:"+hexd) {
		t.Fatalf("error does not name the blob: %v", err)
	}
}
