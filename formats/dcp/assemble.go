package dcp

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// box is a chunk's region of its tensor: offsets and sizes per dimension.
type box struct {
	off, size []int64
}

// tiling is a validated chunk layout of one tensor: the chunks (with
// non-zero volume) exactly cover the tensor, without overlap. The tensor
// is cut along every chunk boundary into a grid; cell (i0, i1, ...)
// spans [cuts[d][i_d], cuts[d][i_d+1]) in dimension d and belongs to
// exactly one chunk, owner[cell].
type tiling struct {
	shape []int64
	boxes []box // every chunk (zero-volume ones included)
	cuts  [][]int64
	owner []int32 // cell (row-major over the grid) -> chunk index
}

// planTiling checks that chunks tile shape: each chunk has the tensor's
// rank and lies inside it, no two chunks share an element, and every
// element is in a chunk. Chunks listed twice with the same offsets and
// sizes count once. maxCells bounds the grid (an irregular layout of n
// chunks in d dimensions may need up to n^d cells). Failures are errors
// of class ErrCorrupt (or ErrLimit) naming the chunk index and the check;
// the caller adds the file and tensor.
func planTiling(shape []int64, boxes []box, maxCells int, budget *formats.Budget) (*tiling, error) {
	rank := len(shape)
	total, err := snapshot.NumElements(shape)
	if err != nil {
		return nil, fmt.Errorf("%w: tensor size: %v", ErrLimit, err)
	}
	for i, b := range boxes {
		if len(b.off) != rank || len(b.size) != rank {
			return nil, fmt.Errorf("%w: chunk %d: offsets of %d and sizes of %d dimensions for a tensor of %d", ErrCorrupt, i, len(b.off), len(b.size), rank)
		}
		for d := 0; d < rank; d++ {
			if b.off[d] < 0 || b.size[d] < 0 {
				return nil, fmt.Errorf("%w: chunk %d: negative offset or size in dimension %d", ErrCorrupt, i, d)
			}
			if b.off[d] > shape[d] || b.size[d] > shape[d]-b.off[d] {
				return nil, fmt.Errorf("%w: chunk %d: dimension %d spans [%d, %d+%d), beyond the tensor's %d (chunk exceeds the tensor)", ErrCorrupt, i, d, b.off[d], b.off[d], b.size[d], shape[d])
			}
		}
	}
	t := &tiling{shape: shape, boxes: boxes}
	if total == 0 {
		return t, nil // nothing to cover; chunks are all empty (checked above: inside a zero extent)
	}
	// Grid cuts.
	t.cuts = make([][]int64, rank)
	cells := int64(1)
	for d := 0; d < rank; d++ {
		set := map[int64]bool{0: true, shape[d]: true}
		for _, b := range boxes {
			if volume(b.size) == 0 {
				continue
			}
			set[b.off[d]] = true
			set[b.off[d]+b.size[d]] = true
		}
		c := make([]int64, 0, len(set))
		for v := range set {
			c = append(c, v)
		}
		sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
		t.cuts[d] = c
		n := int64(len(c) - 1)
		if cells > int64(maxCells)/n {
			return nil, fmt.Errorf("%w: the chunks cut the tensor into more than %d regions (too irregular a layout)", ErrLimit, maxCells)
		}
		cells *= n
	}
	if budget != nil {
		// The grid is held as long as the tensor is read.
		if err := budget.Take(cells*4, "chunk grid"); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrLimit, err)
		}
	}
	t.owner = make([]int32, cells)
	for i := range t.owner {
		t.owner[i] = -1
	}
	seen := map[string]int{}
	for i, b := range boxes {
		if volume(b.size) == 0 {
			continue
		}
		k := offKey(b.off) + offKey(b.size)
		if _, dup := seen[k]; dup {
			continue // the same chunk listed twice
		}
		seen[k] = i
		lo := make([]int, rank)
		hi := make([]int, rank)
		for d := 0; d < rank; d++ {
			lo[d] = cutIndex(t.cuts[d], b.off[d])
			hi[d] = cutIndex(t.cuts[d], b.off[d]+b.size[d])
		}
		// Walk the chunk's cells (each cell is claimed at most once, so
		// the walks together visit at most cells+1 cells).
		idx := append([]int(nil), lo...)
		for {
			c := t.cell(idx)
			if o := t.owner[c]; o >= 0 {
				return nil, fmt.Errorf("%w: chunk %d overlaps chunk %d (both hold the element at %v)", ErrCorrupt, i, o, t.corner(idx))
			}
			t.owner[c] = int32(i)
			d := rank - 1
			for ; d >= 0; d-- {
				idx[d]++
				if idx[d] < hi[d] {
					break
				}
				idx[d] = lo[d]
			}
			if d < 0 {
				break
			}
		}
	}
	for c, o := range t.owner {
		if o < 0 {
			return nil, fmt.Errorf("%w: no chunk holds the element at %v (the chunks leave a hole)", ErrCorrupt, t.corner(t.unravelCell(c)))
		}
	}
	return t, nil
}

