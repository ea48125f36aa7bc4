package snapshot

import (
	"encoding/binary"
	"math"
)

// F8E4M3ToFloat64 decodes OCP FP8 E4M3FN bits (torch float8_e4m3fn):
// sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is
// subnormal (m/8 · 2^-6); S.1111.111 is NaN; there are no infinities, so
// S.1111.000–110 are the finite values up to ±448.
func F8E4M3ToFloat64(b byte) float64 {
	sign := 1.0
	if b&0x80 != 0 {
		sign = -1
	}
	e, m := int(b>>3)&0xf, float64(b&7)
	switch {
	case e == 0xf && b&7 == 7:
		return math.NaN()
	case e == 0:
		return sign * math.Ldexp(m, -9)
	}
	return sign * math.Ldexp(8+m, e-10)
}

// F8E5M2ToFloat64 decodes FP8 E5M2 bits (torch float8_e5m2), IEEE-like:
// sign, 5 exponent bits (bias 15), 2 mantissa bits; exponent 0 is
// subnormal (m/4 · 2^-14); exponent 31 is ±Inf (m = 0) or NaN.
func F8E5M2ToFloat64(b byte) float64 {
	sign := 1.0
	if b&0x80 != 0 {
		sign = -1
	}
	e, m := int(b>>2)&0x1f, float64(b&3)
	switch {
	case e == 0x1f && m == 0:
		return math.Inf(int(sign))
	case e == 0x1f:
		return math.NaN()
	case e == 0:
		return sign * math.Ldexp(m, -16)
	}
	return sign * math.Ldexp(4+m, e-17)
}

// F8E8M0ToFloat64 decodes an E8M0 scale (torch float8_e8m0fnu): the
// unsigned value 2^(b-127); 0xff is NaN. There is no sign and no zero.
func F8E8M0ToFloat64(b byte) float64 {
	if b == 0xff {
		return math.NaN()
	}
	return math.Ldexp(1, int(b)-127)
}

// ElementFloat decodes one little-endian element of a real dtype (floats,
// fp8, integers, bool) as float64; b holds at least d.Size() bytes. For
// c64 and c128 it returns the real part (see ElementComplex).
func ElementFloat(d DType, b []byte) float64 {
	switch d {
	case F64, C128:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case F32, C64:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case BF16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	case F16:
		return f16ToFloat(binary.LittleEndian.Uint16(b))
	case F8E4M3:
		return F8E4M3ToFloat64(b[0])
	case F8E5M2:
		return F8E5M2ToFloat64(b[0])
	case F8E8M0:
		return F8E8M0ToFloat64(b[0])
	case I64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case U64:
		return float64(binary.LittleEndian.Uint64(b))
	case I32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case U32:
		return float64(binary.LittleEndian.Uint32(b))
	case I16:
		return float64(int16(binary.LittleEndian.Uint16(b)))
	case U16:
		return float64(binary.LittleEndian.Uint16(b))
	case I8:
		return float64(int8(b[0]))
	case U8, Bool:
		return float64(b[0])
	}
	return 0
}

// ElementComplex decodes one little-endian element of c64 or c128 (real
// part, then imaginary part); b holds at least d.Size() bytes. Other
// dtypes give their ElementFloat value as the real part.
func ElementComplex(d DType, b []byte) (re, im float64) {
	switch d {
	case C64:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4:])))
	case C128:
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), math.Float64frombits(binary.LittleEndian.Uint64(b[8:]))
	}
	return ElementFloat(d, b), 0
}
