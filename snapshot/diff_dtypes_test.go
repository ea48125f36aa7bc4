package snapshot

import (
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"
)

// TestFP8Decoders: hand-computed values of each fp8 encoding, and E5M2 is
// exactly the top byte of an IEEE binary16.
func TestFP8Decoders(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		dt   DType
		bits byte
		want float64
	}{
		{F8E4M3, 0x00, 0}, {F8E4M3, 0x01, 0x1p-9}, {F8E4M3, 0x07, 7 * 0x1p-9}, {F8E4M3, 0x08, 0x1p-6},
		{F8E4M3, 0x38, 1}, {F8E4M3, 0x3c, 1.5}, {F8E4M3, 0x40, 2}, {F8E4M3, 0x78, 256}, {F8E4M3, 0x7e, 448},
		{F8E4M3, 0xfe, -448}, {F8E4M3, 0xb8, -1}, {F8E4M3, 0x7f, nan}, {F8E4M3, 0xff, nan},
		{F8E5M2, 0x00, 0}, {F8E5M2, 0x01, 0x1p-16}, {F8E5M2, 0x04, 0x1p-14}, {F8E5M2, 0x3c, 1}, {F8E5M2, 0x3e, 1.5},
		{F8E5M2, 0x41, 2.5}, {F8E5M2, 0x7b, 57344}, {F8E5M2, 0x7c, math.Inf(1)}, {F8E5M2, 0xfc, math.Inf(-1)},
		{F8E5M2, 0x7d, nan}, {F8E5M2, 0xff, nan}, {F8E5M2, 0xbc, -1},
		{F8E8M0, 0x7f, 1}, {F8E8M0, 0x80, 2}, {F8E8M0, 0x82, 8}, {F8E8M0, 0x7e, 0.5}, {F8E8M0, 0x00, 0x1p-127},
		{F8E8M0, 0xfe, 0x1p127}, {F8E8M0, 0xff, nan},
	} {
		if got := ElementFloat(c.dt, []byte{c.bits}); !same(got, c.want) {
			t.Errorf("%s 0x%02x = %v, want %v", c.dt, c.bits, got, c.want)
		}
	}
	for b := 0; b < 256; b++ {
		if got, want := F8E5M2ToFloat64(byte(b)), f16ToFloat(uint16(b)<<8); !same(got, want) {
			t.Errorf("E5M2 0x%02x = %v, binary16 0x%02x00 = %v", b, got, b, want)
		}
	}
	// E4M3FN: the 126 positive finite values strictly increase.
	for b := 1; b < 0x7f; b++ {
		if F8E4M3ToFloat64(byte(b)) <= F8E4M3ToFloat64(byte(b-1)) {
			t.Fatalf("E4M3 0x%02x does not exceed 0x%02x", b, b-1)
		}
	}
}

// TestAnyNonFiniteNewDTypes: the bit tests agree with the decoders.
func TestAnyNonFiniteNewDTypes(t *testing.T) {
	c64 := func(re, im float32) []byte {
		b := binary.LittleEndian.AppendUint32(nil, math.Float32bits(re))
		return binary.LittleEndian.AppendUint32(b, math.Float32bits(im))
	}
	c128 := func(re, im float64) []byte {
		b := binary.LittleEndian.AppendUint64(nil, math.Float64bits(re))
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(im))
	}
	nan32, inf32 := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		dt   DType
		b    []byte
		want bool
	}{
		{F8E4M3, []byte{0x7e, 0xfe, 0x78, 0}, false}, {F8E4M3, []byte{0, 0x7f}, true}, {F8E4M3, []byte{0xff}, true},
		{F8E5M2, []byte{0x7b, 0xfb}, false}, {F8E5M2, []byte{0x7c}, true}, {F8E5M2, []byte{0xfd}, true},
		{F8E8M0, []byte{0xfe, 0}, false}, {F8E8M0, []byte{0xff}, true},
		{C64, c64(1, -2), false}, {C64, c64(1, nan32), true}, {C64, c64(inf32, 0), true},
		{C64, append(c64(1, 2), c64(3, 4)[:4]...), false}, // trailing partial element ignored
		{C128, c128(1, 2), false}, {C128, c128(0, math.Inf(-1)), true}, {C128, c128(math.NaN(), 0), true},
	} {
		if got := AnyNonFinite(c.dt, c.b); got != c.want {
			t.Errorf("AnyNonFinite(%s, % x) = %v, want %v", c.dt, c.b, got, c.want)
		}
		var dec bool
		for e := 0; e+c.dt.Size() <= len(c.b); e += c.dt.Size() {
			re, im := ElementComplex(c.dt, c.b[e:])
			dec = dec || !finite(re) || !finite(im)
		}
		if dec != c.want {
			t.Errorf("%s % x: decoded non-finite %v, bit test %v", c.dt, c.b, dec, c.want)
		}
	}
}

