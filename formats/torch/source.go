package torch

import (
	"errors"
	"io"

	"github.com/snapd-ml/snapd/snapshot"
)

// viewSource serves a strided (or byte-swapped) view of a storage as C
// order little-endian bytes, gathering on demand: nothing is
// materialised, so a transposed 1 GiB weight costs no heap. Bounds were
// checked by the decoder: every element the view touches lies inside the
// storage.
type viewSource struct {
	r      io.ReaderAt
	mem    []byte // r's bytes when memory-backed
	base   int64  // file offset of storage element 0
	es     int64
	off    int64
	size   []int64
	stride []int64
	swap   int   // byte-swap unit (es, or half of it for complex), 0: none
	n      int64 // elements
}

// newViewSource serves the view (off, size, stride) of the storage at
// base whose elements are es bytes; swap > 0 reverses the bytes of every
// swap-byte unit (big-endian storages).
func newViewSource(r io.ReaderAt, base, es, off int64, size, stride []int64, swap int) *viewSource {
	v := &viewSource{r: r, base: base, es: es, off: off, size: size, stride: stride, swap: swap, n: 1}
	for _, d := range size {
		v.n *= d
	}
	if b, ok := snapshot.BytesOf(r); ok {
		v.mem = b
	}
	return v
}

// Size implements snapshot.Source.
func (v *viewSource) Size() int64 { return v.n * v.es }

// ReadAt implements io.ReaderAt; it is safe for concurrent use.
func (v *viewSource) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("torch: negative offset")
	}
	size := v.Size()
	if off >= size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := len(p)
	var eof error
	if int64(want) > size-off {
		want = int(size - off)
		eof = io.EOF
	}
	e0 := off / v.es
	e1 := (off + int64(want) + v.es - 1) / v.es
	if off%v.es == 0 && int64(want)%v.es == 0 {
		if err := v.gather(p[:want], e0); err != nil {
			return 0, err
		}
		return want, eof
	}
	tmp := make([]byte, (e1-e0)*v.es)
	if err := v.gather(tmp, e0); err != nil {
		return 0, err
	}
	copy(p[:want], tmp[off-e0*v.es:])
	return want, eof
}

// gather fills dst (whole elements) with the view's elements from e0 on.
func (v *viewSource) gather(dst []byte, e0 int64) error {
	nd := len(v.size)
	idx := make([]int64, nd)
	rem := e0
	for i := nd - 1; i >= 0; i-- {
		idx[i] = rem % v.size[i]
		rem /= v.size[i]
	}
	for pos := 0; pos < len(dst); {
		s := v.off
		for i := range idx {
			s += idx[i] * v.stride[i]
		}
		// A run of elements adjacent in the storage: the rest of the
		// innermost dimension when its stride is 1.
		run := int64(1)
		if nd > 0 && v.stride[nd-1] == 1 {
			run = v.size[nd-1] - idx[nd-1]
		}
		if nd == 0 {
			run = 1
		}
		if left := int64(len(dst)-pos) / v.es; run > left {
			run = left
		}
		nb := run * v.es
		src := v.base + s*v.es
		if v.mem != nil {
			copy(dst[pos:pos+int(nb)], v.mem[src:src+nb])
		} else if err := snapshot.ReadFullAt(v.r, dst[pos:pos+int(nb)], src); err != nil {
			return err
		}
		if v.swap > 1 {
			swapBytes(dst[pos:pos+int(nb)], v.swap)
		}
		pos += int(nb)
		// Advance the index by run elements.
		if nd > 0 {
			idx[nd-1] += run
			for i := nd - 1; i > 0 && idx[i] >= v.size[i]; i-- {
				idx[i-1] += idx[i] / v.size[i]
				idx[i] %= v.size[i]
			}
		}
	}
	return nil
}

// swapBytes reverses the byte order of each es-byte element of b.
func swapBytes(b []byte, es int) {
	for i := 0; i+es <= len(b); i += es {
		for j, k := i, i+es-1; j < k; j, k = j+1, k-1 {
			b[j], b[k] = b[k], b[j]
		}
	}
}
