package oci

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net/http"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

func pushAt(t *testing.T, repo *Repository, in []byte, segSize int64, prev Previous) (*PushResult, []byte) {
	t.Helper()
	var skel bytes.Buffer
	res, err := repo.PushWTXTAt(context.Background(), bytes.NewReader(in), int64(len(in)), "gen.wtxt", &skel, segSize, prev)
	if err != nil {
		t.Fatal(err)
	}
	return res, skel.Bytes()
}

// TestRegistryPushAtReuse: PushWTXTAt gives PushWTXT's skeleton and
// manifest; with the previous generation's keys it reads only the changed
// segments and reuses the others' digests, but only those the registry
// has with the right size (HEAD), or, with Previous.Manifest, those the
// previous manifest confirms; a Previous that lies about a blob costs the
// reading of that segment, never a skeleton that does not assemble.
func TestRegistryPushAtReuse(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	repo, err := Open(reg.Host+"/snapd/at", Options{})
	if err != nil {
		t.Fatal(err)
	}
	const segSize = 256 << 10 // 16 segments of W + b
	g1 := genWTXT(t, 1, 0, 0)
	g2 := genWTXT(t, 2, 8000, 8164)
	r1, skel1 := pushAt(t, repo, g1, segSize, Previous{})
	if r1.Uploaded != 17 || r1.Reused != 0 || len(r1.Keys.Segments) != 17 {
		t.Fatalf("gen 1: %+v, %d keys", r1.PushStats, len(r1.Keys.Segments))
	}
	ref1, refSkel1 := pushBytes(t, repo, g1, segSize)
	if !bytes.Equal(skel1, refSkel1) || ref1.Manifest.Digest != r1.Manifest.Digest {
		t.Fatal("PushWTXTAt and PushWTXT differ for gen 1")
	}
	keys, err := wtxt.SkeletonKeys(context.Background(), skel1, "g1.skel")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(keys, r1.Keys.Segments) || r1.Keys.Manifest != r1.Manifest.Digest.String() {
		t.Fatal("SkeletonKeys of the skeleton differ from the push's keys")
	}

	r2, skel2 := pushAt(t, repo, g2, segSize, Previous{Segments: keys})
	ref2, refSkel2 := pushBytes(t, repo, g2, segSize)
	if !bytes.Equal(skel2, refSkel2) || ref2.Manifest.Digest != r2.Manifest.Digest {
		t.Fatal("PushWTXTAt with the previous keys and PushWTXT differ for gen 2")
	}
	changed := 0
	for i := range r1.Generation.Segments {
		if r1.Generation.Segments[i].Digest != r2.Generation.Segments[i].Digest {
			changed++
		}
	}
	if changed < 1 || changed > 2 || r2.Reused != 17-changed || r2.Uploaded != changed || r2.Skipped != 17-changed {
		t.Fatalf("gen 2: %d changed segments, push %+v", changed, r2.PushStats)
	}
	if got, err := assembleFrom(t, repo, skel2); err != nil || !bytes.Equal(got, g2) {
		t.Fatalf("assemble gen 2: %v", err)
	}

	// A previous entry whose blob the registry lacks, or has with another
	// size, is not reused: the segment is read and checked instead (the
	// previous manifest does not list it with that size, and the HEAD
	// then asked says so).
	var k0, k1, k2 wtxt.SegmentKey
	for k, s := range keys {
		switch s.FirstChunk {
		case 0:
			if s.Array == "W" {
				k0 = k
			}
		case 4:
			k1 = k
		}
	}
	same := unchanged(r1, r2)
	for k, s := range keys {
		if s.Array == "W" && k != k0 && k != k1 && s.Size == keys[k0].Size && s.Digest != keys[k0].Digest && same[s.Digest] {
			k2 = k
			break
		}
	}
	lying := maps.Clone(keys)
	s0 := lying[k0]
	s0.Digest[0] ^= 1
	lying[k0] = s0
	s1 := lying[k1]
	s1.Size++
	lying[k1] = s1
	r3, skel3 := pushAt(t, repo, g2, segSize, Previous{Segments: lying, Manifest: r1.Keys.Manifest})
	if !bytes.Equal(skel3, skel2) || r3.Reused != 17-changed-2 || r3.Unproven != 2 {
		t.Fatalf("missing or resized previous blobs: reused %d, want %d; unproven %d, want 2", r3.Reused, 17-changed-2, r3.Unproven)
	}

	// A Previous that swaps two present blobs of the same size (an edited
	// previous skeleton): the previous manifest's config does not list
	// them there, so both segments are read and checked; the skeleton and
	// manifest are the right ones and assemble.
	swapped := maps.Clone(keys)
	a, b := swapped[k0], swapped[k2]
	if a.Size != b.Size || a.Digest == b.Digest {
		t.Fatal("test data: want two distinct segments of one size")
	}
	a.Digest, b.Digest = b.Digest, a.Digest
	swapped[k0], swapped[k2] = a, b
	r4, skel4 := pushAt(t, repo, g2, segSize, Previous{Segments: swapped, Manifest: r1.Keys.Manifest})
	if !bytes.Equal(skel4, skel2) || r4.Manifest.Digest != r2.Manifest.Digest || r4.Unproven != 2 || r4.Reused != 17-changed-2 {
		t.Fatalf("swapped previous blobs: %+v", r4.PushStats)
	}
	if got, err := assembleFrom(t, repo, skel4); err != nil || !bytes.Equal(got, g2) {
		t.Fatalf("assemble after a push from a lying Previous: %v", err)
	}
}

