package snapshot

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
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

	// Element statistics over every changed element (floats and
	// integers), with IEEE semantics for floats: NaN when a changed
	// element is NaN on either side (its |Δ| is undefined), else +Inf when
	// an element changed to or from ±Inf or a difference exceeds the
	// float64 range. Integers: exact |Δ| as float64, RelL2 0.
	MaxAbsDelta  float64 `json:"max_abs_delta"`
	MeanAbsDelta float64 `json:"mean_abs_delta"` // mean over changed elements
	// RelL2 = ||new-old||2 / ||old||2, ||old||2 over old's finite
	// elements, computed with scaled sums (no overflow or underflow for
	// any finite input); +Inf when old is all zero and something changed.
	RelL2 float64 `json:"rel_l2"`

	// Floats only: the same statistics over the changed elements that are
	// finite on both sides (FiniteChanged of them), so ordinary changes
	// keep their magnitude next to a NaN. Thresholds use these.
	FiniteChanged      int64   `json:"finite_changed"`
	FiniteMaxAbsDelta  float64 `json:"finite_max_abs_delta"`
	FiniteMeanAbsDelta float64 `json:"finite_mean_abs_delta"`
	FiniteRelL2        float64 `json:"finite_rel_l2"`

	// Non-finite changes (floats): NonFiniteChanged counts changed
	// elements that are NaN or ±Inf on either side. NewNaN counts elements
	// NaN now and not NaN before (finite or ±Inf); NewInf elements ±Inf now
	// and not the same infinity before; GoneNaN / GoneInf the reverse
	// (NaN / an infinity before, something else now).
	NonFiniteChanged int64 `json:"nonfinite_changed"`
	NewNaN           int64 `json:"new_nan"`
	NewInf           int64 `json:"new_inf"`
	GoneNaN          int64 `json:"gone_nan"`
	GoneInf          int64 `json:"gone_inf"`
}

// IntroducesNonFinite reports whether the change makes any element NaN or
// ±Inf that was not so before.
func (d *ArrayDiff) IntroducesNonFinite() bool { return d.NewNaN+d.NewInf > 0 }

// FormatStat formats a statistic for people: "NaN", "inf", "-inf", or
// three significant digits.
func FormatStat(f float64) string { return string(AppendStat(nil, f)) }

// AppendStat appends FormatStat(f) to b.
func AppendStat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "inf"...)
	case math.IsInf(f, -1):
		return append(b, "-inf"...)
	}
	return strconv.AppendFloat(b, f, 'g', 3, 64)
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
	isFloat := b.DType.IsFloat()
	isComplex := b.DType.IsComplex()
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
				switch {
				case isComplex:
					ar, ai := ElementComplex(b.DType, x)
					br, bi := ElementComplex(b.DType, y)
					acc.addComplex(ar, ai, br, bi)
				case isFloat:
					acc.addFloat(toFloat(b.DType, x), toFloat(b.DType, y))
				default:
					acc.addInt(intAbsDiff(b.DType, x, y))
				}
			}
		}
		// Every row contributes to ||old||2 for floats; a complex
		// element by its squared modulus (both parts).
		if isComplex {
			for e := int64(0); e < int64(len(pa)); e += esz {
				re, im := ElementComplex(b.DType, pa[e:e+esz])
				if finite(re) && finite(im) {
					acc.old.add(re)
					acc.old.add(im)
				}
			}
		} else if isFloat {
			for e := int64(0); e < int64(len(pa)); e += esz {
				if v := toFloat(b.DType, pa[e:e+esz]); !math.IsNaN(v) && !math.IsInf(v, 0) {
					acc.old.add(v)
				}
			}
		}
	}
	d.Change = Unchanged
	if d.ChangedElements > 0 {
		d.Change = Modified
	}
	if !isFloat {
		d.MaxAbsDelta = acc.intMax
		if d.ChangedElements > 0 {
			d.MeanAbsDelta = acc.intSum / float64(d.ChangedElements)
		}
		return d, nil
	}
	acc.finish(&d)
	return d, nil
}

// l2acc sums squares without overflow or underflow for any finite input
// (Blue's scaling, as math.Hypot scales): magnitudes above 2^300 are
// summed scaled by 2^-600, below 2^-300 scaled by 2^600, the rest as they
// are. The norm is m·2^e (see norm).
type l2acc struct{ small, mid, big float64 }

const (
	l2Big   = 0x1p300
	l2Small = 0x1p-300
)

func (l *l2acc) add(x float64) {
	ax := math.Abs(x)
	switch {
	case ax > l2Big:
		y := ax * 0x1p-600
		l.big += y * y
	case ax < l2Small:
		y := ax * 0x1p600
		l.small += y * y
	default:
		l.mid += ax * ax
	}
}

