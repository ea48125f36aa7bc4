package numpy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// loc says where an .npy stream lives, for errors.
type loc struct {
	file, member string
	// base is the file offset of the stream's first byte, or -1 when the
	// stream is an inflated member (offsets are then member offsets).
	base int64
}

func (l loc) fail(rel int64, sentinel error, format string, a ...any) error {
	check := fmt.Sprintf(format, a...)
	off := int64(-1)
	if l.base >= 0 {
		off = l.base + rel
	} else {
		check = fmt.Sprintf("inflated member offset %d: %s", rel, check)
	}
	return &Error{Format: "numpy", File: l.file, Part: memberWhere(l.member), Offset: off, Check: check, Err: sentinel}
}

// Decode implements formats.Codec. See the package documentation for what
// it accepts. Array data aliases r when r is memory-backed and the array
// is stored C-order little-endian (or, in an .npz, in a stored member).
func (c Codec) Decode(ctx context.Context, r io.ReaderAt, size int64, opts formats.DecodeOptions) (*snapshot.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	bud := &budget{left: c.budget(), file: opts.Budget(size), cache: &blockCache{}}
	if c.NPZ {
		return decodeNPZ(ctx, r, size, opts.Name, bud)
	}
	a, err := decodeNPY(r, 0, size, loc{file: opts.Name}, bud)
	if err != nil {
		return nil, err
	}
	a.Name = DefaultArrayName
	return &snapshot.Snapshot{Meta: snapshot.DefaultMeta(), Arrays: []*snapshot.Array{a}}, nil
}

// decodeNPY parses the .npy stream of size bytes at r[base:]. The array
// has no name yet.
func decodeNPY(r io.ReaderAt, base, size int64, l loc, bud *budget) (*snapshot.Array, error) {
	if size < 10 {
		return nil, l.fail(0, ErrCorrupt, "%d bytes, a .npy header needs at least 10", size)
	}
	var pre [12]byte
	n := int64(len(pre))
	if size < n {
		n = size
	}
	if err := snapshot.ReadFullAt(r, pre[:n], base); err != nil {
		return nil, l.fail(0, ErrCorrupt, "read .npy prefix: %v", err)
	}
	if string(pre[:6]) != npyMagic {
		return nil, l.fail(0, ErrCorrupt, "magic is not \\x93NUMPY")
	}
	major, minor := pre[6], pre[7]
	if major < 1 || major > 3 || minor != 0 {
		return nil, l.fail(6, ErrUnsupported, "format version %d.%d (known: 1.0, 2.0, 3.0)", major, minor)
	}
	plen := int64(prefixLen(major))
	if size < plen {
		return nil, l.fail(8, ErrCorrupt, "%d bytes end inside the header length field", size)
	}
	var hlen int64
	if major == 1 {
		hlen = int64(binary.LittleEndian.Uint16(pre[8:10]))
	} else {
		hlen = int64(binary.LittleEndian.Uint32(pre[8:12]))
	}
	if hlen > MaxHeaderSize {
		return nil, l.fail(8, ErrLimit, "header length %d exceeds the limit of %d bytes", hlen, MaxHeaderSize)
	}
	if hlen > size-plen {
		return nil, l.fail(8, ErrCorrupt, "header length %d exceeds the %d bytes after the length field", hlen, size-plen)
	}
	var text []byte
	if b, ok := snapshot.BytesOf(r); ok && int64(len(b)) >= base+plen+hlen {
		text = b[base+plen : base+plen+hlen]
	} else {
		text = make([]byte, hlen)
		if err := snapshot.ReadFullAt(r, text, base+plen); err != nil {
			return nil, l.fail(plen, ErrCorrupt, "read header: %v", err)
		}
	}
	h, err := parseHeader(text, major)
	if err != nil {
		var he *headerError
		if errors.As(err, &he) {
			sentinel := ErrCorrupt
			if he.unsupported {
				sentinel = ErrUnsupported
			}
			return nil, l.fail(plen+int64(he.pos), sentinel, "%s", he.msg)
		}
		return nil, l.fail(plen, ErrCorrupt, "%v", err)
	}
	a := &snapshot.Array{DType: h.dtype.dt, Shape: h.shape}
	nbytes, err := a.NumBytes()
	if err != nil {
		return nil, l.fail(plen, ErrLimit, "shape of %d dimensions: byte size overflows int64", len(h.shape))
	}
	dataOff := plen + hlen
	if avail := size - dataOff; nbytes > avail {
		return nil, l.fail(dataOff, ErrCorrupt, "array data needs %d bytes (descr and shape), %d follow the header", nbytes, avail)
	} else if nbytes < avail {
		return nil, l.fail(dataOff+nbytes, ErrCorrupt, "%d bytes after the array data", avail-nbytes)
	}
	lay, ok := newLayout(h.dtype, h.big, h.fortran, h.shape)
	if !ok {
		return nil, l.fail(plen, ErrUnsupported, "big-endian complex array in Fortran order")
	}
	if lay.trivial() {
		a.Data = snapshot.Section(r, base+dataOff, nbytes)
	} else {
		var stored []byte
		var rel io.ReaderAt
		if b, ok := snapshot.BytesOf(r); ok && int64(len(b)) >= base+dataOff+nbytes {
			stored = b[base+dataOff : base+dataOff+nbytes]
			rel = r
		} else {
			if !bud.take(nbytes) {
				return nil, l.fail(dataOff, ErrLimit, "array of %d bytes must be converted in memory and exceeds the remaining budget of %d bytes", nbytes, bud.left)
			}
			// An inflated member was charged to the file's budget when
			// it was declared; other copies are charged here.
			if l.base >= 0 && bud.file != nil {
				if rem := bud.file.Remaining(); bud.file.Take(nbytes, "") != nil {
					return nil, l.fail(dataOff, ErrLimit, "array of %d bytes must be copied into memory and exceeds the remaining decode budget of %d bytes (%d for this file; DecodeOptions.MaxDecoded)", nbytes, rem, bud.file.Limit())
				}
			}
			stored = make([]byte, nbytes)
			if err := snapshot.ReadFullAt(r, stored, base+dataOff); err != nil {
				return nil, l.fail(dataOff, ErrCorrupt, "read array data: %v", err)
			}
		}
		a.Data = newConvSource(lay, stored, rel, base+dataOff, bud.cache)
	}
	attrs := map[string]string{}
	if major != 1 {
		attrs[AttrVersion] = fmt.Sprintf("%d.0", major)
	}
	if h.fortran {
		attrs[AttrFortranOrder] = "true"
	}
	if h.big {
		attrs[AttrByteOrder] = "big"
	}
	if string(text) != wrapHeader(canonicalText(h), major) {
		attrs[AttrHeader] = string(text)
	}
	if len(attrs) > 0 {
		a.Attrs = attrs
	}
	return a, nil
}

