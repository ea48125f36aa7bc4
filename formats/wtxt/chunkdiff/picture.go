package chunkdiff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"sync"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/snapshot/diffsvg"
)

// ErrPictureBudget: the generations differ in more bytes than a picture
// may read (Picture's maxBytes).
var ErrPictureBudget = errors.New("chunkdiff: picture: changed chunks exceed the budget")

// Picture draws the change from the plaintext WTXT generation basePath to
// headPath (snapshot/diffsvg). Both files are read with pread (not
// mapped: their pages would count in the daemon's RSS) and indexed
// (wtxt.ReadIndex: one look per chunk); only the rows of chunks whose ch
// line sha256 differs are decoded (each checked against its crc32c) and
// compared (an array whose type, shape or chunk geometry changed is
// compared whole). With opts.SampleBytes, an array with more changed bytes
// than that is sampled (diffsvg.Options.SampleBytes): only the base64
// lines holding the sampled bytes are decoded, pieces close together in
// the file read with one pread (wtxt.ReadChunkPieces).
// When what is read holds more than maxBytes raw bytes (<= 0: no limit)
// nothing is decoded and ErrPictureBudget is returned.
// The files are not verified (wtxt.Verify's job); a chunk that does not
// decode is an error naming the file.
func Picture(ctx context.Context, basePath, headPath string, maxBytes int64, opts diffsvg.Options) (*diffsvg.Picture, error) {
	return PictureIndexed(ctx, basePath, nil, headPath, nil, maxBytes, opts)
}

// PictureIndexed is Picture with the files' indexes when the caller has
// them already (wtxt.ReadIndex of the same, unchanged files, e.g. a
// wtxt.DeltaPlan's); a nil index is read.
func PictureIndexed(ctx context.Context, basePath string, baseIndex *wtxt.Index, headPath string, headIndex *wtxt.Index, maxBytes int64, opts diffsvg.Options) (*diffsvg.Picture, error) {
	open := func(path string, wx *wtxt.Index) (*os.File, *wtxt.Index, *snapshot.Snapshot, error) {
		m, size, err := openRegular(path)
		if err != nil {
			return nil, nil, nil, err
		}
		if wx == nil {
			wx, err = wtxt.ReadIndex(ctx, path, m, size)
		} else if wx.Size != size {
			err = fmt.Errorf("chunkdiff: %s: %d bytes, its index was read at %d", path, size, wx.Size)
		}
		if err != nil {
			m.Close()
			return nil, nil, nil, err
		}
		s := &snapshot.Snapshot{}
		for i, a := range wx.Arrays {
			if a.Name == snapshot.AttrsArrayName {
				continue // attributes, not weights
			}
			s.Arrays = append(s.Arrays, &snapshot.Array{Name: a.Name, DType: a.DType, Shape: a.Shape,
				Data: &chunkSource{path: path, file: m, a: &wx.Arrays[i], size: a.Bytes, last: -1}})
		}
		return m, wx, s, nil
	}
	bm, bidx, bs, err := open(basePath, baseIndex)
	if err != nil {
		return nil, err
	}
	defer bm.Close()
	hm, hidx, hs, err := open(headPath, headIndex)
	if err != nil {
		return nil, err
	}
	defer hm.Close()

	cand := map[string][]snapshot.RowRange{}
	var changed int64
	for i := range hidx.Arrays {
		h := &hidx.Arrays[i]
		b, a := bidx.Array(h.Name), hs.Array(h.Name)
		if b == nil || a == nil || b.DType != h.DType || !slices.Equal(b.Shape, h.Shape) {
			continue // added, retyped or reshaped: drawn whole, not read
		}
		rowSize, _ := snapshot.RowGeometry(a)
		rs, ok := changedChunkRows(b, h, rowSize)
		var n int64 // the bytes of h read
		if !ok {
			n = h.Bytes // compared whole
		} else {
			for i, c := range h.Chunks { // same geometry: b.Chunks[i] is c's counterpart
				if b.Chunks[i].SHA256 != c.SHA256 {
					n = satAdd(n, c.Len)
				}
			}
			cand[h.Name] = rs
		}
		if opts.SampleBytes > 0 && n > opts.SampleBytes {
			n = opts.SampleBytes // sampled (about that much)
		}
		changed = satAdd(changed, n)
	}
	if maxBytes > 0 && changed > maxBytes {
		return nil, fmt.Errorf("%w: %d bytes changed, budget %d", ErrPictureBudget, changed, maxBytes)
	}
	opts.Candidates = func(name string) ([]snapshot.RowRange, bool) {
		rs, ok := cand[name]
		return rs, ok
	}
	return diffsvg.Compute(ctx, bs, hs, opts)
}

