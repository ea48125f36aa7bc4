package oci

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

func blobExists(reg *registrytest.Registry, d [32]byte) bool {
	hx := hex.EncodeToString(d[:])
	_, err := os.Stat(filepath.Join(reg.Storage, "docker/registry/v2/blobs/sha256", hx[:2], hx, "data"))
	return err == nil
}

// TestRegistryGC: gc --keep 1 deletes the older generations' manifests;
// the registry's garbage-collect then frees exactly the blobs only they
// used; the kept generation still assembles byte for byte; a deleted one
// fails with a located error; pushing it again re-uploads what is gone.
func TestRegistryGC(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	repo, err := Open(reg.Host+"/snapd/gc", Options{})
	if err != nil {
		t.Fatal(err)
	}
	const segSize = 256 << 10
	ws := [][]byte{genWTXT(t, 1, 0, 0), genWTXT(t, 2, 100, 200), genWTXT(t, 3, 9000, 9100)}
	var res []*PushResult
	var skels [][]byte
	for _, w := range ws {
		r, s := pushBytes(t, repo, w, segSize)
		res, skels = append(res, r), append(skels, s)
	}
	ctx := context.Background()
	if _, err := repo.GC(ctx, 0, false); err == nil {
		t.Fatal("keep 0 accepted")
	}
	dry, err := repo.GC(ctx, 1, true)
	if err != nil || len(dry) != 2 {
		t.Fatalf("dry run: %v %v", dry, err)
	}
	if gens, _ := repo.Generations(ctx); len(gens) != 3 {
		t.Fatalf("dry run deleted: %d generations left", len(gens))
	}
	removed, err := repo.GC(ctx, 1, false)
	if err != nil || len(removed) != 2 || removed[0].Tag != "gen-000001" || removed[1].Tag != "gen-000002" {
		t.Fatalf("gc: %v %v", removed, err)
	}
	gens, err := repo.Generations(ctx)
	if err != nil || len(gens) != 1 || gens[0].Tag != "gen-000003" {
		t.Fatalf("after gc: %v %v", gens, err)
	}

	keep := map[[32]byte]bool{}
	for _, s := range res[2].Generation.Segments {
		keep[s.Digest] = true
	}
	var gone [][32]byte
	for _, r := range res[:2] {
		for _, s := range r.Generation.Segments {
			if !keep[s.Digest] {
				gone = append(gone, s.Digest)
			}
		}
	}
	if len(gone) == 0 {
		t.Fatal("test setup: older generations share every segment")
	}
	out := reg.GarbageCollect(t)
	t.Logf("garbage-collect: %d bytes of output", len(out))
	for _, d := range gone {
		if blobExists(reg, d) {
			t.Fatalf("blob %x of a deleted generation survived garbage-collect", d)
		}
	}
	for d := range keep {
		if !blobExists(reg, d) {
			t.Fatalf("blob %x of the kept generation was collected", d)
		}
	}
	got, err := assembleFrom(t, repo, skels[2])
	if err != nil || !bytes.Equal(got, ws[2]) {
		t.Fatalf("kept generation: %v", err)
	}
	_, err = assembleFrom(t, repo, skels[0])
	var e *wtxt.Error
	if !errors.As(err, &e) || e.Check != wtxt.CheckBlob {
		t.Fatalf("deleted generation: want a blob error, got %v", err)
	}
	// Pushing gen 1 again uploads the collected blobs (HEAD must not claim
	// them) and it assembles again.
	r1, s1 := pushBytes(t, repo, ws[0], segSize)
	if r1.Uploaded == 0 {
		t.Fatalf("re-push after gc uploaded nothing: %+v", r1.PushStats)
	}
	got, err = assembleFrom(t, repo, s1)
	if err != nil || !bytes.Equal(got, ws[0]) {
		t.Fatalf("re-pushed generation: %v", err)
	}
}
