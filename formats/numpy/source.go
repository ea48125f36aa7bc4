package numpy

import (
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"sync"

	"github.com/snapd-ml/snapd/snapshot"
)

// layout maps between the C-order little-endian bytes a snapshot holds and
// the bytes a .npy file stores (Fortran order and/or big-endian).
type layout struct {
	esize   int
	swap    bool    // elements are stored big-endian
	fortran bool    // stored in Fortran (column-major) order
	shape   []int64 // logical (C) shape
}

// newLayout is the layout of an array of dtype d and logical shape. A
// big-endian complex element is two big-endian floats: when nothing is
// transposed it is swapped as its two parts (a trailing dimension of 2
// of the part size, in C order, which is the same bytes); ok is false for
// a big-endian complex array that must also be transposed (not
// supported).
func newLayout(d dtypeInfo, big, fortran bool, shape []int64) (l layout, ok bool) {
	l = layout{esize: d.size, swap: big, fortran: fortran, shape: shape}
	if !big || !d.dt.IsComplex() {
		return l, true
	}
	if l.transposes() {
		return l, false
	}
	return layout{esize: d.size / 2, swap: true, shape: append(append([]int64{}, shape...), 2)}, true
}

// trivial reports whether stored bytes equal the C-order little-endian
// bytes: no swap, and C order or at most one dimension longer than 1.
func (l layout) trivial() bool {
	return !l.swap && !l.transposes()
}

// transposes reports whether element order differs between C and Fortran
// storage: Fortran order with two or more dimensions longer than 1.
func (l layout) transposes() bool {
	if !l.fortran {
		return false
	}
	n := 0
	for _, d := range l.shape {
		if d > 1 {
			n++
		}
	}
	return n > 1
}

// strides returns, for each dimension, the element stride in the storage
// order opposite to the iteration order: iterating C order over a Fortran
// buffer (toC) needs Fortran strides; iterating Fortran order over a C
// buffer needs C strides.
func fortranStrides(shape []int64) []int64 {
	s := make([]int64, len(shape))
	acc := int64(1)
	for k := range shape {
		s[k] = acc
		acc *= shape[k]
	}
	return s
}

func cStrides(shape []int64) []int64 {
	s := make([]int64, len(shape))
	acc := int64(1)
	for k := len(shape) - 1; k >= 0; k-- {
		s[k] = acc
		acc *= shape[k]
	}
	return s
}

// gather copies elements [e0, e0+n) of the iteration order into dst
// (n*esize bytes), reading each from src at the element offset given by
// the strides of the other order. iterC selects C-order iteration (src is
// Fortran) or Fortran-order iteration (src is C). Elements are
// byte-reversed when swap is set.
func gather(dst, src []byte, shape, strides []int64, iterC bool, e0, n int64, esize int, swap bool) {
	r := len(shape)
	idx := make([]int64, r)
	// multi-index of e0 in the iteration order
	rem := e0
	if iterC {
		for k := r - 1; k >= 0; k-- {
			idx[k] = rem % shape[k]
			rem /= shape[k]
		}
	} else {
		for k := 0; k < r; k++ {
			idx[k] = rem % shape[k]
			rem /= shape[k]
		}
	}
	var off int64
	for k := range idx {
		off += idx[k] * strides[k]
	}
	es := int64(esize)
	for i := int64(0); i < n; i++ {
		s := src[off*es : off*es+es]
		d := dst[i*es : i*es+es]
		if swap {
			for j := 0; j < esize; j++ {
				d[j] = s[esize-1-j]
			}
		} else {
			copy(d, s)
		}
		// advance the multi-index in iteration order
		if iterC {
			for k := r - 1; k >= 0; k-- {
				idx[k]++
				off += strides[k]
				if idx[k] < shape[k] {
					break
				}
				off -= idx[k] * strides[k]
				idx[k] = 0
			}
		} else {
			for k := 0; k < r; k++ {
				idx[k]++
				off += strides[k]
				if idx[k] < shape[k] {
					break
				}
				off -= idx[k] * strides[k]
				idx[k] = 0
			}
		}
	}
}

// swapInPlace reverses the bytes of each esize-byte element of b.
func swapInPlace(b []byte, esize int) {
	switch esize {
	case 8:
		for i := 0; i+8 <= len(b); i += 8 {
			binary.BigEndian.PutUint64(b[i:], binary.LittleEndian.Uint64(b[i:]))
		}
		return
	case 4:
		for i := 0; i+4 <= len(b); i += 4 {
			binary.BigEndian.PutUint32(b[i:], binary.LittleEndian.Uint32(b[i:]))
		}
		return
	case 2:
		for i := 0; i+2 <= len(b); i += 2 {
			binary.BigEndian.PutUint16(b[i:], binary.LittleEndian.Uint16(b[i:]))
		}
		return
	}
	for i := 0; i+esize <= len(b); i += esize {
		e := b[i : i+esize]
		for j, k := 0, esize-1; j < k; j, k = j+1, k-1 {
			e[j], e[k] = e[k], e[j]
		}
	}
}

