package diffsvg

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/snapd-ml/snapd/snapshot"
)

// Scale selects the metric a bin's colour shows.
type Scale int

const (
	// ScaleAbs colours by max |Δ| over the bin's changed elements.
	ScaleAbs Scale = iota
	// ScaleRel colours by max |Δ| / max |old| over the same elements.
	ScaleRel
)

func (s Scale) String() string {
	if s == ScaleRel {
		return "relative change (max |Δ| / max |old|)"
	}
	return "max |Δ|"
}

// Defaults and bounds of Options.
const (
	DefaultWidth = 720
	MinWidth     = 16
	MaxWidth     = 4096
	// DefaultMaxStrips bounds the arrays drawn (and the SVG's size).
	DefaultMaxStrips = 512
	// MaxNameRunes is the longest name printed whole.
	MaxNameRunes = 160
	// pieceBytes bounds one read of each side.
	pieceBytes = 1 << 20
	// sampleBinWidth is the width in pixels of a sampled strip's bins.
	sampleBinWidth = 4
)

// Options tune Compute.
type Options struct {
	// Width is the strip width in pixels (bins per strip at most):
	// 0 = DefaultWidth, else within [MinWidth, MaxWidth].
	Width int
	Scale Scale
	// Title is printed at the top (e.g. "gen 000041 → 000042").
	Title string
	// Candidates, when set, returns the row ranges of an array present on
	// both sides (same dtype and shape) that may have changed; only those
	// rows are read. ok=false means every row. Nil: every row of every
	// such array is compared.
	Candidates func(name string) (rows []snapshot.RowRange, ok bool)
	// MaxStrips bounds the arrays drawn; 0 = DefaultMaxStrips.
	MaxStrips int
	// SampleBytes, when > 0, bounds what is read of an array whose
	// candidate rows hold more bytes than that (a dense change): its
	// strip then has bins 4 pixels wide (Width/4 of them, at least
	// MinWidth, at most one per row), each judged by one piece of about
	// SampleBytes/bins bytes of one of its candidate rows (an even bin's
	// last, an odd bin's first, so that neighbours' pieces lie close
	// together; at a column that moves from bin to bin) on each side,
	// instead of every row. Such a strip counts its
	// candidate rows as changed (for WTXT chunks: the rows of chunks that
	// differ) and its statistics are those of the sample (Strip.Sampled).
	// 0: every candidate row is read.
	SampleBytes int64
	// Workers is how many arrays are compared at once (<= 1: one at a
	// time), each with its own read buffers (up to 2 MiB). With more than
	// one, the arrays' Data are read from several goroutines at once,
	// each array's by one at a time: the Sources of different arrays must
	// not share unsynchronised state. The picture is the same for any
	// value.
	Workers int
}

// ErrOptions reports an Options field out of range.
var ErrOptions = errors.New("diffsvg: options")

// Bin is one coloured cell of a strip: the rows [Row0, Row1) of the array.
type Bin struct {
	Index      int     // 0 <= Index < Strip.Bins
	Row0, Row1 int64   // rows of the bin
	Changed    int64   // rows of the bin that changed
	MaxAbs     float64 // max |Δ| over finite changed pairs
	MaxOld     float64 // max |old| over the same elements
	NonFinite  bool    // a change to, from or between NaN/±Inf
}

// Metric is the bin's value on scale s (+Inf for a relative change
// from zero).
func (b *Bin) Metric(s Scale) float64 {
	if s == ScaleRel {
		if b.MaxOld == 0 {
			if b.MaxAbs == 0 {
				return 0
			}
			return math.Inf(1)
		}
		return b.MaxAbs / b.MaxOld
	}
	return b.MaxAbs
}

// Strip is the picture of one array.
type Strip struct {
	Name     string
	Change   snapshot.ArrayChange
	DType    string
	OldDType string
	Shape    []int64
	OldShape []int64
	Rows     int64 // rows along the first dimension (0: nothing to draw)
	Bins     int   // bins across the strip: min(Rows, Width)
	// ChangedRows counts the rows that changed (sampled: the candidate
	// rows, which may have changed).
	ChangedRows int64
	// Sampled is the number of element pairs a sampled strip's
	// statistics come from (Options.SampleBytes); 0 when every candidate
	// row was read.
	Sampled int64
	// Changed lists the bins with a changed row, ascending by Index.
	Changed []Bin
}