// norm returns m and e with ||x||2 = m·2^e (m finite).
func (l *l2acc) norm() (float64, int) {
	switch {
	case l.big > 0:
		return math.Sqrt(l.big + math.Ldexp(l.mid, -1200) + math.Ldexp(l.small, -2400)), 600
	case l.mid > 0:
		return math.Sqrt(l.mid + math.Ldexp(l.small, -1200)), 0
	}
	return math.Sqrt(l.small), -600
}

// l2ratio returns (||num||2·2^shift) / ||den||2 (+Inf when den is zero and
// num is not, 0 when both are).
func l2ratio(num, den *l2acc, shift int) float64 {
	mn, en := num.norm()
	md, ed := den.norm()
	switch {
	case mn == 0:
		return 0
	case md == 0:
		return math.Inf(1)
	}
	return math.Ldexp(mn/md, en+shift-ed)
}

// floatAcc accumulates the statistics of changed elements. Finite deltas
// are accumulated halved (h = b/2 - a/2 cannot overflow); sums of |h| are
// split at 1 so they cannot overflow either.
type floatAcc struct {
	intMax, intSum float64

	finite             int64
	maxH, sumHi, sumLo float64 // sumHi holds |h|·2^-64 for |h| >= 1
	diff, old          l2acc

	nonFinite, nanChanges            int64
	newNaN, newInf, goneNaN, goneInf int64
}

