package snapshot

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"testing"
)

func f64Array(name string, rows, cols int, f func(r, c int) float64) *Array {
	b := make([]byte, rows*cols*8)
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			binary.LittleEndian.PutUint64(b[(r*cols+c)*8:], math.Float64bits(f(r, c)))
		}
	}
	return &Array{Name: name, DType: F64, Shape: []int64{int64(rows), int64(cols)}, Data: Bytes(b)}
}

func TestDiffRowsAndNumbers(t *testing.T) {
	base := func(r, c int) float64 { return float64(r*64 + c) }
	old := &Snapshot{Arrays: []*Array{f64Array("R", 4096, 64, base)}}
	changed := func(r, c int) float64 {
		v := base(r, c)
		switch {
		case r == 5 && c == 0, r == 6 && c == 1:
			return v + 2
		case r == 700 && c == 3:
			return v - 4
		case r == 4000 && c == 0:
			return math.NaN()
		}
		return v
	}
	new := &Snapshot{Arrays: []*Array{f64Array("R", 4096, 64, changed)}}
	for _, block := range []int64{0, 1, 7, 5000} {
		ds, err := Diff(context.Background(), old, new, DiffOptions{BlockRows: block})
		if err != nil {
			t.Fatal(err)
		}
		d := ds[0]
		if d.Change != Modified || d.RowsPerChunk != 128 || d.RowSize != 512 {
			t.Fatalf("block %d: %+v", block, d)
		}
		wantRows := []RowRange{{5, 7}, {700, 701}, {4000, 4001}}
		if !slices.Equal(d.ChangedRows, wantRows) {
			t.Fatalf("block %d: rows %v", block, d.ChangedRows)
		}
		if !slices.Equal(d.Chunks, []int64{0, 5, 31}) {
			t.Fatalf("block %d: chunks %v", block, d.Chunks)
		}
		if d.ChangedElements != 4 || d.FiniteChanged != 3 || d.FiniteMaxAbsDelta != 4 || math.Abs(d.FiniteMeanAbsDelta-8.0/3) > 1e-15 ||
			d.NewNaN != 1 || d.NewInf != 0 || d.NonFiniteChanged != 1 || !math.IsNaN(d.MaxAbsDelta) || !math.IsNaN(d.MeanAbsDelta) || !math.IsNaN(d.RelL2) {
			t.Fatalf("block %d: stats %+v", block, d)
		}
		var oldSq float64
		for r := 0; r < 4096; r++ {
			for c := 0; c < 64; c++ {
				oldSq += base(r, c) * base(r, c)
			}
		}
		if want := math.Sqrt(4+4+16) / math.Sqrt(oldSq); math.Abs(d.FiniteRelL2-want) > 1e-15 {
			t.Fatalf("relL2 %g want %g", d.FiniteRelL2, want)
		}
	}
}

func TestDiffKinds(t *testing.T) {
	a := &Array{Name: "a", DType: I32, Shape: []int64{2}, Data: Bytes{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}}
	a2 := &Array{Name: "a", DType: I32, Shape: []int64{2}, Data: Bytes{1, 0, 0, 0, 5, 0, 0, 0}}
	old := &Snapshot{Arrays: []*Array{
		a,
		{Name: "gone", DType: U8, Shape: []int64{1}, Data: Bytes{1}},
		{Name: "re", DType: U8, Shape: []int64{2}, Data: Bytes{1, 2}},
		{Name: "ty", DType: U8, Shape: []int64{2}, Data: Bytes{1, 2}},
		{Name: "h", DType: F16, Shape: []int64{1}, Data: Bytes{0x00, 0x3c}}, // 1.0
	}}
	new := &Snapshot{Arrays: []*Array{
		a2,
		{Name: "new", DType: U8, Shape: []int64{1}, Data: Bytes{1}},
		{Name: "re", DType: U8, Shape: []int64{1, 2}, Data: Bytes{1, 2}},
		{Name: "ty", DType: I8, Shape: []int64{2}, Data: Bytes{1, 2}},
		{Name: "h", DType: F16, Shape: []int64{1}, Data: Bytes{0x00, 0x7c}}, // +Inf
	}}
	ds, err := Diff(context.Background(), old, new, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ArrayDiff{}
	var order []string
	for _, d := range ds {
		got[d.Name] = d
		order = append(order, d.Name)
	}
	if !slices.IsSorted(order) || len(order) != 6 {
		t.Fatalf("order %v", order)
	}
	if got["a"].Change != Modified || got["a"].MaxAbsDelta != 6 || got["a"].ChangedElements != 1 {
		t.Fatalf("int: %+v", got["a"])
	}
	if got["gone"].Change != Removed || got["new"].Change != Added || got["re"].Change != Reshaped || got["ty"].Change != Retyped {
		t.Fatalf("kinds: %+v", ds)
	}
	if h := got["h"]; h.NewInf != 1 || h.Change != Modified || !math.IsInf(h.MaxAbsDelta, 1) || h.FiniteChanged != 0 || h.FiniteMaxAbsDelta != 0 {
		t.Fatalf("f16 inf: %+v", got["h"])
	}
}

func TestFloatDecoders(t *testing.T) {
	cases := []struct {
		dt   DType
		b    []byte
		want float64
	}{
		{F16, []byte{0x00, 0x3c}, 1},
		{F16, []byte{0x00, 0xc0}, -2},
		{F16, []byte{0x01, 0x00}, math.Pow(2, -24)},
		{BF16, []byte{0x80, 0x3f}, 1},
		{BF16, []byte{0x40, 0xc0}, -3},
		{F32, []byte{0, 0, 0x80, 0x3f}, 1},
	}
	for _, c := range cases {
		if got := toFloat(c.dt, c.b); got != c.want {
			t.Errorf("%v %x = %g want %g", c.dt, c.b, got, c.want)
		}
	}
	if !math.IsNaN(toFloat(F16, []byte{0x01, 0x7c})) {
		t.Error("f16 NaN")
	}
}
