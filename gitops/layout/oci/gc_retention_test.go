package oci

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

// TestGCRetentionWithUntagged: four generations, generation 2 pushed twice
// with different content (the second under gen-000002-r1; then
// gen-000002 is moved onto it, so the first manifest is untagged), and an
// extra tag gen-000001 re-pointed at generation 4's manifest. GC --keep 2
// deletes exactly generation 2's current manifest: generation 1's tag
// names a manifest that kept generation 4 needs, so it is never deleted.
// The registry's garbage-collect --delete-untagged, run while it serves
// read only, then frees every blob only the deleted or untagged manifests
// used; the kept generations assemble byte for byte (pulls work during the
// collection), the blobs they share with removed ones stay.
func TestGCRetentionWithUntagged(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	repo, err := Open(reg.Host+"/snapd/ret", Options{})
	if err != nil {
		t.Fatal(err)
	}
	const segSize = 256 << 10
	ctx := context.Background()
	g1, g2a, g2b := genWTXT(t, 1, 0, 0), genWTXT(t, 2, 100, 200), genWTXT(t, 2, 5000, 5100)
	g3, g4 := genWTXT(t, 3, 9000, 9100), genWTXT(t, 4, 12000, 12100)
	r1, _ := pushBytes(t, repo, g1, segSize)
	r2a, _ := pushBytes(t, repo, g2a, segSize)
	r2b, _ := pushBytes(t, repo, g2b, segSize) // a re-use: gen-000002-r1
	r3, s3 := pushBytes(t, repo, g3, segSize)
	r4, s4 := pushBytes(t, repo, g4, segSize)
	if r2a.Manifest.Digest == r2b.Manifest.Digest || r2b.Tag != "gen-000002-r1" {
		t.Fatalf("fixture: the two generation-2 pushes: %s %s, tag %s", r2a.Manifest.Digest, r2b.Manifest.Digest, r2b.Tag)
	}
	// gen-000002 moved onto the re-use's manifest: r2a's is untagged.
	if err := repo.repo.Tag(ctx, r2b.Manifest, Tag(r2a.Generation.Gen)); err != nil {
		t.Fatal(err)
	}
	// gen-000001 now names generation 4's manifest.
	if err := repo.repo.Tag(ctx, r4.Manifest, Tag(r1.Generation.Gen)); err != nil {
		t.Fatal(err)
	}
	removed, err := repo.GC(ctx, 2, false)
	if err != nil || len(removed) != 1 || removed[0].Tag != "gen-000002" || removed[0].Manifest.Digest != r2b.Manifest.Digest {
		t.Fatalf("gc: %+v %v", removed, err)
	}
	gens, err := repo.Generations(ctx)
	if err != nil || len(gens) != 3 {
		t.Fatalf("after gc: %+v %v", gens, err)
	}

	kept := map[[32]byte]bool{}
	for _, r := range []*PushResult{r3, r4} {
		for _, s := range r.Generation.Segments {
			kept[s.Digest] = true
		}
	}
	var gone, shared [][32]byte
	for _, r := range []*PushResult{r1, r2a, r2b} {
		for _, s := range r.Generation.Segments {
			if kept[s.Digest] {
				shared = append(shared, s.Digest)
			} else {
				gone = append(gone, s.Digest)
			}
		}
	}
	if len(gone) == 0 || len(shared) == 0 {
		t.Fatalf("fixture: %d unique, %d shared segments", len(gone), len(shared))
	}
	for _, d := range gone {
		if !blobExists(reg, d) {
			t.Fatal("a blob went before garbage-collect")
		}
	}
	out := reg.GarbageCollectReadOnly(t, "--delete-untagged")
	t.Logf("garbage-collect --delete-untagged: %d bytes of output", len(out))
	for _, d := range gone {
		if blobExists(reg, d) {
			t.Fatalf("blob %x, used only by removed or untagged manifests, survived", d)
		}
	}
	for d := range kept {
		if !blobExists(reg, d) {
			t.Fatalf("blob %x of a kept generation was collected", d)
		}
	}
	for i, c := range []struct{ skel, want []byte }{{s3, g3}, {s4, g4}} {
		got, err := assembleFrom(t, repo, c.skel)
		if err != nil || !bytes.Equal(got, c.want) {
			t.Fatalf("kept generation %d: %v", i+3, err)
		}
		if _, err := repo.CheckGeneration(ctx, c.skel, "kept.skel", ""); err != nil {
			t.Fatalf("kept generation %d: %v", i+3, err)
		}
	}
	// Generation 2's skeleton now names blobs that are gone: located error.
	var skel2 bytes.Buffer
	if _, err := wtxt.Split(ctx, bytes.NewReader(g2b), &skel2, nil, wtxt.SplitOptions{SegmentSize: segSize}); err != nil {
		t.Fatal(err)
	}
	_, err = assembleFrom(t, repo, skel2.Bytes())
	var e *wtxt.Error
	if !errors.As(err, &e) || e.Check != wtxt.CheckBlob || !errors.Is(err, wtxt.ErrBlobNotFound) {
		t.Fatalf("removed generation: want a located missing-blob error, got %v", err)
	}
}
