package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"oras.land/oras-go/v2/errdef"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout"
)

// Blobs returns the repository's segment blobs as a layout.Blobs: the
// store of the Skeleton layout's tensor bytes.
func (r *Repository) Blobs() layout.Blobs { return ociBlobs{r} }

type ociBlobs struct{ r *Repository }

// Has HEADs the blob.
func (b ociBlobs) Has(ctx context.Context, d [32]byte) (bool, error) {
	return b.r.Exists(ctx, SegmentDescriptor(wtxt.Segment{Digest: d}))
}

// Get fetches the blob; the registry's Content-Length is checked against
// size before the body is read (a missing blob wraps
// wtxt.ErrBlobNotFound).
func (b ociBlobs) Get(ctx context.Context, d [32]byte, size int64) (io.ReadCloser, error) {
	return b.r.OpenBlob(ctx, wtxt.Segment{Digest: d, Size: size})
}

// Put uploads the blob (the registry checks its digest).
func (b ociBlobs) Put(ctx context.Context, d [32]byte, data []byte) error {
	if sha256.Sum256(data) != d {
		return fmt.Errorf("oci %s: %w", b.r.name, layout.ErrDigest)
	}
	desc := SegmentDescriptor(wtxt.Segment{Digest: d, Size: int64(len(data))})
	if err := b.r.repo.Push(ctx, desc, bytes.NewReader(data)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return fmt.Errorf("oci %s: push blob %s: %w", b.r.name, desc.Digest, err)
	}
	return nil
}
