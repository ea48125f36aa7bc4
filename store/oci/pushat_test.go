package oci

import (
	"bytes"
	"context"
	"errors"
	"maps"
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
// has with the right size; a Previous that lies about a blob gives a
// skeleton that assemble rejects, never wrong bytes.
func TestRegistryPushAtReuse(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	repo, err := Open(reg.Host+"/snapd/at", Options{})
	if err != nil {
		t.Fatal(err)
	}
	const segSize = 256 << 10 // 16 segments of W + b
	g1 := genWTXT(t, 1, 0, 0)
	g2 := genWTXT(t, 2, 8000, 8164)
	r1, skel1 := pushAt(t, repo, g1, segSize, nil)
	if r1.Uploaded != 17 || r1.Reused != 0 || len(r1.Keys) != 17 {
		t.Fatalf("gen 1: %+v, %d keys", r1.PushStats, len(r1.Keys))
	}
	ref1, refSkel1 := pushBytes(t, repo, g1, segSize)
	if !bytes.Equal(skel1, refSkel1) || ref1.Manifest.Digest != r1.Manifest.Digest {
		t.Fatal("PushWTXTAt and PushWTXT differ for gen 1")
	}
	keys, err := wtxt.SkeletonKeys(context.Background(), skel1, "g1.skel")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(Previous(keys), r1.Keys) {
		t.Fatal("SkeletonKeys of the skeleton differ from the push's keys")
	}

	r2, skel2 := pushAt(t, repo, g2, segSize, keys)
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
	// size, is not reused: the segment is read and checked instead.
	var k0, k1 wtxt.SegmentKey
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
	lying := maps.Clone(keys)
	s0 := lying[k0]
	s0.Digest[0] ^= 1
	lying[k0] = s0
	s1 := lying[k1]
	s1.Size++
	lying[k1] = s1
	r3, skel3 := pushAt(t, repo, g2, segSize, lying)
	if !bytes.Equal(skel3, skel2) || r3.Reused != 17-changed-2 {
		t.Fatalf("missing or resized previous blobs: reused %d, want %d", r3.Reused, 17-changed-2)
	}

	// A Previous that swaps two present blobs (not what a push of this
	// repository returns): the skeleton names the wrong blob and assemble
	// refuses it at that segment.
	swapped := maps.Clone(keys)
	a, b := swapped[k0], swapped[k1]
	a.Digest, b.Digest = b.Digest, a.Digest
	swapped[k0], swapped[k1] = a, b
	_, bad := pushAt(t, repo, g2, segSize, swapped)
	_, err = assembleFrom(t, repo, bad)
	var we *wtxt.Error
	if !errors.As(err, &we) || we.Array != "W" || we.Chunk != 0 {
		t.Fatalf("assemble of a skeleton from a lying Previous: %v", err)
	}
}