// npyPlan is what Encode writes for one array.
type npyPlan struct {
	a      *snapshot.Array
	major  byte
	text   string // padded header text
	lay    layout
	nbytes int64
}

// size returns the .npy stream's length.
func (p *npyPlan) size() int64 { return int64(prefixLen(p.major)) + int64(len(p.text)) + p.nbytes }

var arrayAttrs = map[string]bool{
	AttrVersion: true, AttrFortranOrder: true, AttrByteOrder: true, AttrHeader: true,
	AttrName: true, AttrZipMethod: true, AttrZipMTime: true,
}

// planNPY checks a and its numpy.* attributes. It returns an error
// wrapping formats.ErrLossy when NumPy has no dtype for a, or
// ErrInvalidSnapshot.
func planNPY(a *snapshot.Array) (*npyPlan, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("numpy: array %q: %s: %w", a.Name, fmt.Sprintf(format, args...), ErrInvalidSnapshot)
	}
	d, ok := dtypeFor(a.DType)
	if !ok {
		return nil, &formats.DTypeError{Format: "numpy", Array: a.Name, DType: a.DType, Why: "NumPy has no bf16 or fp8 dtype"}
	}
	for k := range a.Attrs {
		if len(k) > len(attrPrefix) && k[:len(attrPrefix)] == attrPrefix && !arrayAttrs[k] {
			return nil, bad("unknown attribute %s", k)
		}
	}
	if len(a.Shape) > MaxDims {
		return nil, bad("%d dimensions, NumPy allows %d", len(a.Shape), MaxDims)
	}
	nbytes, err := a.NumBytes()
	if err != nil {
		return nil, bad("%v", err)
	}
	if a.Data != nil && a.Data.Size() != nbytes || a.Data == nil && nbytes != 0 {
		return nil, bad("data size does not match shape and dtype")
	}
	p := &npyPlan{a: a, major: 1, nbytes: nbytes}
	switch v, ok := a.Attrs[AttrVersion]; {
	case !ok:
	case v == "2.0":
		p.major = 2
	case v == "3.0":
		p.major = 3
	default:
		return nil, bad("%s must be 2.0 or 3.0", AttrVersion)
	}
	h := &header{dtype: d, shape: a.Shape}
	if v, ok := a.Attrs[AttrFortranOrder]; ok {
		if v != "true" {
			return nil, bad("%s must be true", AttrFortranOrder)
		}
		h.fortran = true
	}
	if v, ok := a.Attrs[AttrByteOrder]; ok {
		if v != "big" || d.size == 1 {
			return nil, bad("%s must be big, and only for multi-byte dtypes", AttrByteOrder)
		}
		h.big = true
	}
	if v, ok := a.Attrs[AttrHeader]; ok {
		g, err := parseHeader([]byte(v), p.major)
		if err != nil {
			return nil, bad("%s does not parse: %v", AttrHeader, err)
		}
		if g.dtype != h.dtype || g.big != h.big || g.fortran != h.fortran || !reflect.DeepEqual(g.shape, h.shape) {
			return nil, bad("%s does not describe the array's dtype, byte order, order and shape", AttrHeader)
		}
		p.text = v
	} else {
		p.text = wrapHeader(canonicalText(h), p.major)
	}
	if !versionFits(p.major, len(p.text)) {
		return nil, bad("header of %d bytes does not fit format version %d.0", len(p.text), p.major)
	}
	lay, ok := newLayout(d, h.big, h.fortran, a.Shape)
	if !ok {
		return nil, bad("a big-endian complex array in Fortran order is not supported")
	}
	p.lay = lay
	return p, nil
}

