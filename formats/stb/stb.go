package stb

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// Magic starts every STB file.
const Magic = "STB0"

// Version is the only version byte this codec reads and writes.
const Version = 1

// Sizes of the fixed structures and the data alignment.
const (
	HeaderSize = 32
	EntrySize  = 32
	Alignment  = 64
)

// Attribute keys this codec reads and writes (see the package
// documentation).
const (
	// AttrLayout (array): the layout byte when it is not 0 (ROW_MAJOR):
	// "COL_MAJOR", "CHANNELS_LAST", or the decimal value 3..255.
	AttrLayout = "stb.layout"
	// AttrID (array): the tensor_id when the array name is not t<id>
	// (only for repeated ids, or set by a user).
	AttrID = "stb.id"
	// AttrRank (array): the rank byte when it is above 3; the array shape
	// then has 4 dimensions (see AttrTrailing).
	AttrRank = "stb.rank"
	// AttrTrailing (array, with AttrRank) says how the 4th dimension was
	// obtained when it is not exact: "product" (rank >= 5: the product of
	// the dimensions the file does not store) or "unknown" (one of the
	// three stored dimensions is 0, so the missing ones cannot be
	// recovered; the 4th dimension is set to 0).
	AttrTrailing = "stb.trailing"
	// AttrOrder (snapshot): JSON list of the array names in table order,
	// present only when that order is not ascending tensor_id (ties by
	// name).
	AttrOrder = "stb.order"
)

const attrPrefix = "stb."

// Sentinel errors. Decode's format errors are *Error values wrapping
// ErrCorrupt or ErrUnsupported; Encode's errors wrap ErrInvalidSnapshot,
// formats.ErrLossy or the writer's error.
var (
	// ErrCorrupt: the file violates the STB 0.1 layout.
	ErrCorrupt = formats.Kind("malformed STB file", formats.ErrCorrupt)
	// ErrUnsupported: a version, flags value or dtype this codec (and the
	// reference readers) do not read.
	ErrUnsupported = formats.Kind("unsupported STB feature", formats.ErrUnsupported)
	// ErrInvalidSnapshot: Encode was given a snapshot it cannot write in
	// any mode (bad stb.* attributes, dimensions beyond u32, too many
	// tensors).
	ErrInvalidSnapshot = errors.New("invalid snapshot for STB")
)

// Error is a Decode failure (Format "stb"): Part names the table
// entry ("entry N (tensor_id ID)"), Offset the file offset, Check what
// failed. It wraps ErrCorrupt or ErrUnsupported.
type Error = formats.Error

// Codec is the STB 0.1 codec. The zero value is ready to use.
type Codec struct{}

// New returns the STB codec.
func New() formats.Codec { return Codec{} }

var _ formats.Codec = Codec{}

// Name implements formats.Codec.
func (Codec) Name() string { return "stb" }

// Extensions implements formats.Codec.
func (Codec) Extensions() []string { return []string{".stb"} }

// Sniff implements formats.Codec: the file starts with "STB0".
func (Codec) Sniff(head []byte) bool { return len(head) >= 4 && string(head[:4]) == Magic }

// dtypes maps the STB dtype byte to the snapshot dtype.
var dtypes = [...]snapshot.DType{0: snapshot.F32, 1: snapshot.F16, 2: snapshot.I8, 3: snapshot.I32}

func stbDType(dt snapshot.DType) (byte, bool) {
	for i, d := range dtypes {
		if d == dt {
			return byte(i), true
		}
	}
	return 0, false
}

var layoutNames = [...]string{0: "ROW_MAJOR", 1: "COL_MAJOR", 2: "CHANNELS_LAST"}

// layoutString is the AttrLayout value of a layout byte.
func layoutString(l byte) string {
	if int(l) < len(layoutNames) {
		return layoutNames[l]
	}
	return strconv.Itoa(int(l))
}

// parseLayout parses an AttrLayout value.
func parseLayout(s string) (byte, error) {
	for i, n := range layoutNames {
		if s == n {
			return byte(i), nil
		}
	}
	v, err := parseByte(s)
	if err != nil || int(v) < len(layoutNames) {
		return 0, fmt.Errorf("%s: want ROW_MAJOR, COL_MAJOR, CHANNELS_LAST or a number 3..255 (got %d bytes)", AttrLayout, len(s))
	}
	return v, nil
}

// parseByte parses a canonical decimal 0..255 (no sign, no leading zeros).
func parseByte(s string) (byte, error) {
	v, err := strconv.ParseUint(s, 10, 8)
	if err != nil || strconv.FormatUint(v, 10) != s {
		return 0, fmt.Errorf("not a canonical decimal number 0..255 (got %d bytes)", len(s))
	}
	return byte(v), nil
}

// idName is the array name of a tensor_id.
func idName(id byte) string { return "t" + strconv.Itoa(int(id)) }

// idFromName returns id when name is exactly idName(id).
func idFromName(name string) (byte, bool) {
	if !strings.HasPrefix(name, "t") {
		return 0, false
	}
	v, err := parseByte(name[1:])
	return v, err == nil
}

func align(n, a int64) int64 { return (n + a - 1) / a * a }