// changedChunkRows returns the rows of head's chunks whose sha256
// differs from base's, when both have the same chunk geometry (else
// ok=false: compare every row).
func changedChunkRows(b, h *wtxt.IndexArray, rowSize int64) (rs []snapshot.RowRange, ok bool) {
	if rowSize <= 0 || !sameOffsets(b, h) {
		return nil, false
	}
	for i, c := range h.Chunks {
		if c.IX != int64(i) || c.Off < 0 || c.Len < 0 || c.Off > math.MaxInt64-c.Len-rowSize {
			return nil, false
		}
		if b.Chunks[i].SHA256 == c.SHA256 {
			continue
		}
		r := snapshot.RowRange{Start: c.Off / rowSize, End: (c.Off + c.Len + rowSize - 1) / rowSize}
		if k := len(rs); k > 0 && rs[k-1].End >= r.Start {
			rs[k-1].End = max(rs[k-1].End, r.End)
			continue
		}
		rs = append(rs, r)
	}
	return rs, true
}

func satAdd(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

// chunkSource reads an array of a WTXT file by decoding the chunks that
// hold the requested bytes (the last one is cached); a small read inside
// one chunk decodes only the lines that hold it.
type chunkSource struct {
	path string
	file io.ReaderAt
	a    *wtxt.IndexArray
	size int64

	mu       sync.Mutex
	last     int
	lastData []byte
	pieces   []wtxt.ChunkPiece // ReadPieces' requests, reused
	text     []byte            // ReadPieces' read buffer, reused
}

// pieceGap is how far apart (in the file) the base64 lines of two pieces
// of ReadPieces may lie and still be read with one pread. A pread from
// the page cache costs about 0.8 µs a call and 0.1 µs a KiB in a loop,
// more in the daemon, where the text lands in buffers the cache has not
// seen: its picture of a 39 MB AdamW checkpoint read 15 MB in 1,672 calls
// with an 8 KiB gap (two neighbouring bins' pieces, a row apart, shared a
// call) and 2.7 MB in 3,940 calls with 1 KiB, 2 to 3 ms faster.
const pieceGap = 1 << 10

var _ diffsvg.PieceReader = (*chunkSource)(nil)

// smallRead: a read of at most 1/smallRead of a chunk that is not the
// cached one decodes only its lines.
const smallRead = 8

func (s *chunkSource) Size() int64 { return s.size }

// ReadPieces implements diffsvg.PieceReader: it decodes only the base64
// lines holding the pieces, read with wtxt.ReadChunkPieces (pieces within
// pieceGap of each other share one pread), and leaves the cached chunk
// alone.
func (s *chunkSource) ReadPieces(ps []diffsvg.Piece) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.a.Chunks
	req := s.pieces[:0]
	for _, p := range ps {
		off, rest := p.Off, p.Buf
		if off < 0 || off > s.size-int64(len(rest)) {
			return fmt.Errorf("%s: array %q: bytes %d+%d are not inside its %d bytes", s.path, s.a.Name, off, len(rest), s.size)
		}
		for len(rest) > 0 {
			i := sort.Search(len(cs), func(i int) bool { return cs[i].Off+cs[i].Len > off })
			if i == len(cs) || cs[i].Off > off {
				return fmt.Errorf("%s: array %q: no chunk holds byte %d", s.path, s.a.Name, off)
			}
			n := min(int64(len(rest)), cs[i].Off+cs[i].Len-off)
			req = append(req, wtxt.ChunkPiece{Chunk: &cs[i], Off: off - cs[i].Off, Dst: rest[:n]})
			rest, off = rest[n:], off+n
		}
	}
	s.pieces = req
	var err error
	s.text, err = wtxt.ReadChunkPieces(s.file, s.path, s.a, req, pieceGap, s.text)
	return err
}

func (s *chunkSource) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= s.size {
		return 0, io.EOF
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.a.Chunks
	n := 0
	for n < len(p) && off < s.size {
		i := sort.Search(len(cs), func(i int) bool { return cs[i].Off+cs[i].Len > off })
		if i == len(cs) || cs[i].Off > off {
			return n, fmt.Errorf("%s: array %q: no chunk holds byte %d", s.path, s.a.Name, off)
		}
		if s.last != i && off+int64(len(p)-n) <= cs[i].Off+cs[i].Len && int64(len(p)-n) <= cs[i].Len/smallRead {
			d, err := wtxt.ReadChunkRange(s.file, s.path, s.a, &cs[i], off-cs[i].Off, int64(len(p)-n))
			if err != nil {
				return n, err
			}
			n += copy(p[n:], d)
			break
		}
		if s.last != i {
			d, err := wtxt.ReadChunk(s.file, s.path, s.a, &cs[i])
			if err != nil {
				return n, err
			}
			s.last, s.lastData = i, d
		}
		k := copy(p[n:], s.lastData[off-cs[i].Off:])
		n += k
		off += int64(k)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