// writeNPY writes the .npy stream of p to w.
func writeNPY(ctx context.Context, w io.Writer, p *npyPlan, bud *budget) error {
	pre := make([]byte, 0, 12+len(p.text))
	pre = append(pre, npyMagic...)
	pre = append(pre, p.major, 0)
	if p.major == 1 {
		pre = binary.LittleEndian.AppendUint16(pre, uint16(len(p.text)))
	} else {
		pre = binary.LittleEndian.AppendUint32(pre, uint32(len(p.text)))
	}
	pre = append(pre, p.text...)
	if _, err := w.Write(pre); err != nil {
		return err
	}
	if p.nbytes == 0 {
		return nil
	}
	src := p.a.Data
	var buf []byte
	switch {
	case p.lay.trivial():
		return snapshot.CopyTo(ctx, w, src, p.nbytes, &buf)
	case !p.lay.transposes():
		buf = make([]byte, min(p.nbytes, copyPiece))
		for off := int64(0); off < p.nbytes; {
			if err := ctx.Err(); err != nil {
				return err
			}
			k := min(int64(len(buf)), p.nbytes-off)
			if err := snapshot.ReadFullAt(src, buf[:k], off); err != nil {
				return fmt.Errorf("numpy: array %q: read data at %d: %w", p.a.Name, off, err)
			}
			swapInPlace(buf[:k], p.lay.esize)
			if _, err := w.Write(buf[:k]); err != nil {
				return err
			}
			off += k
		}
		return nil
	}
	// Fortran order: gather from the C-order bytes, which must be in
	// memory (a mapped file, or read within the budget).
	cb, ok := snapshot.BytesOf(src)
	if !ok || int64(len(cb)) < p.nbytes {
		if !bud.take(p.nbytes) {
			return writeFortranPasses(ctx, w, p, bud)
		}
		defer bud.give(p.nbytes)
		cb = make([]byte, p.nbytes)
		if err := snapshot.ReadFullAt(src, cb, 0); err != nil {
			return fmt.Errorf("numpy: array %q: read data: %w", p.a.Name, err)
		}
	}
	// Fortran order of shape is C order of the reversed shape, and the C
	// bytes are its Fortran bytes: write rows of the reversed shape's
	// dimension 0 (the last dimension) a piece at a time.
	rev := make([]int64, len(p.a.Shape))
	for i, d := range p.a.Shape {
		rev[len(rev)-1-i] = d
	}
	es := int64(p.lay.esize)
	row := p.nbytes / es / rev[0] // elements per row; nbytes > 0 so rev[0] > 0
	if row*es > copyPiece {
		// rows too long for one piece: element by element
		strides := cStrides(p.a.Shape)
		total := p.nbytes / es
		perPiece := int64(copyPiece) / es
		buf = make([]byte, perPiece*es)
		for e := int64(0); e < total; {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(perPiece, total-e)
			gather(buf[:n*es], cb, p.a.Shape, strides, false, e, n, p.lay.esize, p.lay.swap)
			if _, err := w.Write(buf[:n*es]); err != nil {
				return err
			}
			e += n
		}
		return nil
	}
	rowsPer := max(1, int64(copyPiece)/es/row)
	buf = make([]byte, min(rowsPer, rev[0])*row*es)
	for a := int64(0); a < rev[0]; {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := min(a+rowsPer, rev[0])
		out := buf[:(b-a)*row*es]
		boxC(out, cb, rev, a, b, p.lay.esize, p.lay.swap)
		if _, err := w.Write(out); err != nil {
			return err
		}
		a = b
	}
	return nil
}

