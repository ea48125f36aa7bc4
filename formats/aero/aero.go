package aero

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// Limits from the AERO 0.1 specification, enforced by the reader before any
// allocation that depends on a declared size (and by the writer).
const (
	// MaxEntryCount is the maximum number of TOC entries (chunks).
	MaxEntryCount = 1_000_000
	// MaxStringTable is the maximum string table size in bytes.
	MaxStringTable = 512 << 20
	// MaxMetadataULen is the maximum uncompressed size of any chunk other
	// than WTSH (TIDX, MMSG, MJSN, IHSH, PHSH, unknown chunks).
	MaxMetadataULen = 2 << 30
	// MaxRank is the maximum tensor rank (the C++ reference's cap).
	MaxRank = 32
	// MaxNameLen is the maximum tensor name length in bytes (the C++
	// reference's cap).
	MaxNameLen = 4096
	// MaxOpaqueBytes bounds the total size of chunks the reader does not
	// interpret but keeps (base64) in Snapshot.Attrs for a lossless round
	// trip. Larger unknown chunks are dropped and recorded in
	// Attrs["aero.dropped"], which makes Encode fail with formats.ErrLossy
	// unless EncodeOptions.Lossy.
	MaxOpaqueBytes = 16 << 20
	// DefaultShardCap is the writer's shard capacity when it assigns shards.
	DefaultShardCap = 2 << 30
	// maxMsgpackDepth bounds nesting in msgpack (and typed-JSON) values.
	maxMsgpackDepth = 64
)

// Fixed sizes and values of the container.
const (
	headerSize   = 96
	tocHeaderLen = 16
	tocEntryLen  = 80
	ihshSize     = 256
	hashOff      = 48 // offset of the BLAKE3 field inside a TOC entry

	flagZstd     = 0x1
	flagMmap     = 0x2
	flagIndex    = 0x4
	flagOptional = 0x8

	dtypePacked = 0x8000
)

var magic = [4]byte{'A', 'E', 'R', 'O'}

// Sentinel errors. Every error returned by Decode wraps one of them (through
// *Error, possibly several through *CorruptError).
var (
	// ErrNotAero: the file does not start with the AERO magic.
	ErrNotAero = formats.Kind("not an AERO file", formats.ErrCorrupt)
	// ErrVersion: version, header_size or file_flags are not those of 0.1.
	ErrVersion = formats.Kind("unsupported AERO version or header", formats.ErrUnsupported)
	// ErrTruncated: a declared range lies beyond the end of the file.
	ErrTruncated = formats.Kind("range beyond end of file", formats.ErrTruncated)
	// ErrLimit: a declared size exceeds a documented security limit or
	// the file's decode budget (formats.Budget).
	ErrLimit = formats.Kind("security limit exceeded", formats.ErrLimit)
	// ErrCorrupt: a structural problem (bad name, bad msgpack, overlap, ...).
	ErrCorrupt = formats.Kind("corrupt AERO file", formats.ErrCorrupt)
	// ErrChecksum: a BLAKE3 value (chunk, hash_b3, IHSH, PHSH) does not match.
	ErrChecksum = formats.Kind("checksum mismatch", formats.ErrChecksum)
)

// Error is one problem found in a file (Format "aero"): Check is the
// short name of the check ("header", "toc", "bounds", "blake3",
// "hash_b3", "ihsh", "phsh", "overlap", "tidx", ...), Part the chunk
// (`TOC entry 3 WTSH "weights.shard0"`), Detail what was found; it wraps
// one of the sentinels.
type Error = formats.Error

// CorruptError collects every problem found in a file whose header and TOC
// could be parsed. errors.Is/As see each problem.
type CorruptError struct {
	File     string
	Problems []*Error
}

func (e *CorruptError) Error() string {
	var b strings.Builder
	name := e.File
	if name == "" {
		name = "input"
	}
	fmt.Fprintf(&b, "aero: %s: %d problem(s):", name, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(strings.TrimPrefix(strings.TrimPrefix(p.Error(), "aero: "), p.File+": "))
	}
	return b.String()
}

// Unwrap returns the problems.
func (e *CorruptError) Unwrap() []error {
	out := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p
	}
	return out
}

func sortProblems(ps []*Error) {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Offset != ps[j].Offset {
			return ps[i].Offset < ps[j].Offset
		}
		return ps[i].Error() < ps[j].Error()
	})
}

// Codec is the AERO 0.1 codec. It holds no state; the zero value is usable.
type Codec struct{}

// New returns the AERO codec.
func New() formats.Codec { return Codec{} }

// Name implements formats.Codec.
func (Codec) Name() string { return "aero" }

// Extensions implements formats.Codec.
func (Codec) Extensions() []string { return []string{".aero"} }

// Sniff reports whether head starts with "AERO" followed (when present) by
// version 0.1.
func (Codec) Sniff(head []byte) bool {
	if len(head) < 4 || [4]byte(head[:4]) != magic {
		return false
	}
	if len(head) >= 8 {
		return binary.LittleEndian.Uint16(head[4:]) == 0 && binary.LittleEndian.Uint16(head[6:]) == 1
	}
	return true
}

func align(n, a int64) int64 { return (n + a - 1) / a * a }

// shardName returns the WTSH chunk name of a shard id.
func shardName(id uint64) string { return fmt.Sprintf("weights.shard%d", id) }

// parseShardName returns the id of a canonical shard name
// ("weights.shard" + decimal without leading zeros).
func parseShardName(name string) (uint64, bool) {
	d, ok := strings.CutPrefix(name, "weights.shard")
	if !ok || d == "" || len(d) > 19 || (len(d) > 1 && d[0] == '0') {
		return 0, false
	}
	var v uint64
	for _, c := range []byte(d) {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

// fourccString renders a fourcc for messages.
func fourccString(f [4]byte) string {
	if fourccValid(f) {
		return string(f[:])
	}
	return "(non-printable fourcc)" // never echo the bytes
}

func fourccValid(f [4]byte) bool {
	for _, c := range f {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// aeroToSnap maps AERO dtype codes 0–12 to snapshot dtypes.
var aeroToSnap = [...]snapshot.DType{
	snapshot.F16, snapshot.F32, snapshot.BF16, snapshot.F64, snapshot.I8, snapshot.U8,
	snapshot.I16, snapshot.U16, snapshot.I32, snapshot.U32, snapshot.I64, snapshot.U64, snapshot.Bool,
}

// snapToAero returns the AERO dtype code of a snapshot dtype.
func snapToAero(d snapshot.DType) (uint64, bool) {
	for i, v := range aeroToSnap {
		if v == d {
			return uint64(i), true
		}
	}
	return 0, false
}
