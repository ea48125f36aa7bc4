// Package rs is a classic systematic Reed–Solomon codec over GF(2^8) that is
// byte-compatible with the Python reedsolo codec (tomerfiliba-org/reedsolomon
// v1.7.0) in its default configuration, which FOLD uses for its rs(N) ECC:
//
//   - field GF(2^8) with primitive polynomial 0x11d, generator α = 2;
//   - first consecutive root 0: g(x) = ∏_{i=0}^{nsym−1} (x − α^i);
//   - parity = M(x)·x^nsym mod g(x), where the first message byte is the
//     highest-degree coefficient and parity bytes are written highest degree
//     first; a codeword is message ‖ parity, at most 255 bytes. Shorter
//     messages form a shortened code (leading zero coefficients omitted).
//
// Decoding locates and corrects up to nsym/2 byte errors per codeword with
// syndromes, Berlekamp–Massey, Chien search and Forney's algorithm; more
// errors are detected (ErrTooManyErrors) in all but rare miscorrection
// cases, which callers catch with an independent checksum (FOLD checks
// CRC-32C and SHA-256 after correction).
//
// A Codec is immutable after New and safe for concurrent use.
package rs

import (
	"crypto/subtle"
	"errors"
	"fmt"
)

// ErrTooManyErrors is returned by Correct when a codeword holds more errors
// than the code can locate (more than nsym/2, or an inconsistent locator).
var ErrTooManyErrors = errors.New("rs: too many errors to correct")

// field holds the GF(2^8) tables; exp is doubled so that
// exp[log a + log b] needs no modulo.
type field struct {
	exp [512]byte
	log [256]byte
}

// gf is computed once by a pure function and only read afterwards.
var gf = newField()

func newField() *field {
	f := &field{}
	x := 1
	for i := 0; i < 255; i++ {
		f.exp[i] = byte(x)
		f.log[x] = byte(i)
		x <<= 1
		if x&0x100 != 0 {
			x ^= 0x11d
		}
	}
	for i := 255; i < 512; i++ {
		f.exp[i] = f.exp[i-255]
	}
	return f
}

func gfMul(a, b byte) byte {
	if a == 0 || b == 0 {
		return 0
	}
	return gf.exp[int(gf.log[a])+int(gf.log[b])]
}

func gfDiv(a, b byte) byte {
	// b != 0 is guaranteed by callers.
	if a == 0 {
		return 0
	}
	return gf.exp[(int(gf.log[a])+255-int(gf.log[b]))%255]
}

// gfPow returns α^e for any integer e.
func gfPow(e int) byte {
	e %= 255
	if e < 0 {
		e += 255
	}
	return gf.exp[e]
}

// Codec encodes and corrects codewords with a fixed number of parity bytes.
type Codec struct {
	nsym int
	gen  []byte // generator polynomial, highest degree first, gen[0] == 1
	// rows[v] = v · gen[1:]: the multiple of the generator subtracted
	// when the leading remainder coefficient is v, so each message byte of
	// the division costs one nsym-byte XOR.
	rows [256][]byte
}

// MaxCodeword is the maximum codeword length (message + parity) in bytes.
const MaxCodeword = 255

// New returns a codec with nsym parity bytes per codeword, 1 ≤ nsym ≤ 254.
func New(nsym int) (*Codec, error) {
	if nsym < 1 || nsym >= MaxCodeword {
		return nil, fmt.Errorf("rs: nsym %d out of range [1, 254]", nsym)
	}
	gen := []byte{1}
	for i := 0; i < nsym; i++ {
		// gen *= (x - α^i); subtraction is XOR in GF(2^8).
		root := gf.exp[i]
		next := make([]byte, len(gen)+1)
		for j, c := range gen {
			next[j] ^= c
			next[j+1] ^= gfMul(c, root)
		}
		gen = next
	}
	c := &Codec{nsym: nsym, gen: gen}
	table := make([]byte, 256*nsym)
	for v := 0; v < 256; v++ {
		row := table[v*nsym : (v+1)*nsym : (v+1)*nsym]
		for j := range row {
			row[j] = gfMul(gen[j+1], byte(v))
		}
		c.rows[v] = row
	}
	return c, nil
}

// NSym returns the number of parity bytes per codeword.
func (c *Codec) NSym() int { return c.nsym }

// DataLen returns the maximum message length per codeword, 255 − nsym.
func (c *Codec) DataLen() int { return MaxCodeword - c.nsym }

// Generator returns a copy of the generator polynomial, highest degree first.
func (c *Codec) Generator() []byte { return append([]byte(nil), c.gen...) }

// Parity writes the nsym parity bytes of msg into parity. It fails when msg
// is longer than DataLen or parity is not nsym bytes long.
func (c *Codec) Parity(parity, msg []byte) error {
	if len(msg) > c.DataLen() {
		return fmt.Errorf("rs: message of %d bytes exceeds %d for nsym %d", len(msg), c.DataLen(), c.nsym)
	}
	if len(parity) != c.nsym {
		return fmt.Errorf("rs: parity buffer of %d bytes, need %d", len(parity), c.nsym)
	}
	// Synthetic division of msg·x^nsym by the monic generator on a
	// scratch codeword; the remainder is the last nsym bytes.
	var buf [MaxCodeword]byte
	n := c.nsym
	w := buf[:len(msg)+n]
	copy(w, msg)
	for i := range msg {
		if v := w[i]; v != 0 {
			seg := w[i+1 : i+1+n]
			subtle.XORBytes(seg, seg, c.rows[v])
		}
	}
	copy(parity, w[len(msg):])
	return nil
}