// copyPiece is how many bytes Encode converts between context checks.
const copyPiece = 4 << 20

// Encode implements formats.Codec: a .npy file for a snapshot of exactly
// one array, or an .npz archive (see the package documentation). Arrays
// whose dtype NumPy lacks (bf16) fail with formats.ErrLossy unless
// opts.Lossy, which drops them.
func (c Codec) Encode(ctx context.Context, w io.Writer, s *snapshot.Snapshot, opts formats.EncodeOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	bud := &budget{left: c.budget()}
	if c.NPZ {
		return encodeNPZ(ctx, w, s, opts, bud, c.zip64Limit())
	}
	var plans []*npyPlan
	for _, a := range s.Arrays {
		p, err := planNPY(a)
		if err != nil {
			if opts.Lossy && errors.Is(err, formats.ErrLossy) {
				opts.Drop(formats.DroppedDType(c.Name(), a.Name, a.DType, "NumPy has no bf16 or fp8 dtype"))
				continue
			}
			return err
		}
		plans = append(plans, p)
	}
	if len(plans) != 1 {
		return fmt.Errorf("numpy: a .npy file holds exactly one array, the snapshot has %d (write an .npz): %w", len(plans), ErrInvalidSnapshot)
	}
	return writeNPY(ctx, w, plans[0], bud)
}

// writeFortranPasses writes the Fortran-order data of p from a source that
// is not memory backed and does not fit the budget: each pass reads the
// whole source sequentially and fills, in a buffer within the budget, the
// output for a range of indices of the last dimension (the slowest in
// Fortran order). It fails with ErrLimit only when not even one index of
// the last dimension fits.
func writeFortranPasses(ctx context.Context, w io.Writer, p *npyPlan, bud *budget) error {
	shape := p.a.Shape
	n := len(shape)
	es := int64(p.lay.esize)
	last := shape[n-1]
	R := p.nbytes / es / last // elements per index of the last dimension
	slice := R * es
	cols := min(bud.left/slice, last)
	if cols < 1 {
		return fmt.Errorf("numpy: array %q: writing Fortran order needs at least %d bytes in memory, beyond the remaining budget of %d bytes: %w", p.a.Name, slice, bud.left, ErrLimit)
	}
	bud.take(cols * slice)
	defer bud.give(cols * slice)
	piece := make([]byte, cols*slice)
	rowBytes := last * es
	rowsPerRead := max(1, int64(copyPiece)/rowBytes)
	var buf []byte
	if rowBytes <= copyPiece {
		buf = make([]byte, min(rowsPerRead, R)*rowBytes)
	} else {
		buf = make([]byte, cols*es)
	}
	fstr := fortranStrides(shape[:n-1])
	idx := make([]int64, n-1)
	for a := int64(0); a < last; a += cols {
		b := min(a+cols, last)
		clear(idx)
		var rF int64
		advance := func() {
			for k := n - 2; k >= 0; k-- {
				idx[k]++
				rF += fstr[k]
				if idx[k] < shape[k] {
					return
				}
				rF -= idx[k] * fstr[k]
				idx[k] = 0
			}
		}
		for q := int64(0); q < R; {
			if err := ctx.Err(); err != nil {
				return err
			}
			if rowBytes > copyPiece {
				part := buf[:(b-a)*es]
				if err := snapshot.ReadFullAt(p.a.Data, part, q*rowBytes+a*es); err != nil {
					return fmt.Errorf("numpy: array %q: read data at %d: %w", p.a.Name, q*rowBytes+a*es, err)
				}
				copyStrided(piece[rF*es:], part, slice, b-a, p.lay.esize, p.lay.swap)
				advance()
				q++
				continue
			}
			k := min(rowsPerRead, R-q)
			rows := buf[:k*rowBytes]
			if err := snapshot.ReadFullAt(p.a.Data, rows, q*rowBytes); err != nil {
				return fmt.Errorf("numpy: array %q: read data at %d: %w", p.a.Name, q*rowBytes, err)
			}
			for i := int64(0); i < k; i++ {
				copyStrided(piece[rF*es:], rows[i*rowBytes+a*es:i*rowBytes+b*es], slice, b-a, p.lay.esize, p.lay.swap)
				advance()
			}
			q += k
		}
		if _, err := w.Write(piece[:(b-a)*slice]); err != nil {
			return err
		}
	}
	return nil
}
