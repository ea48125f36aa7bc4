package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/jsonerr"
)

// maxConfigBytes bounds a config blob read from the registry (a 70B model
// at 4 MiB segments has ~35,000 segments: ~6 MB of JSON).
const maxConfigBytes = 64 << 20

// CheckGeneration checks that the registry holds what the skeleton needs,
// without reading segment bytes: the manifest tagged tag (generation.txt's
// oci_tag; "" is gen-NNNNNN, and any other must be one of the
// generation's tags, IsTagOf) exists,
// has ArtifactType and annotations equal to the skeleton's header (gen,
// ts, merkle_this, sha256_all, keyid); its config lists exactly the
// skeleton's segments; its layers are exactly the distinct non-empty
// segments; and every layer blob exists (HEAD). A manifest the registry
// answers 404 for wraps ErrManifestNotFound (what retention leaves: see
// Collected); a 404 for the config or a blob of a manifest that is there
// does not. Errors name the tag and,
// for a blob, its digest, array and first chunk. The returned
// Generation's Manifest is the digest the tag resolved to whenever the
// manifest was fetched, also when a later check failed.
func (r *Repository) CheckGeneration(ctx context.Context, skeleton []byte, name, tag string) (Generation, error) {
	segs, err := wtxt.SkeletonSegments(ctx, bytes.NewReader(skeleton), name)
	if err != nil {
		return Generation{}, err
	}
	h, err := wtxt.ReadHeader(bytes.NewReader(bytes.TrimPrefix(skeleton, []byte(wtxt.SkeletonMagic+"\n"))))
	if err != nil {
		return Generation{}, fmt.Errorf("%s: header: %w", name, err)
	}
	g := GenerationFromHeader(h)
	g.Segments = segs
	if tag == "" {
		tag = Tag(g.Gen)
	} else if !IsTagOf(tag, g.Gen) {
		return g, fmt.Errorf("oci %s: generation %s: recorded tag is not one of its tags (gen-%s or gen-%s-rK)", r.name, g.Gen, g.Gen, g.Gen)
	}
	desc, rc, err := r.repo.FetchReference(ctx, tag)
	if err != nil {
		if isNotFound(err) {
			return g, fmt.Errorf("oci %s: manifest %s: %w", r.name, tag, ErrManifestNotFound)
		}
		return g, fmt.Errorf("oci %s: manifest %s: %w", r.name, tag, err)
	}
	g.Manifest = desc.Digest.String()
	if desc.Size > maxManifestBytes {
		rc.Close()
		return g, fmt.Errorf("oci %s: manifest %s is %d bytes (limit %d)", r.name, tag, desc.Size, maxManifestBytes)
	}
	mb, err := content.ReadAll(rc, desc)
	rc.Close()
	if err != nil {
		return g, fmt.Errorf("oci %s: manifest %s: %w", r.name, tag, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return g, fmt.Errorf("oci %s: manifest %s: not an OCI manifest: %w", r.name, tag, jsonerr.Describe(err))
	}
	if m.ArtifactType != ArtifactType {
		return g, fmt.Errorf("oci %s: manifest %s: artifactType is not %s", r.name, tag, ArtifactType)
	}
	for _, a := range [...]struct{ k, want string }{{AnnGen, g.Gen}, {AnnTS, g.TS}, {AnnMerkleThis, g.MerkleThis}, {AnnSHA256All, g.SHA256All}, {AnnKeyID, g.KeyID}} {
		if m.Annotations[a.k] != a.want {
			return g, fmt.Errorf("oci %s: manifest %s: annotation %s disagrees with the skeleton's header", r.name, tag, a.k)
		}
	}
	if m.Config.MediaType != ConfigMediaType || m.Config.Size > maxConfigBytes || m.Config.Size < 0 {
		return g, fmt.Errorf("oci %s: manifest %s: config is not a %s of at most %d bytes", r.name, tag, ConfigMediaType, maxConfigBytes)
	}
	crc, err := r.repo.Fetch(ctx, m.Config)
	if err != nil {
		return g, fmt.Errorf("oci %s: manifest %s: config blob %s: %w", r.name, tag, m.Config.Digest, err)
	}
	cb, err := content.ReadAll(crc, m.Config) // checks size and digest
	crc.Close()
	if err != nil {
		return g, fmt.Errorf("oci %s: manifest %s: config blob %s: %w", r.name, tag, m.Config.Digest, err)
	}
	cfg, err := ParseConfig(cb)
	if err != nil {
		return g, fmt.Errorf("oci %s: manifest %s: %w", r.name, tag, err)
	}
	g.SegmentSize = cfg.SegmentSize
	if len(cfg.Segments) != len(segs) {
		return g, fmt.Errorf("oci %s: manifest %s: config lists %d segments, the skeleton %d", r.name, tag, len(cfg.Segments), len(segs))
	}
	for i, s := range segs {
		c := cfg.Segments[i]
		if c.Digest != s.DigestString() || c.Size != s.Size || c.Array != s.Array || c.FirstChunk != s.FirstChunk || c.Chunks != s.Chunks {
			return g, fmt.Errorf("oci %s: manifest %s: config segment %d (array %s, chunk %d) disagrees with the skeleton", r.name, tag, i, s.Array, s.FirstChunk)
		}
	}
	want, err := BuildManifest(g, cb)
	if err != nil {
		return g, err
	}
	var wm ocispec.Manifest
	json.Unmarshal(want, &wm)
	if len(wm.Layers) != len(m.Layers) {
		return g, fmt.Errorf("oci %s: manifest %s: %d layers, the skeleton's segments need %d", r.name, tag, len(m.Layers), len(wm.Layers))
	}
	for i, l := range m.Layers {
		if l.Digest != wm.Layers[i].Digest || l.Size != wm.Layers[i].Size {
			return g, fmt.Errorf("oci %s: manifest %s: layer %d is not the skeleton's segment %s", r.name, tag, i, wm.Layers[i].Digest)
		}
	}
	seen := map[[32]byte]bool{}
	for _, s := range segs {
		if s.Size == 0 || seen[s.Digest] {
			continue
		}
		seen[s.Digest] = true
		ok, err := r.repo.Exists(ctx, SegmentDescriptor(s))
		if err != nil {
			return g, fmt.Errorf("oci %s: manifest %s: HEAD blob %s (array %s, chunk %d): %w", r.name, tag, s.DigestString(), s.Array, s.FirstChunk, err)
		}
		if !ok {
			return g, fmt.Errorf("oci %s: manifest %s references missing blob %s (array %s, chunk %d): %w", r.name, tag, s.DigestString(), s.Array, s.FirstChunk, wtxt.ErrBlobNotFound)
		}
	}
	return g, nil
}
