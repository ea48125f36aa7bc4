package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"github.com/snapd-ml/snapd/internal/jsonerr"
)

// ExtraBlob is a layer a ManifestRef adds after the segment layers.
type ExtraBlob struct {
	MediaType string
	Title     string // org.opencontainers.image.title
	Data      []byte
}

// ManifestRef describes a manifest of a generation's segments under
// another tag and artifact type than PushManifest's (e.g. one rank's part
// of a multi-rank generation, ranks.go).
type ManifestRef struct {
	Tag          string
	ArtifactType string
	// Annotations are added to the generation's (they may not replace
	// one).
	Annotations map[string]string
	Extra       []ExtraBlob
}

// BuildManifestRef returns the manifest of g (its config blob config)
// for ref: BuildManifest's layers, then ref.Extra, and the generation's
// annotations plus ref.Annotations.
func BuildManifestRef(g Generation, config []byte, ref ManifestRef) ([]byte, error) {
	base, err := BuildManifest(g, config)
	if err != nil {
		return nil, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(base, &m); err != nil {
		return nil, err
	}
	m.ArtifactType = ref.ArtifactType
	for k, v := range ref.Annotations {
		if _, dup := m.Annotations[k]; dup {
			return nil, fmt.Errorf("oci manifest %s: annotation %s is the generation's", ref.Tag, k)
		}
		m.Annotations[k] = v
	}
	for _, x := range ref.Extra {
		d := Descriptor(x.MediaType, x.Data)
		d.Annotations = map[string]string{ocispec.AnnotationTitle: x.Title}
		m.Layers = append(m.Layers, d)
	}
	m.Versioned = specs.Versioned{SchemaVersion: 2}
	return json.Marshal(m)
}

// PushManifestRef uploads g's config blob and ref's extra blobs (when
// missing) and the manifest tagged ref.Tag. Every segment blob must
// already be in the registry (UploadSegments). With exclusive, an existing
// tag naming a different manifest is not moved: it fails with
// ErrTagTaken (the same manifest again is a no-op).
func (r *Repository) PushManifestRef(ctx context.Context, g Generation, ref ManifestRef, exclusive bool) (ocispec.Descriptor, error) {
	cfg, err := BuildConfig(g)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	man, err := BuildManifestRef(g, cfg, ref)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	mdesc := Descriptor(ocispec.MediaTypeImageManifest, man)
	mdesc.ArtifactType = ref.ArtifactType
	if exclusive {
		cur, err := r.repo.Resolve(ctx, ref.Tag)
		switch {
		case err == nil && cur.Digest == mdesc.Digest:
			return mdesc, nil
		case err == nil:
			return ocispec.Descriptor{}, fmt.Errorf("oci %s: tag %s names manifest %s, not %s: %w", r.name, ref.Tag, cur.Digest, mdesc.Digest, ErrTagTaken)
		case !isNotFound(err):
			return ocispec.Descriptor{}, fmt.Errorf("oci %s: resolve %s: %w", r.name, ref.Tag, err)
		}
	}
	blobs := append([]ExtraBlob{{MediaType: ConfigMediaType, Title: "config", Data: cfg}}, ref.Extra...)
	for _, b := range blobs {
		d := Descriptor(b.MediaType, b.Data)
		ok, err := r.repo.Exists(ctx, d)
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("oci %s: HEAD %s blob: %w", r.name, b.Title, err)
		}
		if !ok {
			if err := r.repo.Push(ctx, d, bytes.NewReader(b.Data)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
				return ocispec.Descriptor{}, fmt.Errorf("oci %s: upload %s blob: %w", r.name, b.Title, err)
			}
		}
	}
	if err := r.repo.PushReference(ctx, mdesc, bytes.NewReader(man), ref.Tag); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("oci %s: push manifest %s: %w", r.name, ref.Tag, err)
	}
	return mdesc, nil
}

// ErrTagTaken: an exclusive push found the tag naming another manifest.
var ErrTagTaken = errors.New("tag already names a different manifest")

// ErrNotFound: the tag or blob does not exist (wraps oras-go's).
var ErrNotFound = errdef.ErrNotFound

// ErrManifestBlobUnknown: the registry refused a manifest because it
// lacks a blob the manifest references (MANIFEST_BLOB_UNKNOWN). A push
// that took blobs as present from the previous generation's manifest
// (Previous.Manifest) gets it when one was deleted from under that
// manifest; pushing again without Previous.Manifest uploads it.
var ErrManifestBlobUnknown = errors.New("the registry lacks a blob the manifest references")

