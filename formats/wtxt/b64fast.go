package wtxt

import (
	"encoding/base64"
	"encoding/binary"
)

// The WTXT body is base64 in a fixed shape: every line but a chunk's last
// carries exactly 57 raw bytes as 76 characters, followed by " <parity>\n".
// The routines here encode and decode that shape with pair tables (12 raw
// bits <-> 2 characters) and compute the parity nibble from the same
// machine words, avoiding encoding/base64's per-byte work and a second pass
// over each line. Everything that is not a full 57-byte line falls back to
// encoding/base64, so the output is the standard encoding by construction
// (the tests compare against encoding/base64 as well).

const b64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// b64Tables holds the immutable lookup tables (built once, read-only).
type b64Tables struct {
	// enc maps 12 raw bits to their two characters (first in the low byte).
	enc [4096]uint16
	// dec maps a character to its 6-bit value, or 0xff when it is not in
	// the standard alphabet.
	dec [256]byte
	// dec2 maps two characters (first in the low byte) to their 12 bits,
	// with bit 15 set when either is not in the alphabet.
	dec2 [65536]uint16
}

var b64tab = func() *b64Tables {
	t := new(b64Tables)
	for i := range t.enc {
		t.enc[i] = uint16(b64Alphabet[i>>6]) | uint16(b64Alphabet[i&63])<<8
	}
	for i := range t.dec {
		t.dec[i] = 0xff
	}
	for i := 0; i < 64; i++ {
		t.dec[b64Alphabet[i]] = byte(i)
	}
	for i := range t.dec2 {
		a, b := t.dec[i&0xff], t.dec[i>>8]
		if a|b == 0xff {
			t.dec2[i] = 0x8000
		} else {
			t.dec2[i] = uint16(a)<<6 | uint16(b)
		}
	}
	return t
}()

// lineOut is the size of one full output line: 76 characters, a space, the
// parity digit and LF.
const lineOut = B64Width + 3

// foldParity turns the XOR of a line's characters, accumulated over
// 64-bit words, into the parity digit.
func foldParity(x uint64) byte {
	x ^= x >> 32
	x ^= x >> 16
	x ^= x >> 8
	return "0123456789abcdef"[x&0xf]
}

// appendLines appends raw as base64 lines with parity nibbles; raw's
// length must be a multiple of 57 unless it holds the chunk's tail.
func appendLines(dst []byte, raw []byte) []byte {
	full := len(raw) / rawPerLine
	need := len(dst) + int(numLines(int64(len(raw))))*lineOut
	if cap(dst) < need {
		nd := make([]byte, len(dst), need)
		copy(nd, dst)
		dst = nd
	}
	at := len(dst)
	dst = dst[:at+full*lineOut]
	encodeFullLines(dst[at:], raw[:full*rawPerLine])
	if rest := raw[full*rawPerLine:]; len(rest) > 0 {
		n := base64.StdEncoding.EncodedLen(len(rest))
		at := len(dst)
		dst = dst[:at+n+3]
		base64.StdEncoding.Encode(dst[at:at+n], rest)
		dst[at+n] = ' '
		dst[at+n+1] = parityNibble(dst[at : at+n])
		dst[at+n+2] = '\n'
	}
	return dst
}