// Check reports whether msg ‖ parity is a valid codeword (all syndromes
// zero).
func (c *Codec) Check(msg, parity []byte) bool {
	if len(msg) > c.DataLen() || len(parity) != c.nsym {
		return false
	}
	p := make([]byte, c.nsym)
	if err := c.Parity(p, msg); err != nil {
		return false
	}
	for i := range p {
		if p[i] != parity[i] {
			return false
		}
	}
	return true
}

// Correct locates and fixes errors in the codeword msg ‖ parity in place
// and returns how many bytes it changed (in msg or parity). It fails with
// an error wrapping ErrTooManyErrors when the errors cannot be located; msg
// and parity are then left unchanged.
func (c *Codec) Correct(msg, parity []byte) (int, error) {
	if len(msg) > c.DataLen() {
		return 0, fmt.Errorf("rs: message of %d bytes exceeds %d for nsym %d", len(msg), c.DataLen(), c.nsym)
	}
	if len(parity) != c.nsym {
		return 0, fmt.Errorf("rs: parity of %d bytes, need %d", len(parity), c.nsym)
	}
	n := len(msg) + len(parity)
	at := func(i int) byte {
		if i < len(msg) {
			return msg[i]
		}
		return parity[i-len(msg)]
	}
	// Syndromes S_i = C(α^i), lowest index first.
	synd := make([]byte, c.nsym)
	nonzero := false
	for i := 0; i < c.nsym; i++ {
		x := gf.exp[i]
		var y byte
		for k := 0; k < n; k++ {
			y = gfMul(y, x) ^ at(k)
		}
		synd[i] = y
		if y != 0 {
			nonzero = true
		}
	}
	if !nonzero {
		return 0, nil
	}
	// Berlekamp–Massey; polynomials lowest degree first.
	lambda := make([]byte, c.nsym+1)
	prev := make([]byte, c.nsym+1)
	lambda[0], prev[0] = 1, 1
	L, m := 0, 1
	b := byte(1)
	tmp := make([]byte, c.nsym+1)
	for r := 0; r < c.nsym; r++ {
		d := synd[r]
		for i := 1; i <= L; i++ {
			d ^= gfMul(lambda[i], synd[r-i])
		}
		if d == 0 {
			m++
			continue
		}
		coef := gfDiv(d, b)
		if 2*L <= r {
			copy(tmp, lambda)
			for i := 0; i+m <= c.nsym; i++ {
				lambda[i+m] ^= gfMul(coef, prev[i])
			}
			L = r + 1 - L
			copy(prev, tmp)
			b = d
			m = 1
		} else {
			for i := 0; i+m <= c.nsym; i++ {
				lambda[i+m] ^= gfMul(coef, prev[i])
			}
			m++
		}
	}
	if 2*L > c.nsym {
		return 0, fmt.Errorf("%w: locator degree %d exceeds %d", ErrTooManyErrors, L, c.nsym/2)
	}
	lambda = lambda[:L+1]
	// Chien search: position k (0 = first byte) has degree n-1-k; it is in
	// error when Λ(α^{-(n-1-k)}) = 0.
	var pos []int
	for k := 0; k < n; k++ {
		xinv := gfPow(-(n - 1 - k))
		var y byte
		for i := L; i >= 0; i-- {
			y = gfMul(y, xinv) ^ lambda[i]
		}
		if y == 0 {
			pos = append(pos, k)
		}
	}
	if len(pos) != L {
		return 0, fmt.Errorf("%w: locator of degree %d has %d roots in a %d-byte codeword", ErrTooManyErrors, L, len(pos), n)
	}
	// Error evaluator Ω(x) = S(x)Λ(x) mod x^nsym.
	omega := make([]byte, c.nsym)
	for i := 0; i < c.nsym; i++ {
		var v byte
		for j := 0; j <= L && j <= i; j++ {
			v ^= gfMul(lambda[j], synd[i-j])
		}
		omega[i] = v
	}
	// Forney (first consecutive root 0): e = X · Ω(X⁻¹) / Λ'(X⁻¹).
	mags := make([]byte, len(pos))
	for idx, k := range pos {
		deg := n - 1 - k
		x := gfPow(deg)
		xinv := gfPow(-deg)
		var om byte
		for i := c.nsym - 1; i >= 0; i-- {
			om = gfMul(om, xinv) ^ omega[i]
		}
		var der byte
		// Λ'(x) = Σ_{i odd} λ_i x^{i-1}.
		xinv2 := gfMul(xinv, xinv)
		pw := byte(1)
		for i := 1; i <= L; i += 2 {
			der ^= gfMul(lambda[i], pw)
			pw = gfMul(pw, xinv2)
		}
		if der == 0 {
			return 0, fmt.Errorf("%w: zero locator derivative at byte %d", ErrTooManyErrors, k)
		}
		mags[idx] = gfMul(x, gfDiv(om, der))
	}
	// Apply to copies, verify all syndromes vanish, then commit.
	fixedMsg := append([]byte(nil), msg...)
	fixedPar := append([]byte(nil), parity...)
	for idx, k := range pos {
		if k < len(msg) {
			fixedMsg[k] ^= mags[idx]
		} else {
			fixedPar[k-len(msg)] ^= mags[idx]
		}
	}
	if !c.Check(fixedMsg, fixedPar) {
		return 0, fmt.Errorf("%w: correction did not yield a codeword", ErrTooManyErrors)
	}
	copy(msg, fixedMsg)
	copy(parity, fixedPar)
	return len(pos), nil
}
