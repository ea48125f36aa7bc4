package layout

import (
	"context"
	"io"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// Optional interfaces a TreeWriter or Blobs store implements to keep
// work a plain WriteFile or Put cannot avoid (gitops' commit tree and
// segment store implement all three; MapTree and Memory none). A Layout's
// Write checks for them and writes the same tree either way.

// FileWriter is a TreeWriter that copies a file from src itself, so that
// Single's Write never holds the WTXT whole (gitops streams it into a
// blob). WriteFrom stores size bytes of src as name; it fails when src
// has another size by the time it is read.
type FileWriter interface {
	TreeWriter
	WriteFrom(ctx context.Context, name string, src io.ReaderAt, size int64) error
}

// PartsWriter is a TreeWriter that takes the parts and MANIFEST of a
// parts directory (Split's parts, Segments' skeleton pieces) as such:
// WritePart stores p's data (p.Size bytes whose SHA-256 is p.SHA256) as
// dir/p.Name, so a store may keep the blob of a part its previous
// MANIFEST names with the same name, size and SHA-256 without hashing or
// writing it again; WriteManifest stores m, encoded, as dir/MANIFEST
// once every part is written.
type PartsWriter interface {
	TreeWriter
	WritePart(dir string, p Part, data []byte) error
	WriteManifest(dir string, m *Manifest) error
}

// GenerationBlobs is a Blobs store that keeps the set of blobs one
// generation holds (gitops: the seg/ tree of the commit) and may know
// segments of the previous generation by their chunks. The Segments and
// Skeleton layouts' Write pass Known to the split (a known segment is
// neither read, decoded nor hashed, and never put) and, once the WTXT is
// split, call Hold for every segment in file order.
type GenerationBlobs interface {
	Blobs
	// Known returns the digest of the segment whose chunks are k's
	// when the store holds its blob (wtxt.KnownSegment).
	Known(k wtxt.SegmentKey) ([32]byte, bool)
	// Hold records that the generation holds segment s, whose key is
	// k: its blob was put, or found by Has or Known, or (a segment of
	// no bytes, never put) is the empty blob.
	Hold(ctx context.Context, s wtxt.Segment, k wtxt.SegmentKey) error
}

// WriteParts cuts src (size bytes) into parts of at most limit bytes as
// dir/<part> of tree, then writes dir/MANIFEST, and returns the manifest:
// the Split layout's Write, and any file a caller stores split (gitops'
// sidecars). A PartsWriter tree takes the parts as such.
func WriteParts(ctx context.Context, src io.ReaderAt, size int64, tree TreeWriter, dir string, limit int64) (*Manifest, error) {
	return writeParts(tree, dir, func(emit func(Part, []byte) error) (*Manifest, error) {
		return SplitParts(ctx, src, size, limit, emit)
	})
}
