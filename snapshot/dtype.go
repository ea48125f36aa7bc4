package snapshot

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// DType is an element type. Its String form is the WTXT spelling (f64, bf16, ...).
type DType uint8

// The element types a Snapshot can hold. Formats with other element types
// (quantized, packed, complex, ...) carry their bytes as U8 and describe the
// original type in Array.Attrs.
const (
	Invalid DType = iota
	F64
	F32
	I64
	U64
	I32
	U32
	I16
	U16
	I8
	U8
	F16
	BF16
	Bool
)

var dtypeNames = [...]string{"", "f64", "f32", "i64", "u64", "i32", "u32", "i16", "u16", "i8", "u8", "f16", "bf16", "bool"}
var dtypeSizes = [...]int{0, 8, 4, 8, 8, 4, 4, 2, 2, 1, 1, 2, 2, 1}

// String returns the WTXT name of d ("f64", "bool", ...), or "invalid".
func (d DType) String() string {
	if d == Invalid || int(d) >= len(dtypeNames) {
		return "invalid"
	}
	return dtypeNames[d]
}

// Size returns the element size in bytes (0 for Invalid).
func (d DType) Size() int {
	if int(d) >= len(dtypeSizes) {
		return 0
	}
	return dtypeSizes[d]
}

// Valid reports whether d is one of the defined element types.
func (d DType) Valid() bool { return d > Invalid && int(d) < len(dtypeNames) }

// Extended reports whether d is only representable in WTXT with tensor_ext
// (f16, bf16, bool).
func (d DType) Extended() bool { return d == F16 || d == BF16 || d == Bool }

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == F64 || d == F32 || d == F16 || d == BF16 }

// ParseDType parses a WTXT dtype name.
func ParseDType(s string) (DType, error) {
	for i := 1; i < len(dtypeNames); i++ {
		if dtypeNames[i] == s {
			return DType(i), nil
		}
	}
	return Invalid, fmt.Errorf("unknown dtype (%d bytes): want one of %s", len(s), strings.Join(dtypeNames[1:], " "))
}

// AllDTypes lists every valid dtype in declaration order.
func AllDTypes() []DType {
	out := make([]DType, 0, len(dtypeNames)-1)
	for i := 1; i < len(dtypeNames); i++ {
		out = append(out, DType(i))
	}
	return out
}

// AnyNonFinite reports whether the little-endian elements of type d in b
// hold a NaN or ±Inf: an exponent field of all ones, tested on the bits
// without converting. It is false for non-float types and ignores a
// trailing partial element. A scan this cheap lets callers skip the
// comparison with a base when nothing non-finite is there (the usual case).
func AnyNonFinite(d DType, b []byte) bool {
	switch d {
	case F64:
		for i := 0; i+8 <= len(b); i += 8 {
			if binary.LittleEndian.Uint64(b[i:])>>52&0x7ff == 0x7ff {
				return true
			}
		}
	case F32:
		for i := 0; i+4 <= len(b); i += 4 {
			if binary.LittleEndian.Uint32(b[i:])>>23&0xff == 0xff {
				return true
			}
		}
	case F16:
		for i := 0; i+2 <= len(b); i += 2 {
			if binary.LittleEndian.Uint16(b[i:])>>10&0x1f == 0x1f {
				return true
			}
		}
	case BF16:
		for i := 0; i+2 <= len(b); i += 2 {
			if binary.LittleEndian.Uint16(b[i:])>>7&0xff == 0xff {
				return true
			}
		}
	}
	return false
}