// isBlobUnknown reports whether err is the registry's MANIFEST_BLOB_UNKNOWN
// (or BLOB_UNKNOWN) answer.
func isBlobUnknown(err error) bool {
	var er *errcode.ErrorResponse
	if !errors.As(err, &er) {
		return false
	}
	for _, e := range er.Errors {
		if e.Code == errcode.ErrorCodeManifestBlobUnknown || e.Code == errcode.ErrorCodeBlobUnknown {
			return true
		}
	}
	return false
}

func isNotFound(err error) bool {
	if errors.Is(err, errdef.ErrNotFound) {
		return true
	}
	var er *errcode.ErrorResponse
	return errors.As(err, &er) && er.StatusCode == http.StatusNotFound
}

// FetchManifest returns the manifest tag names (at most 4 MiB, digest
// checked) and its raw bytes. A missing tag wraps ErrNotFound.
func (r *Repository) FetchManifest(ctx context.Context, tag string) (ocispec.Descriptor, *ocispec.Manifest, []byte, error) {
	desc, rc, err := r.repo.FetchReference(ctx, tag)
	if err != nil {
		if isNotFound(err) {
			return desc, nil, nil, fmt.Errorf("oci %s: manifest %s: %w", r.name, tag, ErrNotFound)
		}
		return desc, nil, nil, fmt.Errorf("oci %s: manifest %s: %w", r.name, tag, err)
	}
	defer rc.Close()
	if desc.Size > maxManifestBytes || desc.Size < 0 {
		return desc, nil, nil, fmt.Errorf("oci %s: manifest %s is %d bytes (limit %d)", r.name, tag, desc.Size, maxManifestBytes)
	}
	b, err := content.ReadAll(rc, desc)
	if err != nil {
		return desc, nil, nil, fmt.Errorf("oci %s: manifest %s: %w", r.name, tag, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return desc, nil, nil, fmt.Errorf("oci %s: manifest %s: not an OCI manifest: %w", r.name, tag, jsonerr.Describe(err))
	}
	return desc, &m, b, nil
}

// FetchBlob returns the bytes of the blob d (at most max bytes; size and
// digest checked).
func (r *Repository) FetchBlob(ctx context.Context, d ocispec.Descriptor, max int64) ([]byte, error) {
	if d.Size < 0 || d.Size > max {
		return nil, fmt.Errorf("oci %s: blob %s is %d bytes (limit %d)", r.name, d.Digest, d.Size, max)
	}
	rc, err := r.repo.Fetch(ctx, d)
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("oci %s: blob %s: %w", r.name, d.Digest, ErrNotFound)
		}
		return nil, fmt.Errorf("oci %s: blob %s: %w", r.name, d.Digest, err)
	}
	defer rc.Close()
	b, err := content.ReadAll(rc, d)
	if err != nil {
		return nil, fmt.Errorf("oci %s: blob %s: %w", r.name, d.Digest, err)
	}
	return b, nil
}

// Tags lists every tag of the repository (none for a repository that does
// not exist yet).
func (r *Repository) Tags(ctx context.Context) ([]string, error) {
	var tags []string
	if err := r.repo.Tags(ctx, "", func(t []string) error {
		tags = append(tags, t...)
		return nil
	}); err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("oci %s: list tags: %w", r.name, err)
	}
	return tags, nil
}

// Exists reports whether the blob d is in the repository.
func (r *Repository) Exists(ctx context.Context, d ocispec.Descriptor) (bool, error) {
	ok, err := r.repo.Exists(ctx, d)
	if err != nil {
		return false, fmt.Errorf("oci %s: HEAD %s: %w", r.name, d.Digest, err)
	}
	return ok, nil
}

// DeleteManifest deletes the manifest tag names (and so every tag naming
// it). A missing tag is not an error (already deleted).
func (r *Repository) DeleteManifest(ctx context.Context, tag string) error {
	desc, err := r.repo.Resolve(ctx, tag)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("oci %s: resolve %s: %w", r.name, tag, err)
	}
	if err := r.repo.Delete(ctx, desc); err != nil && !isNotFound(err) {
		return fmt.Errorf("oci %s: delete manifest %s (%s): %w", r.name, tag, desc.Digest, err)
	}
	return nil
}