func (f *floatAcc) addInt(delta float64) {
	f.intSum += delta
	f.intMax = max(f.intMax, delta)
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// addComplex adds a changed complex element a → b: |Δ| is the modulus
// |b - a|; an element is NaN when either part is NaN, else ±Inf when
// either part is infinite.
func (f *floatAcc) addComplex(ar, ai, br, bi float64) {
	aNaN, bNaN := math.IsNaN(ar) || math.IsNaN(ai), math.IsNaN(br) || math.IsNaN(bi)
	aInf := !aNaN && (math.IsInf(ar, 0) || math.IsInf(ai, 0))
	bInf := !bNaN && (math.IsInf(br, 0) || math.IsInf(bi, 0))
	if !aNaN && !bNaN && !aInf && !bInf {
		f.addFinite(math.Hypot(br*0.5-ar*0.5, bi*0.5-ai*0.5))
		return
	}
	f.addNonFinite(aNaN, bNaN, aInf, bInf)
}

func (f *floatAcc) addFloat(a, b float64) {
	aNaN, bNaN := math.IsNaN(a), math.IsNaN(b)
	aInf, bInf := math.IsInf(a, 0), math.IsInf(b, 0)
	if !aNaN && !bNaN && !aInf && !bInf {
		f.addFinite(math.Abs(b*0.5 - a*0.5))
		return
	}
	f.addNonFinite(aNaN, bNaN, aInf, bInf)
}

// addFinite adds a change between finite elements of halved size h.
func (f *floatAcc) addFinite(h float64) {
	f.finite++
	f.maxH = max(f.maxH, h)
	if h >= 1 {
		f.sumHi += h * 0x1p-64
	} else {
		f.sumLo += h
	}
	f.diff.add(h)
}

// addNonFinite adds a change where either side is NaN or infinite.
func (f *floatAcc) addNonFinite(aNaN, bNaN, aInf, bInf bool) {
	f.nonFinite++
	if aNaN || bNaN {
		f.nanChanges++
	}
	if bNaN && !aNaN {
		f.newNaN++
	}
	if aNaN && !bNaN {
		f.goneNaN++
	}
	// The elements differ bitwise, so two real infinities here have
	// opposite signs (two complex ones differ in some part).
	if bInf {
		f.newInf++
	}
	if aInf {
		f.goneInf++
	}
}

func (f *floatAcc) finish(d *ArrayDiff) {
	d.FiniteChanged = f.finite
	if f.finite > 0 {
		d.FiniteMaxAbsDelta = 2 * f.maxH // +Inf when |Δ| exceeds the float64 range
		n := float64(f.finite)
		d.FiniteMeanAbsDelta = math.Ldexp(f.sumHi/n, 65) + 2*(f.sumLo/n)
	}
	d.FiniteRelL2 = l2ratio(&f.diff, &f.old, 1)
	d.NonFiniteChanged = f.nonFinite
	d.NewNaN, d.NewInf, d.GoneNaN, d.GoneInf = f.newNaN, f.newInf, f.goneNaN, f.goneInf
	d.MaxAbsDelta, d.MeanAbsDelta, d.RelL2 = d.FiniteMaxAbsDelta, d.FiniteMeanAbsDelta, d.FiniteRelL2
	switch {
	case f.nanChanges > 0:
		nan := math.NaN()
		d.MaxAbsDelta, d.MeanAbsDelta, d.RelL2 = nan, nan, nan
	case f.nonFinite > 0:
		inf := math.Inf(1)
		d.MaxAbsDelta, d.MeanAbsDelta, d.RelL2 = inf, inf, inf
	}
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

// toFloat decodes one little-endian element of a real float dtype
// (f64, f32, bf16, f16, fp8).
func toFloat(dt DType, b []byte) float64 { return ElementFloat(dt, b) }

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

// arrayDiffFields is ArrayDiff without its methods (for its JSON form).
type arrayDiffFields ArrayDiff

// arrayDiffJSON is ArrayDiff's JSON form: JSON has no NaN or infinities,
// so every float statistic is a number or null, and Nonfinite names each
// null one with its value ("NaN", "+Inf" or "-Inf"). The finite_*
// statistics are present for float dtypes only.
type arrayDiffJSON struct {
	arrayDiffFields
	MaxAbsDelta        *float64          `json:"max_abs_delta"`
	MeanAbsDelta       *float64          `json:"mean_abs_delta"`
	RelL2              *float64          `json:"rel_l2"`
	FiniteMaxAbsDelta  *float64          `json:"finite_max_abs_delta,omitempty"`
	FiniteMeanAbsDelta *float64          `json:"finite_mean_abs_delta,omitempty"`
	FiniteRelL2        *float64          `json:"finite_rel_l2,omitempty"`
	Nonfinite          map[string]string `json:"nonfinite,omitempty"`
}

// MarshalJSON writes the statistics as numbers, or as null plus an entry
// in "nonfinite" (e.g. "rel_l2": "NaN") where they are NaN or ±Inf; see
// docs/DIFF-JSON.md.
func (d ArrayDiff) MarshalJSON() ([]byte, error) {
	out := arrayDiffJSON{arrayDiffFields: arrayDiffFields(d)}
	set := func(name string, v float64, dst **float64) {
		switch {
		case math.IsNaN(v):
			out.Nonfinite[name] = "NaN"
		case math.IsInf(v, 1):
			out.Nonfinite[name] = "+Inf"
		case math.IsInf(v, -1):
			out.Nonfinite[name] = "-Inf"
		default:
			*dst = &v
			return
		}
	}
	out.Nonfinite = map[string]string{}
	set("max_abs_delta", d.MaxAbsDelta, &out.MaxAbsDelta)
	set("mean_abs_delta", d.MeanAbsDelta, &out.MeanAbsDelta)
	set("rel_l2", d.RelL2, &out.RelL2)
	if dt, err := ParseDType(d.DType); err == nil && dt.IsFloat() {
		set("finite_max_abs_delta", d.FiniteMaxAbsDelta, &out.FiniteMaxAbsDelta)
		set("finite_mean_abs_delta", d.FiniteMeanAbsDelta, &out.FiniteMeanAbsDelta)
		set("finite_rel_l2", d.FiniteRelL2, &out.FiniteRelL2)
	}
	if len(out.Nonfinite) == 0 {
		out.Nonfinite = nil
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (d *ArrayDiff) UnmarshalJSON(b []byte) error {
	var in arrayDiffJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*d = ArrayDiff(in.arrayDiffFields)
	for _, f := range []struct {
		name string
		src  *float64
		dst  *float64
	}{
		{"max_abs_delta", in.MaxAbsDelta, &d.MaxAbsDelta},
		{"mean_abs_delta", in.MeanAbsDelta, &d.MeanAbsDelta},
		{"rel_l2", in.RelL2, &d.RelL2},
		{"finite_max_abs_delta", in.FiniteMaxAbsDelta, &d.FiniteMaxAbsDelta},
		{"finite_mean_abs_delta", in.FiniteMeanAbsDelta, &d.FiniteMeanAbsDelta},
		{"finite_rel_l2", in.FiniteRelL2, &d.FiniteRelL2},
	} {
		*f.dst = 0
		if f.src != nil {
			*f.dst = *f.src
			continue
		}
		switch v := in.Nonfinite[f.name]; v {
		case "":
		case "NaN":
			*f.dst = math.NaN()
		case "+Inf":
			*f.dst = math.Inf(1)
		case "-Inf":
			*f.dst = math.Inf(-1)
		default:
			return fmt.Errorf("snapshot: diff JSON: nonfinite %s: want NaN, +Inf or -Inf (got %d bytes)", f.name, len(v))
		}
	}
	return nil
}
