package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// maxManifestBytes bounds a manifest read from the registry.
const maxManifestBytes = 4 << 20

// GenTag is one generation tag in the repository.
type GenTag struct {
	Tag      string
	Gen      uint64
	Manifest ocispec.Descriptor
}

// Generations lists the repository's snapd generations (tags gen-NNNNNN,
// and gen-NNNNNN-rK of a number a resumed run re-used, whose manifest has
// ArtifactType), oldest first. Other tags are ignored.
func (r *Repository) Generations(ctx context.Context) ([]GenTag, error) {
	var tags []string
	if err := r.repo.Tags(ctx, "", func(t []string) error {
		tags = append(tags, t...)
		return nil
	}); err != nil {
		var er *errcode.ErrorResponse
		if errors.As(err, &er) && er.StatusCode == http.StatusNotFound {
			return nil, nil // a repository with no manifest yet has no tags
		}
		return nil, fmt.Errorf("oci %s: list tags: %w", r.name, err)
	}
	var out []GenTag
	for _, t := range tags {
		n, ok := ParseTag(t)
		if !ok {
			continue
		}
		desc, rc, err := r.repo.FetchReference(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("oci %s: fetch manifest %s: %w", r.name, t, err)
		}
		if desc.Size > maxManifestBytes {
			rc.Close()
			return nil, fmt.Errorf("oci %s: manifest %s is %d bytes (limit %d)", r.name, t, desc.Size, maxManifestBytes)
		}
		b, err := content.ReadAll(rc, desc)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("oci %s: read manifest %s: %w", r.name, t, err)
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(b, &m); err != nil || m.ArtifactType != ArtifactType {
			continue
		}
		out = append(out, GenTag{Tag: t, Gen: n, Manifest: desc})
	}
	// By number, then a number's tags in the order they were taken
	// (gen-NNNNNN, -r1, -r2, ..., -r10).
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Gen != b.Gen {
			return a.Gen < b.Gen
		}
		if len(a.Tag) != len(b.Tag) {
			return len(a.Tag) < len(b.Tag)
		}
		return a.Tag < b.Tag
	})
	return out, nil
}

// GC deletes the manifests of every snapd generation but the newest keep
// (keep >= 1), so that the registry's own garbage collection
// (`registry garbage-collect CONFIG` for the CNCF distribution registry)
// frees the blobs only they referenced. A manifest that a kept generation's
// tag also names is never deleted. With dryRun nothing is deleted. It
// returns the tags removed (or that would be).
func (r *Repository) GC(ctx context.Context, keep int, dryRun bool) ([]GenTag, error) {
	if keep < 1 {
		return nil, fmt.Errorf("oci gc: keep must be >= 1 (got %d)", keep)
	}
	gens, err := r.Generations(ctx)
	if err != nil {
		return nil, err
	}
	if len(gens) <= keep {
		return nil, nil
	}
	kept := map[string]bool{}
	for _, g := range gens[len(gens)-keep:] {
		kept[g.Manifest.Digest.String()] = true
	}
	var removed []GenTag
	for _, g := range gens[:len(gens)-keep] {
		if kept[g.Manifest.Digest.String()] {
			continue
		}
		// A manifest two tags name (a re-use tag moved onto it) goes once.
		kept[g.Manifest.Digest.String()] = true
		if !dryRun {
			if err := r.repo.Delete(ctx, g.Manifest); err != nil {
				return removed, fmt.Errorf("oci %s: delete manifest %s (%s): %w", r.name, g.Tag, g.Manifest.Digest, err)
			}
			r.log.Info("oci gc: deleted generation manifest", "repository", r.name, "tag", g.Tag, "digest", g.Manifest.Digest.String())
		}
		removed = append(removed, g)
	}
	return removed, nil
}
