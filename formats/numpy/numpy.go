package numpy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// Limits. A header or archive beyond them is refused before anything is
// allocated for it.
const (
	// MaxHeaderSize is the largest .npy header (the dict text after the
	// length field) Decode accepts: 65,536 bytes. NumPy's own loader stops
	// at 10,000 characters; an array of at most MaxDims dimensions written
	// by NumPy needs well under 2,000.
	MaxHeaderSize = 1 << 16
	// MaxDims is the most dimensions an array may have (NumPy 2's
	// NPY_MAXDIMS; NumPy 1.x allows 32).
	MaxDims = 64
	// MaxMembers is the most members an .npz archive may have.
	MaxMembers = 1 << 20
	// MaxDirectorySize bounds an .npz central directory: 256 MiB.
	MaxDirectorySize = 256 << 20
	// DefaultBudget is the default of Codec.Budget: 1 GiB.
	DefaultBudget = 1 << 30
)

// DefaultArrayName is the name Decode gives the one array of a .npy file
// (the name np.savez gives its first positional array). Encode ignores the
// array's name when it writes a .npy file.
const DefaultArrayName = "arr_0"

// Attribute keys this codec reads and writes. Each is present only when
// its value differs from what np.save / np.savez write by default, so an
// array saved by NumPy with defaults carries no attributes at all.
const (
	// AttrVersion (array): the .npy format version, "2.0" or "3.0"
	// (absent: "1.0").
	AttrVersion = "numpy.version"
	// AttrFortranOrder (array): "true" when the file stores the array in
	// Fortran (column-major) order (absent: C order).
	AttrFortranOrder = "numpy.fortran_order"
	// AttrByteOrder (array): "big" when the file stores elements
	// big-endian ('>' in descr; absent: little-endian or 1-byte).
	AttrByteOrder = "numpy.byte_order"
	// AttrHeader (array): the header text exactly as the file holds it
	// (dict, padding and newline), when it is not the text NumPy >= 1.24
	// writes for the same version, descr, order and shape.
	AttrHeader = "numpy.header"
	// AttrName (array): the original .npz key (member name without
	// ".npy") when it is not a portable WTXT array name.
	AttrName = "numpy.name"
	// AttrZipMethod (array): "deflate" when the .npz member is deflated
	// (absent: stored).
	AttrZipMethod = "numpy.zip.method"
	// AttrZipMTime (array): the member's MS-DOS modification date and time
	// as "YYYY-MM-DD hh:mm:ss" (each field as stored, seconds even), when
	// not 1980-01-01 00:00:00.
	AttrZipMTime = "numpy.zip.mtime"
	// AttrOrder (snapshot): the .npz member order as a JSON array of array
	// names, when it is not ascending bytewise name order.
	AttrOrder = "numpy.npz.order"
)

const attrPrefix = "numpy."

// Sentinel errors. Decode's format errors are *Error values wrapping
// ErrCorrupt, ErrLimit or ErrUnsupported; Encode's errors wrap
// ErrInvalidSnapshot, formats.ErrLossy or the writer's error.
var (
	// ErrCorrupt: the file violates the .npy or zip layout.
	ErrCorrupt = formats.Kind("malformed numpy file", formats.ErrCorrupt)
	// ErrLimit: a size is beyond a limit or the codec's budget.
	ErrLimit = formats.Kind("limit exceeded", formats.ErrLimit)
	// ErrUnsupported: valid NumPy data snapd does not read: object arrays
	// (pickles), structured, string, complex256 and datetime dtypes,
	// big-endian complex arrays in Fortran order,
	// encrypted or otherwise compressed zip members.
	ErrUnsupported = formats.Kind("unsupported numpy feature", formats.ErrUnsupported)
	// ErrInvalidSnapshot: Encode was given a snapshot it cannot write
	// (bad numpy.* attributes, no or several arrays for a .npy file).
	ErrInvalidSnapshot = errors.New("invalid snapshot for numpy")
)

// Error is a Decode failure (Format "numpy"): Part names the zip
// member (quoted), Offset the file offset, Check what failed. It wraps
// ErrCorrupt, ErrLimit or ErrUnsupported and never holds file content
// other than member names.
type Error = formats.Error

// memberWhere is Error.Part for a zip member ("" for a .npy file).
func memberWhere(name string) string {
	if name == "" {
		return ""
	}
	return fmt.Sprintf("member %q", name)
}

// dtypeInfo is one NumPy element type snapd reads: kind letter and size as
// in descr ("f8"), and the snapshot dtype.
type dtypeInfo struct {
	kind byte
	size int
	dt   snapshot.DType
}

