package snapshot

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// ArrayChange classifies how an array differs between two snapshots.
type ArrayChange string

// Kinds of ArrayChange.
const (
	Unchanged ArrayChange = "unchanged"
	Modified  ArrayChange = "modified"
	Added     ArrayChange = "added"
	Removed   ArrayChange = "removed"
	Reshaped  ArrayChange = "reshaped" // same dtype, other shape
	Retyped   ArrayChange = "retyped"  // other dtype
)

// RowRange is a half-open range of rows [Start, End).
type RowRange struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

// ArrayDiff is the comparison of one array. Element statistics are only
// filled for Modified (and Unchanged) arrays.
type ArrayDiff struct {
	Name     string      `json:"name"`
	Change   ArrayChange `json:"change"`
	DType    string      `json:"dtype"`
	OldDType string      `json:"old_dtype,omitempty"`
	Shape    []int64     `json:"shape"`
	OldShape []int64     `json:"old_shape,omitempty"`

	RowSize      int64      `json:"row_size,omitempty"`       // bytes per row
	RowsPerChunk int64      `json:"rows_per_chunk,omitempty"` // geometry used for Chunks
	Rows         int64      `json:"rows,omitempty"`
	ChangedRows  []RowRange `json:"changed_rows,omitempty"`
	Chunks       []int64    `json:"changed_chunks,omitempty"` // WTXT chunk ix values

	Elements        int64 `json:"elements"`
	ChangedElements int64 `json:"changed_elements"`
	// Floats (f64 f32 f16 bf16): over finite pairs that differ.
	MaxAbsDelta  float64 `json:"max_abs_delta"`
	MeanAbsDelta float64 `json:"mean_abs_delta"` // mean over changed elements
	// RelL2 = ||new-old||2 / ||old||2 over finite pairs (+Inf when old is
	// all zero and something changed).
	RelL2 float64 `json:"rel_l2"`
	// NewNaN / NewInf count elements that are NaN / ±Inf in the new
	// snapshot but were finite in the old one.
	NewNaN int64 `json:"new_nan"`
	NewInf int64 `json:"new_inf"`
}

// DiffOptions tune Diff.
type DiffOptions struct {
	// RowsPerChunk gives the chunk geometry used to name changed chunks;
	// nil means DefaultRowsPerChunk.
	RowsPerChunk func(a *Array, rowSize int64) int64
	// BlockRows caps how many rows are compared at once (memory bound);
	// 0 = enough rows for about 1 MiB.
	BlockRows int64
}

// DefaultRowsPerChunk is the WTXT profile's default: the largest power of
// two p >= 1 with p × rowSize <= 65536.
func DefaultRowsPerChunk(rowSize int64) int64 {
	p := int64(1)
	for rowSize > 0 && p*2*rowSize <= 65536 {
		p *= 2
	}
	return p
}

// RowGeometry returns the row size in bytes and the row count of a: rows
// are along the first dimension; a scalar is one row of one element.
func RowGeometry(a *Array) (rowSize, rows int64) {
	if len(a.Shape) == 0 {
		return int64(a.DType.Size()), 1
	}
	inner, err := NumElements(a.Shape[1:])
	if err != nil {
		return 0, 0
	}
	return inner * int64(a.DType.Size()), a.Shape[0]
}

// Diff compares two snapshots array by array, streaming row blocks from
// both (memory stays bounded by BlockRows rows, not the snapshot size).
// Arrays come out in name order.
func Diff(ctx context.Context, old, new *Snapshot, opts DiffOptions) ([]ArrayDiff, error) {
	olds, news := old.Sorted(), new.Sorted()
	var out []ArrayDiff
	i, j := 0, 0
	for i < len(olds) || j < len(news) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		switch {
		case j == len(news) || (i < len(olds) && olds[i].Name < news[j].Name):
			a := olds[i]
			out = append(out, ArrayDiff{Name: a.Name, Change: Removed, DType: a.DType.String(), Shape: a.Shape})
			i++
		case i == len(olds) || news[j].Name < olds[i].Name:
			b := news[j]
			n, _ := b.NumElements()
			out = append(out, ArrayDiff{Name: b.Name, Change: Added, DType: b.DType.String(), Shape: b.Shape, Elements: n})
			j++
		default:
			d, err := diffArray(olds[i], news[j], opts)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
			i++
			j++
		}
	}
	return out, nil
}

