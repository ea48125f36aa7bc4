package rs

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"testing"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustNew(t *testing.T, nsym int) *Codec {
	t.Helper()
	c, err := New(nsym)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Vectors from spec/FORMATS-notes.md section 2.7 and fixtures/fold/EXPECTED.md
// (computed with reedsolo v1.7.0).
func TestParityVectors(t *testing.T) {
	seq := make([]byte, 223)
	for i := range seq {
		seq[i] = byte(i)
	}
	cases := []struct {
		nsym   int
		msg    []byte
		parity string
	}{
		{16, []byte("hello world"), "6740a6899b2716f16ca0a50be8f82120"},
		{32, []byte("123456789"), "4efff55efc5f5351284fef58773aaabfda9ee07e544dd23587cd189fc338daca"},
		{32, seq, "41841183b11fdb537421939696cda70e1db5c86684af222564b89cc6069f172e"},
		{64, []byte("123456789"), "7fcf763ee84ca6522745f464b364ff12a4511441cda731c66b408e24c8b148e25df56d3b0ec95b54cc00018baa11c9c084ebe3187b1d9938cdcdff0cfd6a26ed"},
		{32, []byte(`{"note":"single RS block"}`), "a1891121b0408a74be62665663ed02db0e82db74a86957aa8b436d54c221e31d"},
	}
	for _, tc := range cases {
		c := mustNew(t, tc.nsym)
		p := make([]byte, tc.nsym)
		if err := c.Parity(p, tc.msg); err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(p); got != tc.parity {
			t.Errorf("nsym %d msg %q: parity %s, want %s", tc.nsym, tc.msg, got, tc.parity)
		}
		if !c.Check(tc.msg, p) {
			t.Errorf("nsym %d: Check rejects its own codeword", tc.nsym)
		}
	}
}

func TestGenerator32(t *testing.T) {
	want := "01744034ae367e10c2a221219db0c5e10c3b37fde4942fb3b9188afd148e37ac58"
	if got := hex.EncodeToString(mustNew(t, 32).Generator()); got != want {
		t.Fatalf("generator %s, want %s", got, want)
	}
}

func TestNewRange(t *testing.T) {
	for _, n := range []int{0, -1, 255, 1000} {
		if _, err := New(n); err == nil {
			t.Errorf("New(%d) accepted", n)
		}
	}
	c := mustNew(t, 16)
	if err := c.Parity(make([]byte, 16), make([]byte, 240)); err == nil {
		t.Error("Parity accepted a 240-byte message with nsym 16")
	}
	if err := c.Parity(make([]byte, 15), []byte("x")); err == nil {
		t.Error("Parity accepted a short parity buffer")
	}
	if _, err := c.Correct(make([]byte, 10), make([]byte, 3)); err == nil {
		t.Error("Correct accepted a short parity")
	}
}

// TestCorrectRandom injects up to nsym/2 errors at random positions of
// random full and shortened codewords and checks exact correction; then it
// injects more than nsym/2 and checks that Correct either reports
// ErrTooManyErrors (leaving its input unchanged) or, in a rare
// miscorrection, returns a valid codeword other than the original (which
// FOLD's CRC-32C/SHA-256 check then rejects) — never the original, and
// never a non-codeword.
func TestCorrectRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	iters := 300
	if testing.Short() {
		iters = 80
	}
	for _, nsym := range []int{2, 16, 32, 64} {
		c := mustNew(t, nsym)
		for it := 0; it < iters; it++ {
			k := 1 + rng.IntN(c.DataLen())
			if it%4 == 0 {
				k = c.DataLen()
			}
			msg := make([]byte, k)
			for i := range msg {
				msg[i] = byte(rng.UintN(256))
			}
			par := make([]byte, nsym)
			if err := c.Parity(par, msg); err != nil {
				t.Fatal(err)
			}
			n := k + nsym
			nerr := rng.IntN(nsym/2 + 1)
			m2, p2 := append([]byte(nil), msg...), append([]byte(nil), par...)
			for _, pos := range rng.Perm(n)[:nerr] {
				flip := byte(1 + rng.UintN(255))
				if pos < k {
					m2[pos] ^= flip
				} else {
					p2[pos-k] ^= flip
				}
			}
			fixed, err := c.Correct(m2, p2)
			if err != nil {
				t.Fatalf("nsym %d k %d: %d errors not corrected: %v", nsym, k, nerr, err)
			}
			if fixed != nerr || !bytes.Equal(m2, msg) || !bytes.Equal(p2, par) {
				t.Fatalf("nsym %d k %d: %d errors, fixed %d, codeword restored %v", nsym, k, nerr, fixed, bytes.Equal(m2, msg))
			}

			// Beyond capacity.
			over := nsym/2 + 1 + rng.IntN(nsym/2+1)
			if over > n {
				over = n
			}
			m3, p3 := append([]byte(nil), msg...), append([]byte(nil), par...)
			for _, pos := range rng.Perm(n)[:over] {
				flip := byte(1 + rng.UintN(255))
				if pos < k {
					m3[pos] ^= flip
				} else {
					p3[pos-k] ^= flip
				}
			}
			b3m, b3p := append([]byte(nil), m3...), append([]byte(nil), p3...)
			_, err = c.Correct(m3, p3)
			switch {
			case err != nil:
				if !errors.Is(err, ErrTooManyErrors) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				if !bytes.Equal(m3, b3m) || !bytes.Equal(p3, b3p) {
					t.Fatal("failed Correct modified its input")
				}
			case bytes.Equal(m3, msg):
				t.Fatalf("nsym %d: %d errors (> capacity) reported corrected to the original", nsym, over)
			default:
				// Miscorrection onto another codeword: must at least be valid.
				if !c.Check(m3, p3) {
					t.Fatal("Correct returned a non-codeword without error")
				}
			}
		}
	}
}

func TestDetectsMostOverCapacity(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	c := mustNew(t, 32)
	detected, total := 0, 200
	for it := 0; it < total; it++ {
		msg := make([]byte, 223)
		for i := range msg {
			msg[i] = byte(rng.UintN(256))
		}
		par := make([]byte, 32)
		_ = c.Parity(par, msg)
		for _, pos := range rng.Perm(223)[:17] {
			msg[pos] ^= byte(1 + rng.UintN(255))
		}
		if _, err := c.Correct(msg, par); err != nil {
			detected++
		}
	}
	if detected < total*95/100 {
		t.Fatalf("only %d of %d over-capacity codewords detected", detected, total)
	}
}

func FuzzCorrect(f *testing.F) {
	f.Add([]byte("hello world"), uint8(16), []byte{3, 7})
	f.Fuzz(func(t *testing.T, msg []byte, nsym uint8, flips []byte) {
		n := int(nsym%64) + 2
		c, err := New(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(msg) > c.DataLen() {
			msg = msg[:c.DataLen()]
		}
		par := make([]byte, n)
		if err := c.Parity(par, msg); err != nil {
			t.Fatal(err)
		}
		m2, p2 := append([]byte(nil), msg...), append([]byte(nil), par...)
		total := len(msg) + n
		for i := 0; i+1 < len(flips); i += 2 {
			pos := int(flips[i]) % total
			if pos < len(m2) {
				m2[pos] ^= flips[i+1]
			} else {
				p2[pos-len(m2)] ^= flips[i+1]
			}
		}
		if _, err := c.Correct(m2, p2); err == nil && !c.Check(m2, p2) {
			t.Fatal("Correct returned a non-codeword without error")
		}
	})
}
