package wtxt

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// smallSigned is a small signed, HMAC'd WTXT with multi-line, multi-chunk
// arrays.
func smallSigned(t testing.TB) ([]byte, VerifyOptions) {
	s := &snapshot.Snapshot{Meta: testMeta(5), Arrays: []*snapshot.Array{
		randArray(11, "W", snapshot.F32, 6, 8), // 3 chunks of 2 rows = 64 B: 2 lines each
		randArray(12, "b", snapshot.U8, 3),
	}}
	key := testKey(9)
	hk := []byte("0123456789abcdef0123456789abcdef")
	data, _ := encodeBytes(t, s, EncodeOptions{SignKey: key, HMACKey: hk, RowsPerChunk: 2, PrevMerkle: [32]byte{7}})
	prev := [32]byte{7}
	return data, VerifyOptions{TrustedKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}, HMACKey: hk, RequireSignature: true, PrevMerkle: &prev}
}

// lineOf returns the 1-based line number holding byte offset off, and the
// numbers of the enclosing ch and arr lines (0 if none).
func lineOf(data []byte, off int) (line, ch, arr int) {
	lines := bytes.Split(data[:off], []byte("\n"))
	line = len(lines)
	for i, l := range lines {
		switch {
		case bytes.HasPrefix(l, []byte("arr ")):
			arr, ch = i+1, 0
		case bytes.HasPrefix(l, []byte("ch ")):
			ch = i + 1
		}
	}
	return line, ch, arr
}

func located(rep *Report, want ...int) bool {
	for _, f := range rep.Failures {
		for _, w := range want {
			if w > 0 && f.Line == w {
				return true
			}
		}
	}
	return false
}

// TestTamperEveryBit flips every bit of a small signed file: each flip is
// detected, and some failure names the flipped line (or the line a split
// or merge made of it, or the enclosing ch/arr line, or for header lines a
// header line).
func TestTamperEveryBit(t *testing.T) {
	data, opts := smallSigned(t)
	if _, err := Verify(context.Background(), bytes.NewReader(data), opts); err != nil {
		t.Fatalf("pristine file fails: %v", err)
	}
	t.Logf("%d bytes, %d flips", len(data), 8*len(data))
	buf := make([]byte, len(data))
	for off := range data {
		line, ch, arr := lineOf(data, off)
		for bit := range 8 {
			if raceEnabled && bit != off%8 {
				continue // every offset still gets a flip, each bit position in turn: 8x fewer verifies
			}
			copy(buf, data)
			buf[off] ^= 1 << bit
			rep, err := Verify(context.Background(), bytes.NewReader(buf), opts)
			if err == nil {
				t.Fatalf("flip of bit %d at offset %d (line %d) not detected", bit, off, line)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("flip at %d: error is not *wtxt.Error: %v", off, err)
			}
			want := []int{line, line + 1, ch, arr}
			if line <= 5 {
				want = append(want, 1, 2, 3, 4, 5)
			}
			if !located(rep, want...) {
				t.Fatalf("flip of bit %d at offset %d (line %d): not located: %v", bit, off, line, rep.Failures)
			}
		}
	}
}

func TestTamperLines(t *testing.T) {
	data, opts := smallSigned(t)
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines = lines[:len(lines)-1] // trailing empty
	check := func(what string, b []byte, want ...int) {
		t.Helper()
		rep, err := Verify(context.Background(), bytes.NewReader(b), opts)
		if err == nil {
			t.Fatalf("%s: not detected", what)
		}
		if !located(rep, want...) {
			t.Fatalf("%s: not located at %v: %v", what, want, rep.Failures)
		}
	}
	join := func(ls [][]byte) []byte { return bytes.Join(ls, nil) }
	for i := range lines {
		// Delete line i.
		del := append(append([][]byte{}, lines[:i]...), lines[i+1:]...)
		check("delete line", join(del), i, i+1, i+2, 1, 2, 3, 4, 5)
		// Swap lines i and i+1 when they differ.
		if i+1 < len(lines) && !bytes.Equal(lines[i], lines[i+1]) {
			sw := append([][]byte{}, lines...)
			sw[i], sw[i+1] = sw[i+1], sw[i]
			_, ch, arr := lineOf(data, len(join(lines[:i])))
			check("swap lines", join(sw), i, i+1, i+2, ch, arr, 4, 5)
		}
		// Re-wrap a long line: cut it in two.
		if l := lines[i]; len(l) > 40 {
			rw := append([][]byte{}, lines[:i]...)
			rw = append(rw, append(append([]byte{}, l[:30]...), '\n'), l[30:])
			rw = append(rw, lines[i+1:]...)
			_, ch, arr := lineOf(data, len(join(lines[:i])))
			check("re-wrap", join(rw), i+1, i+2, ch, arr, 4, 5)
		}
	}
	// Trailing garbage, CRLF, missing final LF.
	check("after endwtxt", append(append([]byte{}, data...), "x\n"...), len(lines)+1)
	check("CRLF", bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n")), 1)
	check("no final LF", data[:len(data)-1], len(lines))
}
