package wtxt

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// TestEncodeCountsNonFinite: Result.Arrays carries each float array's
// NaN and ±Inf counts (snapshot.CountNonFinite of its bytes) whichever
// way the encoder reads and hashes it — memory or ReadAt sources, with
// or without an HMAC key (hashShaMAC), to a writer, to a file, streamed,
// or as a skeleton — and 0 for other types. (The counts are not written:
// the golden and vector tests hold the WTXT bytes.)
func TestEncodeCountsNonFinite(t *testing.T) {
	nanF32 := math.Float32bits(float32(math.NaN()))
	mk := func(read bool) *snapshot.Snapshot {
		w := randArray(1, "w", snapshot.F32, 5, blockSize/8+3) // 2.5 blocks: counts span blocks
		b, _ := snapshot.BytesOf(w.Data)
		for i := range b {
			if i%4 == 3 {
				b[i] &= 0x3f // finite: the exponent's top bit cleared
			}
		}
		for _, i := range []int{0, blockSize/4 - 1, blockSize / 4, len(b)/4 - 1} { // block edges, last
			binary.LittleEndian.PutUint32(b[4*i:], nanF32)
		}
		binary.LittleEndian.PutUint32(b[4*7:], math.Float32bits(float32(math.Inf(-1))))
		h := randArray(2, "h", snapshot.BF16, 64)
		hb, _ := snapshot.BytesOf(h.Data)
		for i := range hb {
			if i%2 == 1 {
				hb[i] &= 0x3f
			}
		}
		binary.LittleEndian.PutUint16(hb[6:], 0x7f80) // +Inf
		c := randArray(3, "c", snapshot.C64, 8)
		cb, _ := snapshot.BytesOf(c.Data)
		for i := range cb {
			if i%4 == 3 {
				cb[i] &= 0x3f
			}
		}
		binary.LittleEndian.PutUint32(cb[12:], nanF32) // element 1's imaginary part
		i32 := &snapshot.Array{Name: "n", DType: snapshot.I32, Shape: []int64{4}, Data: snapshot.Bytes(bytes.Repeat([]byte{0, 0, 0xc0, 0x7f}, 4))}
		arrs := []*snapshot.Array{w, h, c, i32}
		if read {
			for _, a := range arrs {
				b, _ := snapshot.BytesOf(a.Data)
				a.Data = readerOnly{snapshot.Bytes(b)}
			}
		}
		return &snapshot.Snapshot{Meta: testMeta(2), Arrays: arrs}
	}
	want := map[string][2]int64{"w": {4, 1}, "h": {0, 1}, "c": {1, 0}, "n": {0, 0}}
	check := func(name string, res *Result) {
		t.Helper()
		if len(res.Arrays) != len(want) {
			t.Fatalf("%s: %d arrays", name, len(res.Arrays))
		}
		for _, a := range res.Arrays {
			if w := want[a.Name]; a.NaN != w[0] || a.Inf != w[1] {
				t.Errorf("%s: array %s: %d NaN, %d Inf, want %d, %d", name, a.Name, a.NaN, a.Inf, w[0], w[1])
			}
		}
	}
	dir := t.TempDir()
	// Under the race detector each case takes one of the three outputs
	// (writer, file, skeleton) in turn; each output still meets memory and
	// ReadAt sources.
	turn := 0
	takes := func() [3]bool {
		turn++
		if !raceEnabled {
			return [3]bool{true, true, true}
		}
		var w [3]bool
		w[turn%3] = true
		return w
	}
	for _, read := range []bool{false, true} {
		for _, opts := range []EncodeOptions{{SignKey: testKey(1), HMACKey: []byte("key")}, {SignKey: testKey(1)}, {Stream: true, Workers: 1}} {
			name := func(how string) string {
				return how + map[bool]string{false: " (memory)", true: " (ReadAt)"}[read] + map[bool]string{false: "", true: " (hmac)"}[opts.HMACKey != nil]
			}
			take := takes()
			if take[0] {
				_, res := encodeBytes(t, mk(read), opts)
				check(name("writer"), res)
			}
			if take[1] {
				f, err := os.Create(filepath.Join(dir, "x.wtxt"))
				if err != nil {
					t.Fatal(err)
				}
				res, err := Encode(context.Background(), f, mk(read), opts)
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				check(name("file"), res)
			}
			if take[2] {
				res, _, _, err := EncodeSkeleton(context.Background(), io.Discard, mk(read), opts, SplitOptions{}, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				check(name("skeleton"), res)
			}
		}
	}
}
