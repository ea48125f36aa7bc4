package numpy

import (
	"errors"
	"io"
)

// layout maps between the C-order little-endian bytes a snapshot holds and
// the bytes a .npy file stores (Fortran order and/or big-endian).
type layout struct {
	esize   int
	swap    bool    // elements are stored big-endian
	fortran bool    // stored in Fortran (column-major) order
	shape   []int64 // logical (C) shape
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
type convSource struct {
	l       layout
	stored  []byte
	strides []int64 // Fortran strides of l.shape
	size    int64
}

func newConvSource(l layout, stored []byte) *convSource {
	return &convSource{l: l, stored: stored, strides: fortranStrides(l.shape), size: int64(len(stored))}
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
	gather(dst, c.stored, c.l.shape, c.strides, true, e, n, c.l.esize, c.l.swap)
}
