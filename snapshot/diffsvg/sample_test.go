package diffsvg

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// pieceSource is a Source that is also a PieceReader, recording the
// pieces of every ReadPieces call.
type pieceSource struct {
	snapshot.Bytes
	calls [][]Piece
}

func (s *pieceSource) ReadPieces(ps []Piece) error {
	s.calls = append(s.calls, append([]Piece(nil), ps...))
	for _, p := range ps {
		if err := snapshot.ReadFullAt(s.Bytes, p.Buf, p.Off); err != nil {
			return err
		}
	}
	return nil
}

// TestSamplePieces: a sampled strip is the same whether its Source reads
// its pieces one by one or through PieceReader, which gets them in
// ascending batches of at most sampleBatch, the pieces of bins 2j and
// 2j+1 in adjacent rows.
func TestSamplePieces(t *testing.T) {
	const rows, cols = 2000, 64
	mk := func(step float32) []byte {
		return f32s(rows, cols, func(r, c int) float32 {
			return float32(math.Sin(float64(r*cols+c))) + step*float32(c%5+1)*1e-3
		})
	}
	f64 := func(step float64) []byte {
		b := make([]byte, rows*8*8)
		for i := 0; i < rows*8; i++ {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(math.Cos(float64(i))+step*1e-6))
		}
		return b
	}
	oldA, newA := mk(1), mk(2)
	oldB, newB := f64(1), f64(2)
	plain := func(a, b []byte, d, e []byte) (*snapshot.Snapshot, *snapshot.Snapshot) {
		return &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("dense", snapshot.F32, []int64{rows, cols}, a), arr("wide", snapshot.F64, []int64{rows, 8}, d)}},
			&snapshot.Snapshot{Arrays: []*snapshot.Array{arr("dense", snapshot.F32, []int64{rows, cols}, b), arr("wide", snapshot.F64, []int64{rows, 8}, e)}}
	}
	opts := Options{SampleBytes: 8 << 10}
	po, pn := plain(oldA, newA, oldB, newB)
	want, err := Compute(context.Background(), po, pn, opts)
	if err != nil {
		t.Fatal(err)
	}
	ro, rn := plain(oldA, newA, oldB, newB)
	src := &pieceSource{Bytes: snapshot.Bytes(newA)}
	rn.Arrays[0].Data = src
	ro.Arrays[0].Data = &pieceSource{Bytes: snapshot.Bytes(oldA)}
	got, err := Compute(context.Background(), ro, rn, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.SVG(), want.SVG()) {
		t.Fatal("the picture read through PieceReader differs")
	}
	s := want.Strips[0]
	if s.Sampled == 0 || s.Bins != DefaultWidth/sampleBinWidth || len(s.Changed) != s.Bins || want.Strips[1].Sampled == 0 {
		t.Fatalf("not sampled densely: %+v", s)
	}
	var all []Piece
	for _, c := range src.calls {
		if len(c) == 0 || len(c) > sampleBatch {
			t.Fatalf("a batch of %d pieces", len(c))
		}
		all = append(all, c...)
	}
	if len(all) != s.Bins {
		t.Fatalf("%d pieces for %d bins", len(all), s.Bins)
	}
	const rowSize = cols * 4
	for i := 1; i < len(all); i++ {
		if all[i].Off < all[i-1].Off+int64(len(all[i-1].Buf)) {
			t.Fatalf("piece %d at %d overlaps or precedes piece %d at %d+%d", i, all[i].Off, i-1, all[i-1].Off, len(all[i-1].Buf))
		}
		if i%2 == 1 && all[i].Off/rowSize != all[i-1].Off/rowSize+1 {
			t.Errorf("bins %d and %d sample rows %d and %d, not adjacent ones", i-1, i, all[i-1].Off/rowSize, all[i].Off/rowSize)
		}
	}
}

// TestElementsF32: the in-line f32 comparison of sampled pieces gives the
// bin element gives, for ordinary, equal, signed-zero, subnormal, huge
// and non-finite values.
func TestElementsF32(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-45, -3.4e38, 3.4e38, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1, -1}
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		n := 1 + r.IntN(64)
		x, y := make([]byte, 4*n), make([]byte, 4*n)
		for i := range n {
			pick := func() float32 {
				if r.IntN(4) == 0 {
					return special[r.IntN(len(special))]
				}
				return float32(r.NormFloat64())
			}
			a := pick()
			b := a
			if r.IntN(3) > 0 || round%7 == 0 {
				b = pick()
			}
			binary.LittleEndian.PutUint32(x[4*i:], math.Float32bits(a))
			binary.LittleEndian.PutUint32(y[4*i:], math.Float32bits(b))
		}
		fast := binWalker{dt: snapshot.F32, esz: 4, cur: &Bin{}}
		fast.elements(x, y)
		slow := binWalker{dt: snapshot.F32, esz: 4, cur: &Bin{}}
		for i := 0; i < len(x); i += 4 {
			if string(x[i:i+4]) != string(y[i:i+4]) {
				slow.element(x[i:i+4], y[i:i+4])
			}
		}
		if *fast.cur != *slow.cur {
			t.Fatalf("round %d: in line %+v, element %+v", round, *fast.cur, *slow.cur)
		}
	}
}