var dtypeTable = []dtypeInfo{
	{'f', 8, snapshot.F64},
	{'f', 4, snapshot.F32},
	{'f', 2, snapshot.F16},
	{'i', 8, snapshot.I64},
	{'i', 4, snapshot.I32},
	{'i', 2, snapshot.I16},
	{'i', 1, snapshot.I8},
	{'u', 8, snapshot.U64},
	{'u', 4, snapshot.U32},
	{'u', 2, snapshot.U16},
	{'u', 1, snapshot.U8},
	{'b', 1, snapshot.Bool},
	{'c', 8, snapshot.C64},
	{'c', 16, snapshot.C128},
}

func dtypeFor(dt snapshot.DType) (dtypeInfo, bool) {
	for _, d := range dtypeTable {
		if d.dt == dt {
			return d, true
		}
	}
	return dtypeInfo{}, false
}

// kindNames names NumPy dtype kinds snapd refuses, for error messages
// (the descr itself is file content and never echoed).
var kindNames = map[byte]string{
	'O': "object (pickled Python objects; never unpickled)",
	'V': "void/structured",
	'c': "complex of this size",
	'S': "byte string",
	'a': "byte string",
	'U': "unicode string",
	'M': "datetime",
	'm': "timedelta",
	'f': "float of this size",
	'i': "integer of this size",
	'u': "unsigned integer of this size",
	'b': "bool of this size",
}

// Codec is the .npy codec ("numpy") or, with NPZ set, the .npz codec
// ("npz"). The zero value is a .npy codec with the default budget.
type Codec struct {
	// NPZ selects the .npz (zip of .npy members) container.
	NPZ bool
	// Budget bounds the bytes one Decode or Encode call holds in memory
	// for array data: arrays that must be transposed or byte-swapped from
	// a reader that is not memory backed (a deflated member, a non-mapped
	// file), and Fortran-order writes from such sources. 0 means
	// DefaultBudget. Stored members and .npy data of a memory-mapped file
	// cost nothing against it.
	//
	// Decode also charges the file's decode budget (formats.Budget:
	// DecodeOptions.MaxDecoded, default formats.DefaultMaxDecoded of the
	// file size, 256 × the size and at least 256 MiB): the declared
	// uncompressed size of every deflated .npz member, before it is
	// inflated, and every array copied into memory.
	Budget int64

	// zip64At replaces Python's ZIP64_LIMIT (tests write zip64 records
	// without 2 GiB files); 0 means zip64Limit.
	zip64At int64
}

// New returns the .npy codec.
func New() formats.Codec { return Codec{} }

// NewNPZ returns the .npz codec.
func NewNPZ() formats.Codec { return Codec{NPZ: true} }

var _ formats.Codec = Codec{}

// Name implements formats.Codec: "numpy" or "npz".
func (c Codec) Name() string {
	if c.NPZ {
		return "npz"
	}
	return "numpy"
}

// Extensions implements formats.Codec.
func (c Codec) Extensions() []string {
	if c.NPZ {
		return []string{".npz"}
	}
	return []string{".npy"}
}

// Sniff implements formats.Codec. A .npy file starts with "\x93NUMPY". An
// .npz file starts with a zip local file header ("PK\x03\x04") whose
// member name ends in ".npy" and fits in head (names up to 34 bytes; other
// .npz files are found by extension). This is specific enough to leave
// other zip-based formats (torch.save's "archive/data.pkl") alone.
func (c Codec) Sniff(head []byte) bool {
	if !c.NPZ {
		return len(head) >= 6 && string(head[:6]) == npyMagic
	}
	if len(head) < 30 || string(head[:4]) != "PK\x03\x04" {
		return false
	}
	n := int(head[26]) | int(head[27])<<8
	if n < 5 || 30+n > len(head) {
		return false
	}
	return strings.HasSuffix(string(head[30:30+n]), ".npy")
}

func (c Codec) budget() int64 {
	if c.Budget > 0 {
		return c.Budget
	}
	return DefaultBudget
}

// budget tracks bytes held in memory during one call, and holds the
// converted-block cache of the arrays one Decode returns.
type budget struct {
	left  int64
	file  *formats.Budget // the file's decode budget (Decode only)
	cache *blockCache
}

// take reserves n bytes or reports false.
func (b *budget) take(n int64) bool {
	if n < 0 || n > b.left {
		return false
	}
	b.left -= n
	return true
}

// give returns n bytes taken earlier.
func (b *budget) give(n int64) { b.left += n }

func (c Codec) zip64Limit() int64 {
	if c.zip64At > 0 {
		return c.zip64At
	}
	return zip64Limit
}
