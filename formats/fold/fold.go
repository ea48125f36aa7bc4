package fold

import (
	"bytes"
	"fmt"
	"hash/crc32"

	"github.com/snapd-ml/snapd/formats"
)

// Layout constants (see doc.go).
const (
	// Magic is the 8-byte file signature "FOLDv1\0\0".
	Magic = "FOLDv1\x00\x00"
	// HeaderLen is the size of the global header and the only header_len
	// value accepted.
	HeaderLen = 28
	// ChunkHeaderLen is the size of every chunk header.
	ChunkHeaderLen = 32
	// MaxIndexSize bounds index_len (100 MiB, both reference commits).
	MaxIndexSize = 100 << 20
	// MaxChunkSize bounds comp_len, uncomp_len and ecc_len of one chunk
	// (2 GiB, the later reference reader's limit; the seed's 1 GiB is a
	// policy recommendation that the later reference raised).
	MaxChunkSize = 2 << 30
	// MaxSTENHeader bounds the safetensors header inside a STEN chunk
	// (64 MiB, as the later reference reader).
	MaxSTENHeader = 64 << 20
	// MaxSTENTensors bounds the tensor count of a STEN chunk.
	MaxSTENTensors = 1_000_000
	// MaxZstdWindow bounds the zstd window a frame may request (128 MiB,
	// the largest window of zstd levels 1–22 and of --long); the decoder
	// allocates it up front, so a declared size alone cannot make it
	// allocate more.
	MaxZstdWindow = 128 << 20
	// MaxZipMembers bounds the members of an NPZ0/TSAV zip.
	MaxZipMembers = 1_000_000
	// Version is the index version this package writes for new files.
	Version = "1.2.0"
)

// Chunk types with a tensor parser.
const (
	CTypeNPZ  = "NPZ0"
	CTypeSTEN = "STEN"
	CTypeTSAV = "TSAV"
	CTypeJSON = "JSON"
)

// Snapshot attribute keys (Snapshot.Attrs) written by Decode and read by
// Encode. Their values are documented in doc.go.
const (
	AttrIndex    = "fold.index"
	AttrChunks   = "fold.chunks"
	AttrHashForm = "fold.hash_form"
	// AttrName (Array.Attrs) holds a tensor's original name when it had to
	// be sanitized for WTXT.
	AttrName = "fold.name"
	// AttrNPYDescr, AttrNPYShape, AttrSTENDType, AttrSTENShape, AttrTorchDType
	// describe tensors whose element type has no snapshot dtype; their bytes
	// are carried as u8.
	AttrNPYDescr   = "fold.npy.descr"
	AttrNPYShape   = "fold.npy.shape"
	AttrSTENDType  = "fold.sten.dtype"
	AttrSTENShape  = "fold.sten.shape"
	AttrTorchDType = "fold.torch.storage"
)

// Errors callers can branch on. Decode's errors are a *formats.Error
// naming the file around an error that wraps one of them.
var (
	// ErrFormat: the bytes are not a well-formed FOLD file (magic, header,
	// index JSON, chunk header, bounds, limits, embedded container).
	ErrFormat = formats.Kind("fold: malformed file", formats.ErrCorrupt)
	// ErrTruncated: a declared range runs past the end of the file.
	ErrTruncated = formats.Kind("fold: truncated file", formats.ErrTruncated)
	// ErrLimit: a declared size exceeds a security limit or the file's
	// decode budget (formats.Budget: decompressed chunks, inflated zip
	// members, gathered views and other copies, all charged before they are
	// allocated).
	ErrLimit = formats.Kind("fold: size limit exceeded", formats.ErrLimit)
	// ErrChecksum: crc32c, sha256, chunk_hashes or manifest_hash mismatch
	// that ECC could not repair.
	ErrChecksum = formats.Kind("fold: integrity check failed", formats.ErrChecksum)
	// ErrUnsupported: a valid file uses something this package cannot read
	// (encrypted chunks).
	ErrUnsupported = formats.Kind("fold: unsupported feature", formats.ErrUnsupported)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Codec implements formats.Codec for FOLD 1.2 (.fold and .mind).
type Codec struct{}

// New returns the FOLD codec.
func New() formats.Codec { return Codec{} }

// Name implements formats.Codec.
func (Codec) Name() string { return "fold" }

// Extensions implements formats.Codec.
func (Codec) Extensions() []string { return []string{".fold", ".mind"} }

// Sniff reports whether head starts with the FOLD magic.
func (Codec) Sniff(head []byte) bool { return bytes.HasPrefix(head, []byte(Magic)) }

func errorf(base error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", base, fmt.Sprintf(format, args...))
}
