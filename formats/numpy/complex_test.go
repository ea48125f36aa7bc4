package numpy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestComplex: <c8, >c8, <c16 and >c16 decode to c64/c128 arrays whose
// bytes are little-endian (real, imaginary) pairs in C order, from a
// mapped file and through a plain reader, and re-encode to the same file.
// A big-endian complex array in Fortran order (both a swap of each part
// and a transposition) is refused, naming the check.
func TestComplex(t *testing.T) {
	vals := []float64{1, -2, 3.5, 0.25, -0, math.Inf(1), 7, 8, 9, 10, 11, 12}
	le := func(size int) []byte { // C order, little-endian parts
		var b []byte
		for _, v := range vals {
			if size == 8 {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(v)))
			} else {
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
			}
		}
		return b
	}
	be := func(size int) []byte {
		var b []byte
		for _, v := range vals {
			if size == 8 {
				b = binary.BigEndian.AppendUint32(b, math.Float32bits(float32(v)))
			} else {
				b = binary.BigEndian.AppendUint64(b, math.Float64bits(v))
			}
		}
		return b
	}
	for _, c := range []struct {
		descr string
		dt    snapshot.DType
		data  []byte
		want  []byte
	}{
		{"<c8", snapshot.C64, le(8), le(8)},
		{">c8", snapshot.C64, be(8), le(8)},
		{"<c16", snapshot.C128, le(16), le(16)},
		{">c16", snapshot.C128, be(16), le(16)},
	} {
		t.Run(c.descr, func(t *testing.T) {
			raw := npyFile("{'descr': '"+c.descr+"', 'fortran_order': False, 'shape': (2, 3), }", c.data)
			for _, r := range []interface {
				ReadAt([]byte, int64) (int, error)
			}{snapshot.Bytes(raw), bytes.NewReader(raw)} {
				s, err := New().Decode(context.Background(), r, int64(len(raw)), formats.DecodeOptions{Name: "c.npy"})
				if err != nil {
					t.Fatal(err)
				}
				a := s.Arrays[0]
				got, err := snapshot.ReadAll(a.Data)
				if err != nil || a.DType != c.dt || len(a.Shape) != 2 || a.Shape[0] != 2 || a.Shape[1] != 3 || !bytes.Equal(got, c.want) {
					t.Fatalf("%s %v: % x (%v)", a.DType, a.Shape, got, err)
				}
				out, err := encodeBytes(t, Codec{}, s, false)
				if err != nil || !bytes.Equal(out, raw) {
					t.Fatalf("re-encode: %v (equal %v)", err, bytes.Equal(out, raw))
				}
			}
		})
	}
	// Fortran order, little-endian: transposed as whole complex elements.
	raw := npyFile("{'descr': '<c8', 'fortran_order': True, 'shape': (2, 3), }", le(8))
	s, err := New().Decode(context.Background(), snapshot.Bytes(raw), int64(len(raw)), formats.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := snapshot.ReadAll(s.Arrays[0].Data)
	// Stored column-major: element (i,j) is stored at j*2+i.
	w := le(8)
	for i := 0; i < 2; i++ {
		for j := 0; j < 3; j++ {
			if !bytes.Equal(got[(i*3+j)*8:(i*3+j+1)*8], w[(j*2+i)*8:(j*2+i+1)*8]) {
				t.Fatalf("fortran element (%d,%d) differs", i, j)
			}
		}
	}
	if out, err := encodeBytes(t, Codec{}, s, false); err != nil || !bytes.Equal(out, raw) {
		t.Fatalf("fortran re-encode: %v", err)
	}
	raw = npyFile("{'descr': '>c8', 'fortran_order': True, 'shape': (2, 3), }", be(8))
	_, err = New().Decode(context.Background(), snapshot.Bytes(raw), int64(len(raw)), formats.DecodeOptions{Name: "c.npy"})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "big-endian complex array in Fortran order") {
		t.Fatalf("big-endian Fortran complex: %v", err)
	}
}

// TestFP8Refused: NumPy has no fp8 dtype: Encode fails with a DTypeError
// naming the array, or drops and reports it under Lossy.
func TestFP8Refused(t *testing.T) {
	s := &snapshot.Snapshot{Arrays: []*snapshot.Array{
		{Name: "q", DType: snapshot.F8E4M3, Shape: []int64{4}, Data: snapshot.Bytes(make([]byte, 4))},
		{Name: "z", DType: snapshot.C128, Shape: []int64{1}, Data: snapshot.Bytes(make([]byte, 16))},
	}}
	_, err := encodeBytes(t, Codec{NPZ: true}, s, false)
	var de *formats.DTypeError
	if !errors.As(err, &de) || de.Array != "q" || de.Format != "numpy" || !errors.Is(err, formats.ErrLossy) {
		t.Fatalf("%v", err)
	}
	var lost []string
	var buf bytes.Buffer
	err = Codec{NPZ: true}.Encode(context.Background(), &buf, s, formats.EncodeOptions{Lossy: true, Lost: func(l formats.Loss) { lost = append(lost, l.String()) }})
	if err != nil || len(lost) != 1 || lost[0] != `npz: array "q": array dropped (dtype f8e4m3): NumPy has no bf16 or fp8 dtype` {
		t.Fatalf("%v %q", err, lost)
	}
	back, err := decodeBytes(t, Codec{NPZ: true}, buf.Bytes())
	if err != nil || len(back.Arrays) != 1 || back.Arrays[0].DType != snapshot.C128 {
		t.Fatalf("%v %v", err, back)
	}
}