func diffArray(a, b *Array, opts DiffOptions) (ArrayDiff, error) {
	d := ArrayDiff{Name: b.Name, DType: b.DType.String(), Shape: b.Shape}
	if a.DType != b.DType {
		d.Change, d.OldDType, d.OldShape = Retyped, a.DType.String(), a.Shape
		return d, nil
	}
	if !slices.Equal(a.Shape, b.Shape) {
		d.Change, d.OldShape = Reshaped, a.Shape
		return d, nil
	}
	n, err := b.NumElements()
	if err != nil {
		return d, fmt.Errorf("array %q: %w", b.Name, err)
	}
	d.Elements = n
	rowSize, rows := RowGeometry(b)
	d.RowSize, d.Rows = rowSize, rows
	rpc := DefaultRowsPerChunk(rowSize)
	if opts.RowsPerChunk != nil {
		rpc = opts.RowsPerChunk(b, rowSize)
	}
	d.RowsPerChunk = rpc
	if n == 0 || rowSize == 0 {
		d.Change = Unchanged
		return d, nil
	}
	block := opts.BlockRows
	if block <= 0 {
		block = max(1, (1<<20)/rowSize)
	}
	esz := int64(b.DType.Size())
	var acc floatAcc
	bufA := make([]byte, min(block, rows)*rowSize)
	bufB := make([]byte, len(bufA))
	for r0 := int64(0); r0 < rows; r0 += block {
		nr := min(block, rows-r0)
		pa, pb := bufA[:nr*rowSize], bufB[:nr*rowSize]
		if err := readFull(a.Data, pa, r0*rowSize); err != nil {
			return d, fmt.Errorf("array %q (old): %w", a.Name, err)
		}
		if err := readFull(b.Data, pb, r0*rowSize); err != nil {
			return d, fmt.Errorf("array %q (new): %w", b.Name, err)
		}
		for r := int64(0); r < nr; r++ {
			ra, rb := pa[r*rowSize:(r+1)*rowSize], pb[r*rowSize:(r+1)*rowSize]
			if string(ra) == string(rb) {
				continue
			}
			row := r0 + r
			if k := len(d.ChangedRows); k > 0 && d.ChangedRows[k-1].End == row {
				d.ChangedRows[k-1].End = row + 1
			} else {
				d.ChangedRows = append(d.ChangedRows, RowRange{row, row + 1})
			}
			if c := row / rpc; len(d.Chunks) == 0 || d.Chunks[len(d.Chunks)-1] != c {
				d.Chunks = append(d.Chunks, c)
			}
			for e := int64(0); e < rowSize; e += esz {
				x, y := ra[e:e+esz], rb[e:e+esz]
				if string(x) == string(y) {
					continue
				}
				d.ChangedElements++
				acc.add(b.DType, x, y)
			}
		}
		// Every row contributes to ||old||2 for floats.
		if b.DType.IsFloat() {
			for e := int64(0); e < int64(len(pa)); e += esz {
				if v := toFloat(b.DType, pa[e:e+esz]); !math.IsNaN(v) && !math.IsInf(v, 0) {
					acc.oldSq += v * v
				}
			}
		}
	}
	d.Change = Unchanged
	if d.ChangedElements > 0 {
		d.Change = Modified
	}
	d.MaxAbsDelta = acc.maxAbs
	if d.ChangedElements > 0 {
		d.MeanAbsDelta = acc.sumAbs / float64(d.ChangedElements)
	}
	if b.DType.IsFloat() {
		switch {
		case acc.oldSq > 0:
			d.RelL2 = math.Sqrt(acc.diffSq) / math.Sqrt(acc.oldSq)
		case acc.diffSq > 0:
			d.RelL2 = math.Inf(1)
		}
	}
	d.NewNaN, d.NewInf = acc.newNaN, acc.newInf
	return d, nil
}

type floatAcc struct {
	maxAbs, sumAbs, diffSq, oldSq float64
	newNaN, newInf                int64
}

func (f *floatAcc) add(dt DType, x, y []byte) {
	if !dt.IsFloat() {
		delta := intAbsDiff(dt, x, y)
		f.sumAbs += delta
		f.maxAbs = max(f.maxAbs, delta)
		return
	}
	a, b := toFloat(dt, x), toFloat(dt, y)
	aFinite := !math.IsNaN(a) && !math.IsInf(a, 0)
	switch {
	case math.IsNaN(b):
		if aFinite {
			f.newNaN++
		}
		return
	case math.IsInf(b, 0):
		if aFinite {
			f.newInf++
		}
		return
	case !aFinite:
		return
	}
	delta := math.Abs(b - a)
	f.sumAbs += delta
	f.diffSq += delta * delta
	f.maxAbs = max(f.maxAbs, delta)
}

func intAbsDiff(dt DType, x, y []byte) float64 {
	switch dt {
	case I64:
		a, b := int64(binary.LittleEndian.Uint64(x)), int64(binary.LittleEndian.Uint64(y))
		if a > b {
			a, b = b, a
		}
		return float64(uint64(b) - uint64(a))
	case U64:
		a, b := binary.LittleEndian.Uint64(x), binary.LittleEndian.Uint64(y)
		if a > b {
			a, b = b, a
		}
		return float64(b - a)
	case I32:
		return math.Abs(float64(int32(binary.LittleEndian.Uint32(y))) - float64(int32(binary.LittleEndian.Uint32(x))))
	case U32:
		return math.Abs(float64(binary.LittleEndian.Uint32(y)) - float64(binary.LittleEndian.Uint32(x)))
	case I16:
		return math.Abs(float64(int16(binary.LittleEndian.Uint16(y))) - float64(int16(binary.LittleEndian.Uint16(x))))
	case U16:
		return math.Abs(float64(binary.LittleEndian.Uint16(y)) - float64(binary.LittleEndian.Uint16(x)))
	case I8:
		return math.Abs(float64(int8(y[0])) - float64(int8(x[0])))
	case U8, Bool:
		return math.Abs(float64(y[0]) - float64(x[0]))
	}
	return 0
}

// toFloat decodes one little-endian element of a float dtype.
func toFloat(dt DType, b []byte) float64 {
	switch dt {
	case F64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case BF16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	case F16:
		return f16ToFloat(binary.LittleEndian.Uint16(b))
	}
	return 0
}

// f16ToFloat converts IEEE 754 binary16 bits to float64.
func f16ToFloat(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	frac := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * frac * math.Pow(2, -24)
	case 0x1f:
		if frac == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	}
	return sign * (1 + frac/1024) * math.Pow(2, float64(exp-15))
}

func readFull(s Source, p []byte, off int64) error {
	if s == nil {
		return fmt.Errorf("no data")
	}
	return ReadFullAt(s, p, off)
}
