package snapshot

import (
	"encoding/binary"
	"math"
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