// TestDiffNewDTypes: row blocking and statistics on the decoded values of
// fp8 and complex arrays, against hand-computed numbers.
func TestDiffNewDTypes(t *testing.T) {
	c64 := func(v ...float32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		return b
	}
	c128 := func(v ...float64) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
		return b
	}
	nan, inf := math.NaN(), math.Inf(1)
	type stats struct {
		changed, finite, newNaN, newInf int64
		rows                            []RowRange
		max, mean, rel                  float64
		fmax, fmean, frel               float64
	}
	for _, c := range []struct {
		name     string
		dt       DType
		old, new []byte
		want     stats
	}{
		// 1, 2, 0 -> 1.5, 2, 1: |Δ| 0.5 and 1; rel L2 √1.25/√5 = 0.5.
		{"f8e4m3", F8E4M3, []byte{0x38, 0x40, 0x00}, []byte{0x3c, 0x40, 0x38},
			stats{2, 2, 0, 0, []RowRange{{0, 1}, {2, 3}}, 1, 0.75, 0.5, 1, 0.75, 0.5}},
		// 448 -> -448 is finite (E4M3FN has no Inf); 1 -> NaN.
		{"f8e4m3 nan", F8E4M3, []byte{0x7e, 0x38}, []byte{0xfe, 0x7f},
			stats{2, 1, 1, 0, []RowRange{{0, 2}}, nan, nan, nan, 896, 896, 896 / math.Sqrt(448*448+1)}},
		// 1, 2 -> +Inf, 2.5: one new Inf, the finite pair |Δ| 0.5, rel 0.5/√5.
		{"f8e5m2 inf", F8E5M2, []byte{0x3c, 0x40}, []byte{0x7c, 0x41},
			stats{2, 1, 0, 1, []RowRange{{0, 2}}, inf, inf, inf, 0.5, 0.5, 0.5 / math.Sqrt(5)}},
		{"f8e5m2 nan", F8E5M2, []byte{0x3c}, []byte{0x7d},
			stats{1, 0, 1, 0, []RowRange{{0, 1}}, nan, nan, nan, 0, 0, 0}},
		// 1, 2 -> 2, 8: |Δ| 1 and 6; rel √37/√5.
		{"f8e8m0", F8E8M0, []byte{0x7f, 0x80}, []byte{0x80, 0x82},
			stats{2, 2, 0, 0, []RowRange{{0, 2}}, 6, 3.5, math.Sqrt(37.0 / 5), 6, 3.5, math.Sqrt(37.0 / 5)}},
		{"f8e8m0 nan", F8E8M0, []byte{0x7f, 0x80}, []byte{0xff, 0x80},
			stats{1, 0, 1, 0, []RowRange{{0, 1}}, nan, nan, nan, 0, 0, 0}},
		// 3+4i, 1 -> 0, 1+i: |Δ| 5 and 1; ||Δ|| = √26 = ||old||.
		{"c64", C64, c64(3, 4, 1, 0), c64(0, 0, 1, 1),
			stats{2, 2, 0, 0, []RowRange{{0, 2}}, 5, 3, 1, 5, 3, 1}},
		// NaN in the imaginary part makes the element NaN; Inf in the
		// real part makes it infinite.
		{"c64 nan imag", C64, c64(3, 4, 1, 0, 2, 2), c64(3, float32(nan), float32(inf), 0, 2, 2),
			stats{2, 0, 1, 1, []RowRange{{0, 2}}, nan, nan, nan, 0, 0, 0}},
		// 1+i -> 4+5i: |Δ| = |3+4i| = 5; rel 5/√2.
		{"c128", C128, c128(1, 1), c128(4, 5),
			stats{1, 1, 0, 0, []RowRange{{0, 1}}, 5, 5, 5 / math.Sqrt2, 5, 5, 5 / math.Sqrt2}},
		{"c128 inf", C128, c128(1, 1, 2, 0), c128(1, inf, 2, 1),
			stats{2, 1, 0, 1, []RowRange{{0, 2}}, inf, inf, inf, 1, 1, 1 / math.Sqrt(6)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := int64(len(c.old) / c.dt.Size())
			a := &Array{Name: "x", DType: c.dt, Shape: []int64{n}, Data: Bytes(c.old)}
			b := &Array{Name: "x", DType: c.dt, Shape: []int64{n}, Data: Bytes(c.new)}
			d := diff1(t, a, b)
			got := stats{d.ChangedElements, d.FiniteChanged, d.NewNaN, d.NewInf, d.ChangedRows,
				d.MaxAbsDelta, d.MeanAbsDelta, d.RelL2, d.FiniteMaxAbsDelta, d.FiniteMeanAbsDelta, d.FiniteRelL2}
			near := func(x, y float64) bool { return same(x, y) || math.Abs(x-y) <= 1e-12*math.Abs(y) }
			w := c.want
			if got.changed != w.changed || got.finite != w.finite || got.newNaN != w.newNaN || got.newInf != w.newInf ||
				!reflect.DeepEqual(got.rows, w.rows) || !near(got.max, w.max) || !near(got.mean, w.mean) || !near(got.rel, w.rel) ||
				!near(got.fmax, w.fmax) || !near(got.fmean, w.fmean) || !near(got.frel, w.frel) {
				t.Fatalf("got  %+v\nwant %+v", got, w)
			}
			if d.Change != Modified || d.DType != c.dt.String() {
				t.Fatalf("change %s dtype %s", d.Change, d.DType)
			}
			back, js := roundTrip(t, d)
			if !strings.Contains(js, `"finite_rel_l2"`) || !same(back.FiniteRelL2, d.FiniteRelL2) || !same(back.RelL2, d.RelL2) {
				t.Fatalf("JSON %s", js)
			}
		})
	}
}