func volume(size []int64) int64 {
	n, err := snapshot.NumElements(size)
	if err != nil {
		return math.MaxInt64
	}
	return n
}

// cutIndex is the index of v in the sorted cuts c (v is one of them).
func cutIndex(c []int64, v int64) int {
	return sort.Search(len(c), func(i int) bool { return c[i] >= v })
}

// cell is the grid cell index of grid coordinates idx.
func (t *tiling) cell(idx []int) int {
	c := 0
	for d, i := range idx {
		c = c*(len(t.cuts[d])-1) + i
	}
	return c
}

func (t *tiling) unravelCell(c int) []int {
	idx := make([]int, len(t.cuts))
	for d := len(t.cuts) - 1; d >= 0; d-- {
		n := len(t.cuts[d]) - 1
		idx[d] = c % n
		c /= n
	}
	return idx
}

// corner is the tensor index of a grid cell's first element.
func (t *tiling) corner(idx []int) []int64 {
	out := make([]int64, len(idx))
	for d, i := range idx {
		out[d] = t.cuts[d][i]
	}
	return out
}

// gather serves a tensor's bytes (C order) from the sources of its
// chunks, each the chunk's own C-order bytes, without materialising
// the tensor: a read is split into runs of elements contiguous both in
// the tensor and in one chunk.
type gather struct {
	t     *tiling
	esize int64
	size  int64
	data  []snapshot.Source // per chunk (nil for zero-volume chunks)
}

func newGather(t *tiling, esize int64, data []snapshot.Source) (*gather, error) {
	n, err := snapshot.NumElements(t.shape)
	if err != nil || n > math.MaxInt64/esize {
		return nil, fmt.Errorf("%w: tensor byte size overflows", ErrLimit)
	}
	return &gather{t: t, esize: esize, size: n * esize, data: data}, nil
}

func (g *gather) Size() int64 { return g.size }

// ReadAt implements io.ReaderAt; it is safe for concurrent use.
func (g *gather) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("dcp: negative offset")
	}
	if off >= g.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > g.size-off {
		p = p[:g.size-off]
	}
	rank := len(g.t.shape)
	idx := make([]int64, rank)
	grid := make([]int, rank)
	n := 0
	for len(p) > 0 {
		e, within := off/g.esize, off%g.esize
		// Tensor index of element e.
		r := e
		for d := rank - 1; d >= 0; d-- {
			idx[d] = r % g.t.shape[d]
			r /= g.t.shape[d]
		}
		for d := 0; d < rank; d++ {
			c := g.t.cuts[d]
			grid[d] = sort.Search(len(c), func(i int) bool { return c[i] > idx[d] }) - 1
		}
		ci := g.t.owner[g.t.cell(grid)]
		b := g.t.boxes[ci]
		// Elements contiguous from idx in both the tensor and the chunk:
		// the rest of the row, then whole blocks of dimension d while the
		// chunk spans every dimension after d fully.
		run := int64(1)
		if rank > 0 {
			L := rank - 1
			run = b.off[L] + b.size[L] - idx[L]
			block := int64(1)
			for d := L; d > 0; d-- {
				if b.off[d] != 0 || b.size[d] != g.t.shape[d] {
					break
				}
				block *= g.t.shape[d]
				run += (b.off[d-1] + b.size[d-1] - idx[d-1] - 1) * block
			}
		}
		// Position of idx in the chunk's C order.
		local := int64(0)
		for d := 0; d < rank; d++ {
			local = local*b.size[d] + (idx[d] - b.off[d])
		}
		k := min(int64(len(p)), run*g.esize-within)
		if err := snapshot.ReadFullAt(g.data[ci], p[:k], local*g.esize+within); err != nil {
			return n, fmt.Errorf("dcp: chunk %d: %w", ci, err)
		}
		p = p[k:]
		off += k
		n += int(k)
	}
	if n < want {
		return n, io.EOF
	}
	return n, nil
}