// Picture is what Compute found; WriteSVG and WriteHTML draw it.
type Picture struct {
	Title  string
	Scale  Scale
	Width  int
	Strips []Strip
	// Arrays is the number of arrays on either side; Omitted how many of
	// them are not drawn (MaxStrips), OmittedChanged how many of those
	// changed.
	Arrays, Omitted, OmittedChanged int
}

// Compute compares old and new array by array and bins the changed rows.
// Arrays present on one side only, or with another dtype or shape, get a
// strip of their own colour and are not read.
func Compute(ctx context.Context, old, new *snapshot.Snapshot, opts Options) (*Picture, error) {
	if opts.Width == 0 {
		opts.Width = DefaultWidth
	}
	if opts.Width < MinWidth || opts.Width > MaxWidth {
		return nil, fmt.Errorf("%w: width %d not in [%d, %d]", ErrOptions, opts.Width, MinWidth, MaxWidth)
	}
	if opts.MaxStrips == 0 {
		opts.MaxStrips = DefaultMaxStrips
	}
	if opts.MaxStrips < 1 {
		return nil, fmt.Errorf("%w: max strips %d < 1", ErrOptions, opts.MaxStrips)
	}
	if opts.Scale != ScaleAbs && opts.Scale != ScaleRel {
		return nil, fmt.Errorf("%w: unknown scale %d", ErrOptions, opts.Scale)
	}
	byName := func(s *snapshot.Snapshot) map[string]*snapshot.Array {
		m := map[string]*snapshot.Array{}
		if s != nil {
			for _, a := range s.Arrays {
				m[a.Name] = a
			}
		}
		return m
	}
	om, nm := byName(old), byName(new)
	var names []string
	for n := range om {
		names = append(names, n)
	}
	for n := range nm {
		if om[n] == nil {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, naturalCompare)
	p := &Picture{Title: opts.Title, Scale: opts.Scale, Width: opts.Width, Arrays: len(names)}
	p.Strips = make([]Strip, len(names))
	if err := strips(ctx, p.Strips, names, om, nm, opts); err != nil {
		return nil, err
	}
	p.limit(opts.MaxStrips)
	return p, nil
}

// strips fills out[i] with the strip of names[i], opts.Workers arrays at
// a time. A failure stops the others; the error returned is a failing
// array's (with one worker, the first in names order).
func strips(ctx context.Context, out []Strip, names []string, om, nm map[string]*snapshot.Array, opts Options) error {
	one := func(ctx context.Context, i int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		s, err := strip(ctx, om[names[i]], nm[names[i]], opts)
		out[i] = s
		return err
	}
	workers := min(opts.Workers, len(names))
	if workers <= 1 {
		for i := range names {
			if err := one(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(names))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(names) {
					return
				}
				if errs[i] = one(ctx, i); errs[i] != nil {
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	return firstFailure(errs)
}

// firstFailure returns the first error of errs that is not a
// cancellation (one array's failure cancels the others), else the first
// error (the caller's context was cancelled), else nil.
func firstFailure(errs []error) error {
	var first error
	for _, err := range errs {
		switch {
		case err == nil:
		case !errors.Is(err, context.Canceled):
			return err
		case first == nil:
			first = err
		}
	}
	return first
}

// limit keeps at most n strips: unchanged ones go first, then the changed
// ones past n (their count is kept in OmittedChanged).
func (p *Picture) limit(n int) {
	if len(p.Strips) <= n {
		return
	}
	kept := p.Strips[:0:0]
	for _, s := range p.Strips {
		if s.Change != snapshot.Unchanged {
			kept = append(kept, s)
		}
	}
	p.Omitted = len(p.Strips) - len(kept)
	if len(kept) > n {
		p.OmittedChanged = len(kept) - n
		p.Omitted += p.OmittedChanged
		kept = kept[:n]
	}
	p.Strips = kept
}

func strip(ctx context.Context, a, b *snapshot.Array, opts Options) (Strip, error) {
	switch {
	case a == nil:
		return Strip{Name: b.Name, Change: snapshot.Added, DType: b.DType.String(), Shape: b.Shape}, nil
	case b == nil:
		return Strip{Name: a.Name, Change: snapshot.Removed, DType: a.DType.String(), Shape: a.Shape}, nil
	}
	s := Strip{Name: b.Name, DType: b.DType.String(), Shape: b.Shape}
	if a.DType != b.DType {
		s.Change, s.OldDType, s.OldShape = snapshot.Retyped, a.DType.String(), a.Shape
		return s, nil
	}
	if !slices.Equal(a.Shape, b.Shape) {
		s.Change, s.OldShape = snapshot.Reshaped, a.Shape
		return s, nil
	}
	s.Change = snapshot.Unchanged
	rowSize, rows := snapshot.RowGeometry(b)
	esz := int64(b.DType.Size())
	if _, err := b.NumBytes(); err != nil || rowSize <= 0 || rows <= 0 || esz <= 0 || rowSize%esz != 0 {
		return s, nil // nothing to compare (zero rows, zero-size rows) or a shape that overflows
	}
	s.Rows = rows
	s.Bins = int(min(rows, int64(opts.Width)))
	ranges := []snapshot.RowRange{{Start: 0, End: rows}}
	if opts.Candidates != nil {
		if c, ok := opts.Candidates(b.Name); ok {
			ranges = clampRanges(c, rows)
		}
	}
	w := binWalker{s: &s, rowSize: rowSize, rows: rows, dt: b.DType, esz: esz, lastRow: -1}
	if opts.SampleBytes > 0 {
		var cand int64 // <= rows×rowSize, which fits an int64
		for _, r := range ranges {
			cand += (r.End - r.Start) * rowSize
		}
		if cand > opts.SampleBytes {
			// A quarter of the bins: each costs a read on each side.
			s.Bins = int(min(rows, int64(max(MinWidth, opts.Width/sampleBinWidth))))
			w.reserve(ranges)
			err := w.sample(ctx, a, b, ranges, opts.SampleBytes)
			if s.ChangedRows > 0 {
				s.Change = snapshot.Modified
			}
			return s, err
		}
	}
	w.reserve(ranges)
	bufA := make([]byte, min(pieceBytes, rowSize*min(rows, max(1, pieceBytes/rowSize))))
	bufA = bufA[:len(bufA)-len(bufA)%int(esz)]
	if len(bufA) == 0 {
		bufA = make([]byte, esz)
	}
	bufB := make([]byte, len(bufA))
	for _, r := range ranges {
		// r.Start < r.End <= rows, and rows×rowSize fits an int64
		// (NumBytes checked it).
		for off, end := r.Start*rowSize, r.End*rowSize; off < end; {
			if err := ctx.Err(); err != nil {
				return s, err
			}
			n := min(int64(len(bufA)), end-off)
			pa, pb := bufA[:n], bufB[:n]
			if err := readAt(a.Data, pa, off); err != nil {
				return s, fmt.Errorf("array %q (old): rows from %d: %w", a.Name, off/rowSize, err)
			}
			if err := readAt(b.Data, pb, off); err != nil {
				return s, fmt.Errorf("array %q (new): rows from %d: %w", b.Name, off/rowSize, err)
			}
			if !bytes.Equal(pa, pb) {
				w.piece(pa, pb, off)
			}
			off += n
		}
	}
	w.flush()
	if s.ChangedRows > 0 {
		s.Change = snapshot.Modified
	}
	return s, nil
}

func readAt(src snapshot.Source, p []byte, off int64) error {
	if src == nil {
		return errors.New("no data")
	}
	return snapshot.ReadFullAt(src, p, off)
}

// clampRanges sorts and merges rs and clips them to [0, rows).
func clampRanges(rs []snapshot.RowRange, rows int64) []snapshot.RowRange {
	c := make([]snapshot.RowRange, 0, len(rs))
	for _, r := range rs {
		r.Start, r.End = max(r.Start, 0), min(r.End, rows)
		if r.Start < r.End {
			c = append(c, r)
		}
	}
	slices.SortFunc(c, func(x, y snapshot.RowRange) int {
		if x.Start != y.Start {
			return cmpInt(x.Start, y.Start)
		}
		return cmpInt(x.End, y.End)
	})
	out := c[:0]
	for _, r := range c {
		if k := len(out); k > 0 && r.Start <= out[k-1].End {
			out[k-1].End = max(out[k-1].End, r.End)
			continue
		}
		out = append(out, r)
	}
	return out
}

// binsTouched is how many of bins bins hold rows of ranges (sorted,
// merged, within rows, as clampRanges returns them): the most a walk of
// them fills, at most bins.
func binsTouched(ranges []snapshot.RowRange, rows int64, bins int) int {
	n, last := 0, -1
	for _, r := range ranges {
		b0, b1 := binOf(r.Start, rows, bins), binOf(r.End-1, rows, bins)
		if b0 == last {
			b0++
		}
		if b1 >= b0 {
			n += b1 - b0 + 1
		}
		last = b1
	}
	return n
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// binOf returns floor(row·bins/rows) without overflow (0 <= row < rows).
func binOf(row, rows int64, bins int) int {
	hi, lo := bits.Mul64(uint64(row), uint64(bins))
	q, _ := bits.Div64(hi, lo, uint64(rows))
	return int(q)
}

// binStart returns the first row of bin i: ceil(i·rows/bins).
func binStart(i int, rows int64, bins int) int64 {
	hi, lo := bits.Mul64(uint64(i), uint64(rows))
	q, r := bits.Div64(hi, lo, uint64(bins))
	if r != 0 {
		q++
	}
	return int64(q)
}

// binWalker accumulates changed elements into the strip's bins; rows
// arrive in ascending order.
type binWalker struct {
	s       *Strip
	rowSize int64
	rows    int64
	dt      snapshot.DType
	esz     int64
	lastRow int64
	cur     *Bin // nil, or &bin: the bin being filled
	bin     Bin
}

// reserve sizes the strip's Changed for the bins ranges touch (one
// allocation instead of a doubling per power of two).
func (w *binWalker) reserve(ranges []snapshot.RowRange) {
	if n := binsTouched(ranges, w.rows, w.s.Bins); n > 0 {
		w.s.Changed = make([]Bin, 0, n)
	}
}

// open makes b the bin being filled.
func (w *binWalker) open(b Bin) {
	w.bin = b
	w.cur = &w.bin
}

func (w *binWalker) piece(a, b []byte, off int64) {
	for i := int64(0); i < int64(len(a)); i += w.esz {
		x, y := a[i:i+w.esz], b[i:i+w.esz]
		if string(x) == string(y) {
			continue
		}
		row := (off + i) / w.rowSize
		if row != w.lastRow {
			bin := binOf(row, w.rows, w.s.Bins)
			if w.cur == nil || w.cur.Index != bin {
				w.flush()
				w.open(Bin{Index: bin, Row0: binStart(bin, w.rows, w.s.Bins), Row1: binStart(bin+1, w.rows, w.s.Bins)})
			}
			w.cur.Changed++
			w.s.ChangedRows++
			w.lastRow = row
		}
		w.element(x, y)
	}
}

// element adds the change of one element from x to y (which differ) to
// the current bin.
func (w *binWalker) element(x, y []byte) {
	var d, mo float64
	if w.dt.IsComplex() {
		// Complex: the modulus of the difference; non-finite when
		// either part of either side is.
		or, oi := snapshot.ElementComplex(w.dt, x)
		nr, ni := snapshot.ElementComplex(w.dt, y)
		if !finite(or) || !finite(oi) || !finite(nr) || !finite(ni) {
			w.cur.NonFinite = true
			return
		}
		d, mo = math.Hypot(nr-or, ni-oi), math.Hypot(or, oi)
	} else {
		xo, xn := value(w.dt, x), value(w.dt, y)
		if !finite(xo) || !finite(xn) {
			w.cur.NonFinite = true
			return
		}
		d, mo = math.Abs(xn-xo), math.Abs(xo)
	}
	if math.IsInf(d, 0) { // two huge finite values of opposite sign
		w.cur.NonFinite = true
		return
	}
	w.cur.MaxAbs = max(w.cur.MaxAbs, d)
	w.cur.MaxOld = max(w.cur.MaxOld, mo)
}

// Piece is one request of PieceReader.ReadPieces: the len(Buf) bytes at
// offset Off.
type Piece struct {
	Off int64
	Buf []byte
}

// PieceReader is implemented by a snapshot.Source that reads several
// small pieces at once more cheaply than with one ReadAt each (chunkdiff's
// WTXT arrays: pieces close together in the file share one pread). The
// sampler (Options.SampleBytes) reads its pieces through it when the
// Source has it, in batches of at most sampleBatch.
type PieceReader interface {
	// ReadPieces fills every piece's Buf with the bytes at its Off. The
	// pieces come in ascending Off order and do not overlap; one that is
	// not inside the Source is an error.
	ReadPieces(ps []Piece) error
}

// sampleBatch is the number of bins whose pieces the sampler reads
// together (and how often it checks its context).
const sampleBatch = 64

// sample fills the strip from a bounded sample (Options.SampleBytes):
// every bin holding candidate rows (ranges: sorted, merged, within the
// array) counts them as changed and compares one piece of per bytes of
// one of them, at a column that moves from bin to bin so that the
// samples cover the rows' width. An even bin's piece is in its last
// candidate row, an odd bin's in its first, so that for a dense change
// the pieces of bins 2j and 2j+1 lie in adjacent rows, close together in
// the source (a PieceReader reads them with one read when rows are
// narrow).
func (w *binWalker) sample(ctx context.Context, a, b *snapshot.Array, ranges []snapshot.RowRange, budget int64) error {
	s := w.s
	per := max(w.esz, budget/int64(s.Bins)/w.esz*w.esz)
	per = min(per, w.rowSize)   // rowSize is a multiple of esz
	span := w.rowSize - per + 1 // columns where a piece may start
	// One batch of bins: bins with their rows, and their pieces of each
	// side in bufA and bufB.
	type pick struct {
		bin       int
		r0, r1, n int64 // the bin's rows, n of them candidates
		row       int64 // the row of the piece
	}
	k := min(sampleBatch, s.Bins)
	picks := make([]pick, 0, k)
	bufA, bufB := make([]byte, int64(k)*per), make([]byte, int64(k)*per)
	pa, pb := make([]Piece, 0, k), make([]Piece, 0, k)
	judge := func() error {
		if len(picks) == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rows := func() string { return fmt.Sprintf("rows %d to %d sampled", picks[0].row, picks[len(picks)-1].row) }
		if err := readPieces(a.Data, pa); err != nil {
			return fmt.Errorf("array %q (old): %s: %w", a.Name, rows(), err)
		}
		if err := readPieces(b.Data, pb); err != nil {
			return fmt.Errorf("array %q (new): %s: %w", b.Name, rows(), err)
		}
		for i, p := range picks {
			x, y := pa[i].Buf, pb[i].Buf
			w.open(Bin{Index: p.bin, Row0: p.r0, Row1: p.r1, Changed: p.n})
			w.elements(x, y)
			s.ChangedRows += p.n
			s.Sampled += per / w.esz
			w.flush()
		}
		picks, pa, pb = picks[:0], pa[:0], pb[:0]
		return nil
	}
	ri := 0
	for bin := 0; bin < s.Bins; bin++ {
		r0, r1 := binStart(bin, w.rows, s.Bins), binStart(bin+1, w.rows, s.Bins)
		for ri < len(ranges) && ranges[ri].End <= r0 {
			ri++
		}
		var n, first, last int64 = 0, -1, -1
		for j := ri; j < len(ranges) && ranges[j].Start < r1; j++ {
			lo, hi := max(ranges[j].Start, r0), min(ranges[j].End, r1)
			if first < 0 {
				first = lo
			}
			last = hi - 1
			n += hi - lo
		}
		if n == 0 {
			continue
		}
		row := first
		if bin%2 == 0 {
			row = last
		}
		col := int64(bin) % max(1, span/per) * per
		off, i := row*w.rowSize+col, int64(len(picks))
		picks = append(picks, pick{bin: bin, r0: r0, r1: r1, n: n, row: row})
		pa = append(pa, Piece{Off: off, Buf: bufA[i*per : (i+1)*per]})
		pb = append(pb, Piece{Off: off, Buf: bufB[i*per : (i+1)*per]})
		if len(picks) == k {
			if err := judge(); err != nil {
				return err
			}
		}
	}
	return judge()
}

// elements adds the changed elements of the pieces x and y (of equal
// length, a multiple of esz) to the current bin, as element does one by
// one; f32, what most weights are, is decoded in line.
func (w *binWalker) elements(x, y []byte) {
	if w.dt != snapshot.F32 {
		for j := int64(0); j < int64(len(x)); j += w.esz {
			if u, v := x[j:j+w.esz], y[j:j+w.esz]; string(u) != string(v) {
				w.element(u, v)
			}
		}
		return
	}
	const exp = 0x7f800000 // all ones: ±Inf or NaN
	b := w.cur
	for j := 0; j+4 <= len(x) && j+4 <= len(y); j += 4 {
		u, v := binary.LittleEndian.Uint32(x[j:]), binary.LittleEndian.Uint32(y[j:])
		switch {
		case u == v:
		case u&exp == exp || v&exp == exp:
			b.NonFinite = true
		default:
			// Two finite f32 differ by less than the f64 range: no +Inf.
			xo, xn := float64(math.Float32frombits(u)), float64(math.Float32frombits(v))
			b.MaxAbs = max(b.MaxAbs, math.Abs(xn-xo))
			b.MaxOld = max(b.MaxOld, math.Abs(xo))
		}
	}
}

// readPieces fills ps from src: with one ReadPieces when src is a
// PieceReader, else with a ReadAt each.
func readPieces(src snapshot.Source, ps []Piece) error {
	if pr, ok := src.(PieceReader); ok {
		return pr.ReadPieces(ps)
	}
	for _, p := range ps {
		if err := readAt(src, p.Buf, p.Off); err != nil {
			return err
		}
	}
	return nil
}

func (w *binWalker) flush() {
	if w.cur != nil {
		w.s.Changed = append(w.s.Changed, *w.cur)
		w.cur = nil
	}
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// value decodes one little-endian element of a real dtype as a float64.
func value(dt snapshot.DType, b []byte) float64 {
	switch dt {
	case snapshot.F8E4M3, snapshot.F8E5M2, snapshot.F8E8M0:
		return snapshot.ElementFloat(dt, b)
	case snapshot.F64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case snapshot.F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case snapshot.BF16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	case snapshot.F16:
		return f16(binary.LittleEndian.Uint16(b))
	case snapshot.I64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case snapshot.U64:
		return float64(binary.LittleEndian.Uint64(b))
	case snapshot.I32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case snapshot.U32:
		return float64(binary.LittleEndian.Uint32(b))
	case snapshot.I16:
		return float64(int16(binary.LittleEndian.Uint16(b)))
	case snapshot.U16:
		return float64(binary.LittleEndian.Uint16(b))
	case snapshot.I8:
		return float64(int8(b[0]))
	case snapshot.U8, snapshot.Bool:
		return float64(b[0])
	}
	return 0
}

// f16 converts IEEE 754 binary16 bits.
func f16(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10)&0x1f, float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 0x1f:
		if frac == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	}
	return sign * math.Ldexp(1+frac/1024, exp-15)
}

// naturalCompare orders names with digit runs compared as numbers
// ("layers.2" < "layers.10"), then bytewise, so the order is total.
func naturalCompare(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		ca, cb := a[i], b[j]
		if isDigit(ca) && isDigit(cb) {
			si, sj := i, j
			for i < len(a) && isDigit(a[i]) {
				i++
			}
			for j < len(b) && isDigit(b[j]) {
				j++
			}
			da, db := trimZeros(a[si:i]), trimZeros(b[sj:j])
			if len(da) != len(db) {
				return cmpInt(int64(len(da)), int64(len(db)))
			}
			if c := bytes.Compare([]byte(da), []byte(db)); c != 0 {
				return c
			}
			continue
		}
		if ca != cb {
			return cmpInt(int64(ca), int64(cb))
		}
		i++
		j++
	}
	if c := cmpInt(int64(len(a)-i), int64(len(b)-j)); c != 0 {
		return c
	}
	return bytes.Compare([]byte(a), []byte(b))
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func trimZeros(s string) string {
	for len(s) > 1 && s[0] == '0' {
		s = s[1:]
	}
	return s
}