// convSource serves the C-order little-endian bytes of an array whose
// stored bytes (in memory: a mapped file region or an inflated member) are
// big-endian and/or in Fortran order. It holds no copy: each ReadAt
// converts just the elements it is asked for. Safe for concurrent use.
//
// Transposing one small read at a time would touch the stored bytes with
// a stride of a whole column per element; instead a read of a transposed
// array converts the block of whole rows (of dimension 0) around it, at
// most blockBytes, with boxC, and keeps it in a blockCache shared by all
// arrays of one Decode, so an encoder's concurrent passes over an array
// reuse it while memory stays bounded by the cache, however many arrays
// the snapshot has.
type convSource struct {
	l         layout
	stored    []byte
	strides   []int64 // Fortran strides of l.shape
	size      int64
	rowBytes  int64 // bytes of one row of dimension 0
	blockRows int64 // rows per cached block, 0: no blocks (rows too long)
	cache     *blockCache

	// rel and relBase locate stored in a memory-mapped reader, whose pages
	// are released after use (see snapshot.Releaser); rel may be nil.
	rel     io.ReaderAt
	relBase int64
}

// convBlock is rows [first, first+len(data)/rowBytes) of src in C order.
type convBlock struct {
	src   *convSource
	first int64
	data  []byte
}

const (
	blockBytes   = 4 << 20
	cachedBlocks = 8
)

// blockCache holds the cachedBlocks most recently used converted blocks
// (at most cachedBlocks × blockBytes = 32 MiB) of the converting sources
// of one Decode. Safe for concurrent use.
type blockCache struct {
	mu     sync.Mutex
	blocks []*convBlock // most recently used first
}

func (bc *blockCache) get(src *convSource, first int64) *convBlock {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	for i, b := range bc.blocks {
		if b.src == src && b.first == first {
			copy(bc.blocks[1:i+1], bc.blocks[:i])
			bc.blocks[0] = b
			return b
		}
	}
	return nil
}

func (bc *blockCache) put(b *convBlock) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	bc.blocks = append(bc.blocks, nil)
	copy(bc.blocks[1:], bc.blocks)
	bc.blocks[0] = b
	if len(bc.blocks) > cachedBlocks {
		bc.blocks[cachedBlocks] = nil
		bc.blocks = bc.blocks[:cachedBlocks]
	}
}

func newConvSource(l layout, stored []byte, rel io.ReaderAt, relBase int64, cache *blockCache) *convSource {
	c := &convSource{l: l, stored: stored, strides: fortranStrides(l.shape), size: int64(len(stored)), rel: rel, relBase: relBase, cache: cache}
	if l.transposes() && c.size > 0 && cache != nil {
		c.rowBytes = c.size / l.shape[0]
		if c.rowBytes <= blockBytes {
			c.blockRows = blockBytes / c.rowBytes
		}
	}
	return c
}

// block returns the converted block holding row r.
func (c *convSource) block(r int64) *convBlock {
	first := r / c.blockRows * c.blockRows
	if b := c.cache.get(c, first); b != nil {
		return b
	}
	last := min(first+c.blockRows, c.l.shape[0])
	b := &convBlock{src: c, first: first, data: make([]byte, (last-first)*c.rowBytes)}
	boxC(b.data, c.stored, c.l.shape, first, last, c.l.esize, c.l.swap)
	c.cache.put(b)
	return b
}

// readBlocks serves want (at off) from converted blocks. A read that ends
// the array releases the mapped pages (the end of a pass).
func (c *convSource) readBlocks(want []byte, off int64) {
	for pos := 0; pos < len(want); {
		r := (off + int64(pos)) / c.rowBytes
		b := c.block(r)
		start := off + int64(pos) - b.first*c.rowBytes
		pos += copy(want[pos:], b.data[start:])
	}
	if off+int64(len(want)) == c.size && c.rel != nil {
		snapshot.ReleaseAt(c.rel, c.relBase, c.size)
	}
}

// Size implements snapshot.Source.
func (c *convSource) Size() int64 { return c.size }

// ReadAt implements io.ReaderAt.
func (c *convSource) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("numpy: negative offset")
	}
	if off >= c.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := p
	var short error
	if rest := c.size - off; int64(len(p)) > rest {
		want, short = p[:rest], io.EOF
	}
	if c.blockRows > 0 {
		c.readBlocks(want, off)
		return len(want), short
	}
	es := int64(c.l.esize)
	e0 := off / es
	e1 := (off + int64(len(want)) + es - 1) / es
	head := off - e0*es
	// whole elements go straight into p; a partial first or last element
	// goes through a small buffer
	var tmp [8]byte
	pos := 0
	e := e0
	if head != 0 {
		c.elems(tmp[:es], e, 1)
		pos += copy(want, tmp[head:es])
		e++
	}
	if full := (int64(len(want)) - int64(pos)) / es; full > 0 && e < e1 {
		c.elems(want[pos:int64(pos)+full*es], e, full)
		pos += int(full * es)
		e += full
	}
	if pos < len(want) {
		c.elems(tmp[:es], e, 1)
		pos += copy(want[pos:], tmp[:es])
	}
	if c.rel != nil && !c.l.transposes() {
		snapshot.ReleaseAt(c.rel, c.relBase+off, int64(len(want)))
	}
	return pos, short
}

