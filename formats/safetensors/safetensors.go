package safetensors

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// MaxHeaderSize is the largest JSON header Decode accepts and Encode
// writes: 100,000,000 bytes, the limit of the reference implementation
// (huggingface/safetensors MAX_HEADER_SIZE).
const MaxHeaderSize = 100_000_000

// Attribute keys this codec reads and writes (see the package
// documentation).
const (
	// AttrMetadata (snapshot) holds the __metadata__ map as canonical JSON.
	AttrMetadata = "safetensors.metadata"
	// AttrName (array) holds the original tensor name when it is not a
	// legal WTXT array name.
	AttrName = "safetensors.name"
	// AttrDType (array) holds the original dtype of a tensor whose dtype
	// has no snapshot counterpart (F4, F6_E2M3, F6_E3M2); its bytes are
	// carried as U8 with shape [nbytes].
	AttrDType = "safetensors.dtype"
	// AttrShape (array) holds the original shape (JSON array) of such a
	// tensor.
	AttrShape = "safetensors.shape"
)

const attrPrefix = "safetensors."

// Sentinel errors. Decode's format errors are *Error values wrapping
// ErrCorrupt, ErrLimit or ErrUnsupported; Encode's errors wrap
// ErrInvalidSnapshot, formats.ErrLossy or the writer's error.
var (
	// ErrCorrupt: the file violates the safetensors layout.
	ErrCorrupt = formats.Kind("malformed safetensors file", formats.ErrCorrupt)
	// ErrLimit: the header is larger than MaxHeaderSize.
	ErrLimit = formats.Kind("limit exceeded", formats.ErrLimit)
	// ErrUnsupported: a dtype this codec does not know.
	ErrUnsupported = formats.Kind("unsupported safetensors feature", formats.ErrUnsupported)
	// ErrInvalidSnapshot: Encode was given a snapshot it cannot write
	// (bad safetensors.* attributes, names, sizes).
	ErrInvalidSnapshot = errors.New("invalid snapshot for safetensors")
)

// Error is a Decode failure (Format "safetensors"): the tensor as
// named in the header, the file offset and the check that failed. It
// wraps ErrCorrupt, ErrLimit or ErrUnsupported.
type Error = formats.Error

// Codec is the safetensors codec. The zero value is ready to use.
type Codec struct{}

// New returns the safetensors codec.
func New() formats.Codec { return Codec{} }

var _ formats.Codec = Codec{}

// Name implements formats.Codec.
func (Codec) Name() string { return "safetensors" }

// Extensions implements formats.Codec.
func (Codec) Extensions() []string { return []string{".safetensors"} }

// Sniff implements formats.Codec. safetensors has no magic number; Sniff
// accepts a head whose first 8 bytes are a little-endian header length of
// 2..MaxHeaderSize followed by '{' and then, after optional JSON white
// space, '"' or '}'.
func (Codec) Sniff(head []byte) bool {
	if len(head) < 10 {
		return false
	}
	var n uint64
	for i := 7; i >= 0; i-- {
		n = n<<8 | uint64(head[i])
	}
	if n < 2 || n > MaxHeaderSize || head[8] != '{' {
		return false
	}
	for _, c := range head[9:] {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"', '}':
			return true
		default:
			return false
		}
	}
	return false
}

// dtypeInfo describes one safetensors dtype.
type dtypeInfo struct {
	name string
	dt   snapshot.DType // snapshot.Invalid: carried as U8 + attrs
	bits int64
}

var dtypeTable = []dtypeInfo{
	{"F64", snapshot.F64, 64},
	{"F32", snapshot.F32, 32},
	{"F16", snapshot.F16, 16},
	{"BF16", snapshot.BF16, 16},
	{"I64", snapshot.I64, 64},
	{"I32", snapshot.I32, 32},
	{"I16", snapshot.I16, 16},
	{"I8", snapshot.I8, 8},
	{"U64", snapshot.U64, 64},
	{"U32", snapshot.U32, 32},
	{"U16", snapshot.U16, 16},
	{"U8", snapshot.U8, 8},
	{"BOOL", snapshot.Bool, 8},
	{"F8_E4M3", snapshot.F8E4M3, 8},
	{"F8_E5M2", snapshot.F8E5M2, 8},
	{"F8_E8M0", snapshot.F8E8M0, 8},
	{"C64", snapshot.C64, 64},
	// No snapshot counterpart: bytes carried as U8 (see doc.go).
	{"F6_E2M3", snapshot.Invalid, 6},
	{"F6_E3M2", snapshot.Invalid, 6},
	{"F4", snapshot.Invalid, 4},
}

func lookupDType(name string) (dtypeInfo, bool) {
	for _, d := range dtypeTable {
		if d.name == name {
			return d, true
		}
	}
	return dtypeInfo{}, false
}

func dtypeFor(dt snapshot.DType) (dtypeInfo, bool) {
	for _, d := range dtypeTable {
		if d.dt == dt && dt != snapshot.Invalid {
			return d, true
		}
	}
	return dtypeInfo{}, false
}

// byteSize returns the byte size of a tensor of dtype d and shape, or an
// error when the element count overflows or the bit count is not a whole
// number of bytes (sub-byte dtypes).
func byteSize(d dtypeInfo, shape []int64) (int64, error) {
	n, err := snapshot.NumElements(shape)
	if err != nil {
		return 0, err
	}
	if n > (1<<63-1)/d.bits {
		return 0, errors.New("byte size overflows int64")
	}
	bits := n * d.bits
	if bits%8 != 0 {
		return 0, fmt.Errorf("%d elements of %d bits are not a whole number of bytes", n, d.bits)
	}
	return bits / 8, nil
}

// sanitizedName returns the WTXT name for an illegal tensor name: its
// bytes with every illegal byte replaced by '_' (cut to leave room for the
// suffix), then '-' and the first hexLen hex digits of SHA-256(orig).
func sanitizedName(orig string, hexLen int) string {
	const maxBase = 1024 - 1 - 64
	b := []byte(orig)
	if len(b) > maxBase {
		b = b[:maxBase]
	}
	for i, c := range b {
		if !snapshot.NameByte(c) {
			b[i] = '_'
		}
	}
	sum := sha256.Sum256([]byte(orig))
	return string(b) + "-" + hex.EncodeToString(sum[:])[:hexLen]
}
