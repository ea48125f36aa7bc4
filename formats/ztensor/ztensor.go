package ztensor

import (
	"bytes"
	"errors"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// Magic is the 8-byte header of every zTensor 1.x file (and, as footer, of
// zTensor 1.1 and later).
const Magic = "ZTEN1000"

// Other magics of the zTensor family, recognised only to give a clear
// "unsupported version" error.
const (
	magicV01 = "ZTEN0001"
	magicV2  = "\x89ZT2\r\n\x1a\n"
)

// Writer constants of the reference implementation (pie-project/ztensor
// 1.0.0). Encode writes them unless the snapshot's Attrs say otherwise, so
// that its manifests are byte-identical to the reference writer's.
const (
	DefaultVersion   = "1.0"
	DefaultGenerator = "zTensor-Rust v0.1.0"
)

// Alignment is the required alignment of every component offset.
const Alignment = 64

// Default limits used when the corresponding Codec field is zero.
const (
	// DefaultMaxManifestSize bounds the CBOR manifest a decoder reads into
	// memory.
	DefaultMaxManifestSize = 64 << 20
)

// Sentinel errors. Every error returned by Decode wraps exactly one of
// them (and is a *Error carrying the position); Encode's errors wrap
// ErrInvalidSnapshot, formats.ErrLossy or the writer's error.
var (
	// ErrNotZTensor: the file does not start with a zTensor magic.
	ErrNotZTensor = formats.Kind("not a zTensor file", formats.ErrCorrupt)
	// ErrUnsupportedVersion: a zTensor file of a version other than 1.x
	// with the v1.0 layout (v0.1, 1.1+, v2, or a manifest version whose
	// major is not 1).
	ErrUnsupportedVersion = formats.Kind("unsupported zTensor version", formats.ErrUnsupported)
	// ErrCorrupt: the file violates the v1.0 layout or manifest schema.
	ErrCorrupt = formats.Kind("malformed zTensor file", formats.ErrCorrupt)
	// ErrChecksum: a component's digest does not match its bytes.
	ErrChecksum = formats.Kind("digest mismatch", formats.ErrChecksum)
	// ErrLimit: a documented limit (manifest size, decompressed size,
	// zstd window) was exceeded.
	ErrLimit = formats.Kind("limit exceeded", formats.ErrLimit)
	// ErrInvalidSnapshot: Encode was given a snapshot whose ztensor.*
	// attributes are inconsistent or whose data does not match its shape.
	ErrInvalidSnapshot = errors.New("invalid snapshot for zTensor")
)

// Error is the error type of Decode (Format "ztensor"): tensor, Part
// (the component role, quoted), file offset and the check that failed; it
// wraps a sentinel (ErrCorrupt, ErrChecksum, ...).
type Error = formats.Error

// Codec is the zTensor v1.0 codec. The zero value is ready to use and
// applies the default limits; set a field to override one.
type Codec struct {
	// MaxManifestSize bounds the manifest size in bytes
	// (0 = DefaultMaxManifestSize).
	MaxManifestSize int64
	// MaxDecompressed bounds the total bytes the zstd components of one
	// file may decompress to when DecodeOptions.MaxDecoded is not set
	// (0 = formats.DefaultMaxDecoded of the file size).
	MaxDecompressed int64
}

// New returns a zTensor codec with the default limits (the zero Codec).
func New() formats.Codec { return Codec{} }

var _ formats.Codec = Codec{}

// Name implements formats.Codec.
func (Codec) Name() string { return "ztensor" }

// Extensions implements formats.Codec.
func (Codec) Extensions() []string { return []string{".zt"} }

// Sniff reports whether head starts with the v1.x magic ZTEN1000. Files of
// 1.1 and later share it; Decode rejects them with ErrUnsupportedVersion.
func (Codec) Sniff(head []byte) bool { return bytes.HasPrefix(head, []byte(Magic)) }

func (c Codec) maxManifest() int64 {
	if c.MaxManifestSize > 0 {
		return c.MaxManifestSize
	}
	return DefaultMaxManifestSize
}

// dtypes maps zTensor dtype names to snapshot dtypes; every zTensor dtype
// has a counterpart; the fp8 and complex snapshot dtypes have none (the
// zTensor 1.0 spec lists no such dtype), see keepDTypes.
var dtypes = [...]struct {
	name string
	dt   snapshot.DType
}{
	{"float64", snapshot.F64},
	{"float32", snapshot.F32},
	{"float16", snapshot.F16},
	{"bfloat16", snapshot.BF16},
	{"int64", snapshot.I64},
	{"int32", snapshot.I32},
	{"int16", snapshot.I16},
	{"int8", snapshot.I8},
	{"uint64", snapshot.U64},
	{"uint32", snapshot.U32},
	{"uint16", snapshot.U16},
	{"uint8", snapshot.U8},
	{"bool", snapshot.Bool},
}

func parseDType(s string) (snapshot.DType, bool) {
	for _, d := range dtypes {
		if d.name == s {
			return d.dt, true
		}
	}
	return snapshot.Invalid, false
}

func dtypeName(dt snapshot.DType) (string, bool) {
	for _, d := range dtypes {
		if d.dt == dt {
			return d.name, true
		}
	}
	return "", false
}

// Tensor layouts (the manifest's "format") and component roles.
const (
	formatDense = "dense"
	formatCSR   = "sparse_csr"
	formatCOO   = "sparse_coo"

	roleData    = "data"
	roleValues  = "values"
	roleIndices = "indices"
	roleIndptr  = "indptr"
	roleCoords  = "coords"

	encodingZstd = "zstd"

	digestCRC32C = "crc32c"
	digestSHA256 = "sha256"
)

// knownRoles returns the roles of a known format in blob order, or nil for
// an extension format.
func knownRoles(format string) []string {
	switch format {
	case formatDense:
		return []string{roleData}
	case formatCSR:
		return []string{roleValues, roleIndices, roleIndptr}
	case formatCOO:
		return []string{roleValues, roleCoords}
	}
	return nil
}

// Attribute keys (see doc.go, "Mapping to snapshots").
const (
	attrPrefix = "ztensor."

	// Snapshot.Attrs
	attrVersion    = "ztensor.version"
	attrGenerator  = "ztensor.generator"
	attrAttributes = "ztensor.attributes"
	attrOrder      = "ztensor.order"

	// Array.Attrs
	attrName     = "ztensor.name"
	attrFormat   = "ztensor.format"
	attrRole     = "ztensor.role"
	attrDType    = "ztensor.dtype"
	attrShape    = "ztensor.shape"
	attrEncoding = "ztensor.encoding"
	attrDigest   = "ztensor.digest"
)