// elems writes n C-order elements starting at element e to dst.
func (c *convSource) elems(dst []byte, e, n int64) {
	if !c.l.transposes() {
		es := int64(c.l.esize)
		copy(dst, c.stored[e*es:(e+n)*es])
		if c.l.swap {
			swapInPlace(dst[:n*es], c.l.esize)
		}
		return
	}
	if row := c.rowLen(); row > 0 && e%row == 0 && n%row == 0 {
		boxC(dst, c.stored, c.l.shape, e/row, (e+n)/row, c.l.esize, c.l.swap)
		return
	}
	gather(dst, c.stored, c.l.shape, c.strides, true, e, n, c.l.esize, c.l.swap)
}

// rowLen returns the element count of one row (index of dimension 0).
func (c *convSource) rowLen() int64 {
	n := int64(1)
	for _, d := range c.l.shape[1:] {
		n *= d
	}
	return n
}

// boxC fills dst with the C-order elements of rows [a, b) of dimension 0
// of an array of the given shape whose bytes src holds in Fortran order.
// Unlike gather it reads src in runs of b-a contiguous elements (dimension
// 0 is contiguous in Fortran order), so converting a chunk of rows costs
// one pass over cache-friendly runs instead of one strided access per
// element. The Fortran-order bytes of an array are the C-order bytes of
// the reversed shape, so the writer calls boxC with the reversed shape to
// produce Fortran order from C order.
func boxC(dst, src []byte, shape []int64, a, b int64, esize int, swap bool) {
	d0, rest := shape[0], shape[1:]
	S := int64(1)
	for _, d := range rest {
		S *= d
	}
	cstr := cStrides(rest)
	idx := make([]int64, len(rest))
	es := int64(esize)
	// Tiles of tileRows rows × tileCols positions of the other dimensions
	// keep both the source runs and the destination lines in use few (a
	// cache- and TLB-friendly transpose).
	const tileRows, tileCols = 64, 64
	idx0 := make([]int64, len(rest))
	for rt := int64(0); rt < S; rt += tileCols {
		re := min(rt+tileCols, S)
		// multi-index and C offset of position rt (Fortran order over rest)
		var rC0 int64
		q := rt
		for j := range rest {
			idx0[j] = q % rest[j]
			q /= rest[j]
			rC0 += idx0[j] * cstr[j]
		}
		for t := a; t < b; t += tileRows {
			te := min(t+tileRows, b)
			copy(idx, idx0)
			rC := rC0
			for r := rt; r < re; r++ {
				s := src[(t+d0*r)*es : (te+d0*r)*es]
				copyStrided(dst[((t-a)*S+rC)*es:], s, S*es, te-t, esize, swap)
				for j := range rest {
					idx[j]++
					rC += cstr[j]
					if idx[j] < rest[j] {
						break
					}
					rC -= idx[j] * cstr[j]
					idx[j] = 0
				}
			}
		}
	}
}

// copyStrided copies n contiguous elements of s to dst at every stride-th
// byte, byte-reversing each when swap is set.
func copyStrided(dst, s []byte, stride, n int64, esize int, swap bool) {
	switch {
	case esize == 8 && swap:
		for k := int64(0); k < n; k++ {
			binary.LittleEndian.PutUint64(dst[k*stride:], binary.BigEndian.Uint64(s[k*8:]))
		}
	case esize == 8:
		for k := int64(0); k < n; k++ {
			binary.LittleEndian.PutUint64(dst[k*stride:], binary.LittleEndian.Uint64(s[k*8:]))
		}
	case esize == 4 && swap:
		for k := int64(0); k < n; k++ {
			binary.LittleEndian.PutUint32(dst[k*stride:], binary.BigEndian.Uint32(s[k*4:]))
		}
	case esize == 4:
		for k := int64(0); k < n; k++ {
			binary.LittleEndian.PutUint32(dst[k*stride:], binary.LittleEndian.Uint32(s[k*4:]))
		}
	case esize == 2 && swap:
		for k := int64(0); k < n; k++ {
			binary.LittleEndian.PutUint16(dst[k*stride:], binary.BigEndian.Uint16(s[k*2:]))
		}
	case esize == 2:
		for k := int64(0); k < n; k++ {
			binary.LittleEndian.PutUint16(dst[k*stride:], binary.LittleEndian.Uint16(s[k*2:]))
		}
	case esize > 1: // c128: 16-byte elements
		es := int64(esize)
		for k := int64(0); k < n; k++ {
			d := dst[k*stride : k*stride+es]
			copy(d, s[k*es:(k+1)*es])
			if swap {
				slices.Reverse(d)
			}
		}
	default:
		for k := int64(0); k < n; k++ {
			dst[k*stride] = s[k]
		}
	}
}