// TestRegistryPushAtPrevManifest: with Previous.Manifest the push learns
// which previous segments the registry holds from that one manifest, so
// it HEADs only the changed segments and the config blob, and writes the
// skeleton and manifest it writes without; a manifest that is gone proves
// nothing (every segment read), same result. A blob deleted from under the
// previous manifest makes the registry refuse the new manifest
// (ErrManifestBlobUnknown); the push without Manifest then uploads it.
func TestRegistryPushAtPrevManifest(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	proxy := registrytest.StartProxy(t, reg.Host)
	repo, err := Open(proxy.Host+"/snapd/prevman", Options{})
	if err != nil {
		t.Fatal(err)
	}
	const segSize = 256 << 10 // 16 segments of W + b
	g1 := genWTXT(t, 1, 0, 0)
	g2 := genWTXT(t, 2, 8000, 8164)
	r1, _ := pushAt(t, repo, g1, segSize, Previous{})
	if r1.Keys.Manifest != r1.Manifest.Digest.String() {
		t.Fatalf("gen 1 keys name manifest %q, pushed %s", r1.Keys.Manifest, r1.Manifest.Digest)
	}
	heads := func(prev Previous) (*PushResult, []byte, int) {
		t.Helper()
		before := proxy.Methods()[http.MethodHead]
		res, skel := pushAt(t, repo, g2, segSize, prev)
		return res, skel, proxy.Methods()[http.MethodHead] - before
	}
	rAll, skelAll, nAll := heads(Previous{Segments: r1.Keys.Segments})
	rMan, skelMan, nMan := heads(r1.Keys)
	rTag, skelTag, _ := heads(Previous{Segments: r1.Keys.Segments, Manifest: "gen-000001"})
	rGone, skelGone, nGone := heads(Previous{Segments: r1.Keys.Segments, Manifest: "gen-000099"})
	for _, c := range []struct {
		name string
		res  *PushResult
		skel []byte
	}{{"digest", rMan, skelMan}, {"tag", rTag, skelTag}} {
		if !bytes.Equal(c.skel, skelAll) || c.res.Manifest.Digest != rAll.Manifest.Digest || c.res.Reused != rAll.Reused || c.res.Unproven != 0 {
			t.Fatalf("previous manifest by %s: skeleton, manifest or reuse (%d, want %d) differ from the push without it", c.name, c.res.Reused, rAll.Reused)
		}
	}
	// A previous manifest that is gone confirms nothing: every segment is
	// read and checked (same skeleton and manifest).
	if !bytes.Equal(skelGone, skelAll) || rGone.Manifest.Digest != rAll.Manifest.Digest || rGone.Reused != 0 || rGone.Unproven != rAll.Reused {
		t.Fatalf("previous manifest gone: %+v", rGone.PushStats)
	}
	changed := 17 - rAll.Reused
	t.Logf("HEADs: %d with the previous manifest, %d without, %d with a missing one; %d segments changed", nMan, nAll, nGone, changed)
	if rAll.Reused < 15 || nAll < rAll.Reused || nGone < rAll.Reused {
		t.Fatalf("without a usable manifest: reused %d, %d and %d HEADs", rAll.Reused, nAll, nGone)
	}
	// The changed segments, the config blob and the generation's tag (is
	// it free: a re-used number's tag names another manifest) are asked
	// about; nothing else.
	if nMan > changed+2 {
		t.Fatalf("with the previous manifest: %d HEADs, want at most %d", nMan, changed+2)
	}

	// Delete a blob the new generation reuses from under gen 1's manifest.
	var victim wtxt.Segment
	for _, s := range r1.Keys.Segments {
		if s.Array == "W" && s.FirstChunk == 0 {
			victim = s
		}
	}
	reg.DeleteBlob(t, "snapd/prevman", SegmentDescriptor(victim).Digest.String())
	var skel bytes.Buffer
	_, err = repo.PushWTXTAt(context.Background(), bytes.NewReader(g2), int64(len(g2)), "gen.wtxt", &skel, segSize, r1.Keys)
	if !errors.Is(err, ErrManifestBlobUnknown) {
		t.Fatalf("push reusing a deleted blob: %v, want ErrManifestBlobUnknown", err)
	}
	rFix, skelFix := pushAt(t, repo, g2, segSize, Previous{Segments: r1.Keys.Segments})
	if rFix.Uploaded != 1 || rFix.UploadedBytes != victim.Size || !bytes.Equal(skelFix, skelAll) {
		t.Fatalf("push without the manifest after the delete: %+v", rFix.PushStats)
	}
	if got, err := assembleFrom(t, repo, skelFix); err != nil || !bytes.Equal(got, g2) {
		t.Fatalf("assemble gen 2 after the repair: %v", err)
	}
}

// unchanged returns the digests of the segments r1 and r2 share at the
// same place.
func unchanged(r1, r2 *PushResult) map[[32]byte]bool {
	out := map[[32]byte]bool{}
	for i, s := range r1.Generation.Segments {
		if i < len(r2.Generation.Segments) && r2.Generation.Segments[i].Digest == s.Digest {
			out[s.Digest] = true
		}
	}
	return out
}
