package snapshot

import (
	"fmt"
	"strings"
)

// DType is an element type. Its String form is the WTXT spelling (f64, bf16, ...).
type DType uint8

// The element types a Snapshot can hold. Formats with other element types
// (quantized, packed, ...) carry their bytes as U8 and describe the
// original type in Array.Attrs. The values are stable: new types are only
// ever appended.
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
	// F8E4M3 is OCP FP8 E4M3FN (torch float8_e4m3fn, safetensors F8_E4M3):
	// no infinities, 0x7f/0xff are NaN.
	F8E4M3
	// F8E5M2 is FP8 E5M2 (torch float8_e5m2, safetensors F8_E5M2), IEEE-like.
	F8E5M2
	// F8E8M0 is the E8M0 scale type (torch float8_e8m0fnu, safetensors
	// F8_E8M0): 2^(e-127), 0xff is NaN, no sign, no zero.
	F8E8M0
	// C64 is complex64: two little-endian f32, real then imaginary.
	C64
	// C128 is complex128: two little-endian f64, real then imaginary.
	C128
)

var dtypeNames = [...]string{"", "f64", "f32", "i64", "u64", "i32", "u32", "i16", "u16", "i8", "u8", "f16", "bf16", "bool",
	"f8e4m3", "f8e5m2", "f8e8m0", "c64", "c128"}
var dtypeSizes = [...]int{0, 8, 4, 8, 8, 4, 4, 2, 2, 1, 1, 2, 2, 1, 1, 1, 1, 8, 16}

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
// (f16, bf16, bool, the fp8 types and complex).
func (d DType) Extended() bool { return d >= F16 && d.Valid() }

// IsFP8 reports whether d is one of the 8-bit float types.
func (d DType) IsFP8() bool { return d == F8E4M3 || d == F8E5M2 || d == F8E8M0 }

// IsComplex reports whether d is c64 or c128.
func (d DType) IsComplex() bool { return d == C64 || d == C128 }

// IsFloat reports whether d has floating-point elements: f64, f32, f16,
// bf16, the fp8 types and the complex types (whose real and imaginary
// parts are floats). Their changes are measured on the decoded values
// (|Δ|, relative L2; complex by the modulus of the difference) and they
// can hold NaN (and, but for f8e4m3 and f8e8m0, ±Inf).
func (d DType) IsFloat() bool {
	return d == F64 || d == F32 || d == F16 || d == BF16 || d.IsFP8() || d.IsComplex()
}

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
