package snapshot

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// The NaN/±Inf tests of the float types, on the bits without converting:
// an exponent field of all ones (f8e4m3: S.1111.111, its only NaN, no
// Inf; f8e8m0: 0xff, NaN, no Inf); a complex element is NaN when either
// part is, else ±Inf when either part is, as Diff counts them.
//
// The elements (complex: the parts) are the lanes of little-endian
// 64-bit words, tested several at a time without a branch (bitTest).

// bitTest is one type's test on the lanes of a word: a lane's bits
// without its sign bit are non-finite when >= nf and NaN when >= nan.
// Adding sign-nf (sign-nan) to every lane sets the lane's sign bit
// exactly then, and carries into no other lane (each lane's sum stays
// below twice its sign bit).
type bitTest struct {
	sign, nfAdd, nanAdd uint64
}

// lanesTest is the bitTest of lanes of width bits (8, 16, 32 or 64).
func lanesTest(width uint, nf, nan uint64) bitTest {
	var t bitTest
	sign := uint64(1) << (width - 1)
	for s := uint(0); s < 64; s += width {
		t.sign |= sign << s
		t.nfAdd |= (sign - nf) << s
		t.nanAdd |= (sign - nan) << s
	}
	return t
}

var (
	f64Test  = lanesTest(64, 0x7ff0000000000000, 0x7ff0000000000001)
	f32Test  = lanesTest(32, 0x7f800000, 0x7f800001)
	f16Test  = lanesTest(16, 0x7c00, 0x7c01)
	bf16Test = lanesTest(16, 0x7f80, 0x7f81)
	e5m2Test = lanesTest(8, 0x7c, 0x7d)
	e4m3Test = lanesTest(8, 0x7f, 0x7f)
)

// nonFiniteTest returns d's bitTest (complex: its parts'); ok is false
// for types without NaN and for f8e8m0 (unsigned: tested bytewise).
func nonFiniteTest(d DType) (t bitTest, ok bool) {
	switch d {
	case F64, C128:
		return f64Test, true
	case F32, C64:
		return f32Test, true
	case F16:
		return f16Test, true
	case BF16:
		return bf16Test, true
	case F8E5M2:
		return e5m2Test, true
	case F8E4M3:
		return e4m3Test, true
	}
	return t, false
}

// AnyNonFinite reports whether the little-endian elements of type d in b
// hold a NaN or ±Inf (see the tests above). It is false for non-float
// types and ignores a trailing partial element. A scan this cheap lets
// callers skip the comparison with a base when nothing non-finite is
// there (the usual case).
func AnyNonFinite(d DType, b []byte) bool {
	if !d.IsFloat() {
		return false
	}
	b = b[:len(b)/d.Size()*d.Size()]
	if d == F8E8M0 {
		return bytes.IndexByte(b, 0xff) >= 0
	}
	t, _ := nonFiniteTest(d)
	return t.any(b)
}

// CountNonFinite counts the little-endian elements of type d in b that
// are NaN and those that are ±Inf, by AnyNonFinite's tests: what Diff
// reports as NewNaN and NewInf against an all-zero base. It is 0, 0 for
// non-float types and ignores a trailing partial element. Elements are
// tested without a branch, several per 64-bit word, after a first scan
// that stops the work when there is nothing to count: cheap enough to
// run on every byte an encoder hashes.
func CountNonFinite(d DType, b []byte) (nan, inf int64) {
	if !d.IsFloat() {
		return 0, 0
	}
	b = b[:len(b)/d.Size()*d.Size()]
	if d == F8E8M0 {
		for _, c := range b {
			nan += int64((uint(c) + 1) >> 8) // 1 for 0xff
		}
		return nan, 0
	}
	t, _ := nonFiniteTest(d)
	if !t.any(b) {
		return 0, 0
	}
	switch d {
	case C64: // one element per word, parts in bits 0-31 and 32-63
		for ; len(b) >= 8; b = b[8:] {
			nf, na := t.word(binary.LittleEndian.Uint64(b[:8]))
			nan1, nf1 := (na|na<<32)>>63, (nf|nf<<32)>>63
			nan += int64(nan1)
			inf += int64(nf1 - nan1)
		}
		return nan, inf
	case C128: // one element per two words
		for ; len(b) >= 16; b = b[16:] {
			nf0, na0 := t.word(binary.LittleEndian.Uint64(b[:8]))
			nf1, na1 := t.word(binary.LittleEndian.Uint64(b[8:16]))
			nanE, nfE := (na0|na1)>>63, (nf0|nf1)>>63
			nan += int64(nanE)
			inf += int64(nfE - nanE)
		}
		return nan, inf
	}
	nf, na := t.count(b)
	return na, nf - na
}

// word returns the sign-bit positions of w's non-finite lanes and of its
// NaN lanes.
func (t bitTest) word(w uint64) (nf, nan uint64) {
	x := w &^ t.sign
	return (x + t.nfAdd) & t.sign, (x + t.nanAdd) & t.sign
}

// tail is b's last len(b)%8 bytes as a word, zero-padded (zero lanes are
// finite in every type).
func tail(b []byte) (w uint64, ok bool) {
	n := len(b) % 8
	if n == 0 {
		return 0, false
	}
	var p [8]byte
	copy(p[:], b[len(b)-n:])
	return binary.LittleEndian.Uint64(p[:]), true
}

// any reports whether a lane of b is non-finite.
func (t bitTest) any(b []byte) bool {
	var acc uint64
	for ; len(b) >= 32; b = b[32:] {
		acc |= (binary.LittleEndian.Uint64(b[0:8])&^t.sign + t.nfAdd) |
			(binary.LittleEndian.Uint64(b[8:16])&^t.sign + t.nfAdd) |
			(binary.LittleEndian.Uint64(b[16:24])&^t.sign + t.nfAdd) |
			(binary.LittleEndian.Uint64(b[24:32])&^t.sign + t.nfAdd)
	}
	for ; len(b) >= 8; b = b[8:] {
		acc |= binary.LittleEndian.Uint64(b[:8])&^t.sign + t.nfAdd
	}
	if w, ok := tail(b); ok {
		acc |= w&^t.sign + t.nfAdd
	}
	return acc&t.sign != 0
}

// count counts b's non-finite lanes and its NaN lanes.
func (t bitTest) count(b []byte) (nf, nan int64) {
	var n1, n2 int
	add := func(w uint64) {
		f, n := t.word(w)
		n1 += bits.OnesCount64(f)
		n2 += bits.OnesCount64(n)
	}
	for ; len(b) >= 8; b = b[8:] {
		add(binary.LittleEndian.Uint64(b[:8]))
	}
	if w, ok := tail(b); ok {
		add(w)
	}
	return int64(n1), int64(n2)
}
