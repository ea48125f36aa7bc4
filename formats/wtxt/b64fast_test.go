package wtxt

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"testing"
)

// refLines is the straightforward definition of a chunk's base64 lines.
func refLines(raw []byte) []byte {
	var out []byte
	for i := 0; i < len(raw); i += rawPerLine {
		s := base64.StdEncoding.EncodeToString(raw[i:min(i+rawPerLine, len(raw))])
		out = append(out, s...)
		out = append(out, ' ', parityNibble([]byte(s)), '\n')
	}
	return out
}

func TestAppendLinesMatchesBase64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 56, 57, 58, 113, 114, 115, 57 * 40, 57*40 + 7, 65536, 4096} {
		raw := make([]byte, n)
		for i := range raw {
			raw[i] = byte(r.Uint32())
		}
		if n == 4096 { // all byte values at every position
			for i := range raw {
				raw[i] = byte(i * 7)
			}
		}
		prefix := []byte("ch x\n")
		got := appendLines(append([]byte(nil), prefix...), raw)
		want := append(append([]byte(nil), prefix...), refLines(raw)...)
		if !bytes.Equal(got, want) {
			t.Fatalf("len %d: appendLines differs from encoding/base64", n)
		}
	}
}

func TestDecodeFullLine(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	raw := make([]byte, rawPerLine)
	out := make([]byte, rawPerLine)
	for range 2000 {
		for i := range raw {
			raw[i] = byte(r.Uint32())
		}
		line := base64.StdEncoding.EncodeToString(raw)
		p, ok := decodeFullLine(out, []byte(line))
		if !ok || !bytes.Equal(out, raw) || p != parityNibble([]byte(line)) {
			t.Fatalf("decodeFullLine(%q) = %x %c %v", line, out, p, ok)
		}
		// Any byte outside the alphabet must be rejected, at any position.
		bad := []byte(line)
		pos := r.IntN(len(bad))
		for _, c := range []byte{'=', ' ', '-', '_', 0, 0x80, 0xff, '\n', '.'} {
			bad[pos] = c
			if _, ok := decodeFullLine(out, bad); ok {
				t.Fatalf("decodeFullLine accepted %q at %d", c, pos)
			}
		}
	}
}
