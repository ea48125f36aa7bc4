package snapshot

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAnyNonFinite: the bit test agrees with math.IsNaN/IsInf on f64 and
// f32 edge values, and finds NaN/Inf in f16 and bf16 patterns.
func TestAnyNonFinite(t *testing.T) {
	f64 := []float64{0, -0, 1, -1, math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, math.Inf(1), math.Inf(-1), math.NaN()}
	for _, v := range f64 {
		b := binary.LittleEndian.AppendUint64(make([]byte, 8), math.Float64bits(v)) // a finite 0 first
		want := math.IsNaN(v) || math.IsInf(v, 0)
		if got := AnyNonFinite(F64, b); got != want {
			t.Errorf("f64 %v: %v, want %v", v, got, want)
		}
		b32 := binary.LittleEndian.AppendUint32(make([]byte, 4), math.Float32bits(float32(v)))
		v32 := float64(float32(v))
		if got, want := AnyNonFinite(F32, b32), math.IsNaN(v32) || math.IsInf(v32, 0); got != want {
			t.Errorf("f32 %v: %v, want %v", v32, got, want)
		}
	}
	for _, c := range []struct {
		d    DType
		bits uint16
		want bool
	}{
		{F16, 0x3c00, false}, {F16, 0x7bff, false}, {F16, 0x7c00, true}, {F16, 0xfc00, true}, {F16, 0x7e00, true},
		{BF16, 0x3f80, false}, {BF16, 0x7f7f, false}, {BF16, 0x7f80, true}, {BF16, 0xff80, true}, {BF16, 0x7fc0, true},
	} {
		b := binary.LittleEndian.AppendUint16([]byte{0, 0}, c.bits)
		if got := AnyNonFinite(c.d, b); got != c.want {
			t.Errorf("%v %#04x: %v, want %v", c.d, c.bits, got, c.want)
		}
	}
	if AnyNonFinite(I32, []byte{0xff, 0xff, 0xff, 0x7f}) {
		t.Error("an integer type has no NaN")
	}
}

// refNonFinite classifies each element of b by decoding it (ElementFloat,
// ElementComplex) and math.IsNaN/IsInf: the reference CountNonFinite's
// bit tests must agree with.
func refNonFinite(d DType, b []byte) (nan, inf int64) {
	sz := d.Size()
	for i := 0; i+sz <= len(b); i += sz {
		re, im := ElementComplex(d, b[i:])
		switch {
		case math.IsNaN(re) || math.IsNaN(im):
			nan++
		case math.IsInf(re, 0) || math.IsInf(im, 0):
			inf++
		}
	}
	return nan, inf
}

// TestCountNonFinite: for every float dtype, on random bytes, on every
// byte pattern (fp8) and on buffers dense with special values, of every
// length up to a few words (partial words and a partial element), the
// counts agree with decoding each element, with AnyNonFinite, and with
// Diff against zeros (what chunkdiff's count compared with before).
func TestCountNonFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	specials := map[DType][]uint64{
		F64:  {0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000, 0x7ff0000000000001, 0xffffffffffffffff, 0x7fefffffffffffff, 0},
		F32:  {0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffffffff, 0x7f7fffff, 0x80000000},
		F16:  {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xffff, 0x7bff, 0x8000},
		BF16: {0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffff, 0x7f7f, 0x8000},
	}
	specials[C64], specials[C128] = specials[F32], specials[F64]
	for _, d := range AllDTypes() {
		sz := d.Size()
		var bufs [][]byte
		for n := 0; n <= 5*8+3; n++ { // random bytes: NaN/Inf are rare but present in small types
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			bufs = append(bufs, b)
		}
		if d.IsFP8() { // every pattern, in every lane position
			for shift := range 8 {
				b := make([]byte, 256+shift)
				for i := range 256 {
					b[shift+i] = byte(i)
				}
				bufs = append(bufs, b)
			}
		}
		if sp := specials[d]; sp != nil { // mostly special values, some finite
			part := sz
			if d.IsComplex() {
				part = sz / 2
			}
			for range 50 {
				b := make([]byte, part*(1+rng.IntN(40)))
				for i := 0; i < len(b); i += part {
					v := sp[rng.IntN(len(sp))]
					if rng.IntN(3) == 0 {
						v = rng.Uint64()
					}
					for k := range part {
						b[i+k] = byte(v >> (8 * k))
					}
				}
				bufs = append(bufs, b)
			}
		}
		for _, b := range bufs {
			nan, inf := CountNonFinite(d, b)
			if !d.IsFloat() {
				if nan != 0 || inf != 0 || AnyNonFinite(d, b) {
					t.Fatalf("%v: %d NaN, %d Inf in a non-float type", d, nan, inf)
				}
				continue
			}
			wn, wi := refNonFinite(d, b)
			if nan != wn || inf != wi {
				t.Fatalf("%v % x: %d NaN, %d Inf, want %d, %d", d, b, nan, inf, wn, wi)
			}
			if any := AnyNonFinite(d, b); any != (wn+wi > 0) {
				t.Fatalf("%v % x: AnyNonFinite %v with %d NaN, %d Inf", d, b, any, wn, wi)
			}
			whole := b[:len(b)/sz*sz]
			if len(whole) == 0 {
				continue
			}
			shape := []int64{int64(len(whole) / sz)}
			dd, err := Diff(context.Background(),
				&Snapshot{Arrays: []*Array{{Name: "a", DType: d, Shape: shape, Data: Bytes(make([]byte, len(whole)))}}},
				&Snapshot{Arrays: []*Array{{Name: "a", DType: d, Shape: shape, Data: Bytes(whole)}}}, DiffOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if dd[0].NewNaN != nan || dd[0].NewInf != inf {
				t.Fatalf("%v % x: %d NaN, %d Inf, Diff against zeros says %d, %d", d, b, nan, inf, dd[0].NewNaN, dd[0].NewInf)
			}
		}
	}
}

// BenchmarkCountNonFinite: the count over 64 KiB of finite f32 (the
// encoder's piece; the usual case) and of f32 full of NaN.
func BenchmarkCountNonFinite(b *testing.B) {
	buf := make([]byte, 64<<10)
	for i := 0; i < len(buf); i += 4 {
		binary.LittleEndian.PutUint32(buf[i:], math.Float32bits(float32(i)*1e-3))
	}
	nanBuf := bytes.Repeat([]byte{0, 0, 0xc0, 0x7f}, len(buf)/4)
	for _, c := range []struct {
		name string
		b    []byte
	}{{"finite", buf}, {"nan", nanBuf}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.b)))
			for range b.N {
				CountNonFinite(F32, c.b)
			}
		})
	}
}