// encodeFullLines encodes raw (a multiple of 57 bytes) into out, which holds
// exactly len(raw)/57 lines of lineOut bytes.
func encodeFullLines(out, raw []byte) {
	enc := &b64tab.enc
	// enc8 turns the top 48 bits of v into 8 characters (first in the low
	// byte).
	enc8 := func(v uint64) uint64 {
		return uint64(enc[(v>>52)&0xfff]) | uint64(enc[(v>>40)&0xfff])<<16 |
			uint64(enc[(v>>28)&0xfff])<<32 | uint64(enc[(v>>16)&0xfff])<<48
	}
	for len(raw) >= rawPerLine && len(out) >= lineOut {
		r := raw[:rawPerLine:rawPerLine]
		o := out[:lineOut:lineOut]
		// 9 groups of 6 raw bytes (each read as 8) -> 8 characters each.
		w0 := enc8(binary.BigEndian.Uint64(r[0:]))
		w1 := enc8(binary.BigEndian.Uint64(r[6:]))
		w2 := enc8(binary.BigEndian.Uint64(r[12:]))
		binary.LittleEndian.PutUint64(o[0:], w0)
		binary.LittleEndian.PutUint64(o[8:], w1)
		binary.LittleEndian.PutUint64(o[16:], w2)
		w3 := enc8(binary.BigEndian.Uint64(r[18:]))
		w4 := enc8(binary.BigEndian.Uint64(r[24:]))
		w5 := enc8(binary.BigEndian.Uint64(r[30:]))
		binary.LittleEndian.PutUint64(o[24:], w3)
		binary.LittleEndian.PutUint64(o[32:], w4)
		binary.LittleEndian.PutUint64(o[40:], w5)
		w6 := enc8(binary.BigEndian.Uint64(r[36:]))
		w7 := enc8(binary.BigEndian.Uint64(r[42:]))
		w8 := enc8(binary.BigEndian.Uint64(r[48:]))
		binary.LittleEndian.PutUint64(o[48:], w6)
		binary.LittleEndian.PutUint64(o[56:], w7)
		binary.LittleEndian.PutUint64(o[64:], w8)
		// The last 3 raw bytes -> 4 characters.
		v := uint32(r[54])<<16 | uint32(r[55])<<8 | uint32(r[56])
		t := uint32(enc[v>>12]) | uint32(enc[v&0xfff])<<16
		binary.LittleEndian.PutUint32(o[72:], t)
		o[76] = ' '
		o[77] = foldParity(w0 ^ w1 ^ w2 ^ w3 ^ w4 ^ w5 ^ w6 ^ w7 ^ w8 ^ uint64(t))
		o[78] = '\n'
		raw = raw[rawPerLine:]
		out = out[lineOut:]
	}
}

// decodeFullLine decodes one 76-character line into the 57 bytes of dst
// and returns the line's parity digit. ok is false when a character is
// not in the standard alphabet (the caller then reports the error through
// encoding/base64).
func decodeFullLine(dst []byte, line []byte) (par byte, ok bool) {
	dec2 := &b64tab.dec2
	d := dst[:rawPerLine:rawPerLine]
	l := line[:B64Width:B64Width]
	// dec8 turns 8 characters (first in the low byte) into 48 bits at the
	// top of the result; bad collects the invalid-pair flags.
	var bad uint16
	dec8 := func(c uint64) uint64 {
		a0, a1, a2, a3 := dec2[uint16(c)], dec2[uint16(c>>16)], dec2[uint16(c>>32)], dec2[uint16(c>>48)]
		bad |= a0 | a1 | a2 | a3
		return uint64(a0)<<52 | uint64(a1)<<40 | uint64(a2)<<28 | uint64(a3)<<16
	}
	c0 := binary.LittleEndian.Uint64(l[0:])
	c1 := binary.LittleEndian.Uint64(l[8:])
	c2 := binary.LittleEndian.Uint64(l[16:])
	binary.BigEndian.PutUint64(d[0:], dec8(c0))
	binary.BigEndian.PutUint64(d[6:], dec8(c1))
	binary.BigEndian.PutUint64(d[12:], dec8(c2))
	c3 := binary.LittleEndian.Uint64(l[24:])
	c4 := binary.LittleEndian.Uint64(l[32:])
	c5 := binary.LittleEndian.Uint64(l[40:])
	binary.BigEndian.PutUint64(d[18:], dec8(c3))
	binary.BigEndian.PutUint64(d[24:], dec8(c4))
	binary.BigEndian.PutUint64(d[30:], dec8(c5))
	c6 := binary.LittleEndian.Uint64(l[48:])
	c7 := binary.LittleEndian.Uint64(l[56:])
	c8 := binary.LittleEndian.Uint64(l[64:])
	binary.BigEndian.PutUint64(d[36:], dec8(c6))
	binary.BigEndian.PutUint64(d[42:], dec8(c7))
	binary.BigEndian.PutUint64(d[48:], dec8(c8))
	c := binary.LittleEndian.Uint32(l[72:])
	a0, a1 := dec2[uint16(c)], dec2[uint16(c>>16)]
	bad |= a0 | a1
	v := uint32(a0)<<12 | uint32(a1)
	d[54], d[55], d[56] = byte(v>>16), byte(v>>8), byte(v)
	x := c0 ^ c1 ^ c2 ^ c3 ^ c4 ^ c5 ^ c6 ^ c7 ^ c8 ^ uint64(c)
	return foldParity(x), bad&0x8000 == 0
}
