package diffsvg

import (
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// TestNewDTypeBins: fp8 bins measure the decoded values, complex bins the
// modulus of the difference, and non-finite elements mark their bin.
func TestNewDTypeBins(t *testing.T) {
	c64 := func(v ...float32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		return b
	}
	for _, c := range []struct {
		name           string
		dt             snapshot.DType
		old, new       []byte
		maxAbs, maxOld float64
		nonFinite      bool
	}{
		{"f8e4m3", snapshot.F8E4M3, []byte{0x38, 0x40}, []byte{0x3c, 0x40}, 0.5, 1, false}, // 1 -> 1.5
		{"f8e4m3 nan", snapshot.F8E4M3, []byte{0x38}, []byte{0x7f}, 0, 0, true},
		{"f8e5m2 inf", snapshot.F8E5M2, []byte{0x3c}, []byte{0x7c}, 0, 0, true},
		{"f8e8m0", snapshot.F8E8M0, []byte{0x80}, []byte{0x82}, 6, 2, false},          // 2 -> 8
		{"c64", snapshot.C64, c64(3, 4), c64(0, 0), 5, 5, false},                      // |−3−4i|, |3+4i|
		{"c64 nan", snapshot.C64, c64(3, 4), c64(3, float32(math.NaN())), 0, 0, true}, // NaN part
	} {
		t.Run(c.name, func(t *testing.T) {
			n := int64(len(c.old) / c.dt.Size())
			old := &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "x", DType: c.dt, Shape: []int64{n}, Data: snapshot.Bytes(c.old)}}}
			new := &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "x", DType: c.dt, Shape: []int64{n}, Data: snapshot.Bytes(c.new)}}}
			p, err := Compute(context.Background(), old, new, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Strips) != 1 || len(p.Strips[0].Changed) != 1 {
				t.Fatalf("strips %+v", p.Strips)
			}
			b := p.Strips[0].Changed[0]
			if b.MaxAbs != c.maxAbs || b.MaxOld != c.maxOld || b.NonFinite != c.nonFinite {
				t.Fatalf("bin %+v, want max |Δ| %v, max |old| %v, non-finite %v", b, c.maxAbs, c.maxOld, c.nonFinite)
			}
		})
	}
}
