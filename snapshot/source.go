package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// Source is where an array's raw bytes (little-endian, C order) come from.
// Implementations must be safe for concurrent ReadAt calls, as io.ReaderAt
// requires, because encoders read chunks of one array in parallel.
type Source interface {
	io.ReaderAt
	// Size is the number of bytes the source holds.
	Size() int64
}

// Bytes is a Source backed by memory (a heap slice or a memory-mapped file
// region). Readers that want zero-copy access use BytesOf.
type Bytes []byte

// ReadAt implements io.ReaderAt.
func (b Bytes) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("snapshot: negative offset")
	}
	if off >= int64(len(b)) {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Size implements Source.
func (b Bytes) Size() int64 { return int64(len(b)) }

// Releaser is implemented by memory-mapped sources: Release tells the
// kernel that the process is done with bytes [off, off+n) for now, so they
// leave its resident set (they stay in the page cache and are faulted in
// again if read later). Streaming consumers of huge sources call it to
// keep RSS bounded by what they hold, not by the file size.
type Releaser interface {
	Release(off, n int64)
}

// Release calls s.Release when s is a Releaser.
func Release(s Source, off, n int64) { ReleaseAt(s, off, n) }

// ReleaseAt calls r.Release when r is a Releaser (a memory map or a region
// of one); for any other reader it does nothing. Decoders that hash large
// mapped regions call it so that verifying a file does not leave the whole
// file resident.
func ReleaseAt(r io.ReaderAt, off, n int64) {
	if rr, ok := r.(Releaser); ok {
		rr.Release(off, n)
	}
}

// mappedSection is a region of a Mapping.
type mappedSection struct{ Bytes }

// Release drops the whole pages inside [off, off+n) from the resident set.
func (m *mappedSection) Release(off, n int64) { releasePages(m.Bytes, off, n) }

// BytesOf returns the memory behind s without copying when s is a Bytes (or
// wraps one, see Section), and ok=false otherwise.
func BytesOf(s io.ReaderAt) (b []byte, ok bool) {
	switch v := s.(type) {
	case Bytes:
		return v, true
	case *mappedSection:
		return v.Bytes, true
	case interface{ Bytes() []byte }:
		return v.Bytes(), true
	}
	return nil, false
}

// Section returns the n bytes of r starting at off as a Source. When r is
// memory-backed (Bytes, a Mapping) the result is a sub-slice: no copy; a
// section of a Guarded is a Viewer. The caller must have checked off+n
// against the size of r.
func Section(r io.ReaderAt, off, n int64) Source {
	if m, ok := r.(*Mapping); ok && off >= 0 && n >= 0 && off+n <= m.Size() {
		return &mappedSection{Bytes: m.data[off : off+n : off+n]}
	}
	if g, ok := r.(*Guarded); ok && off >= 0 && n >= 0 && off+n <= g.Size() {
		return &guardedSection{g: g, off: off, n: n, section: io.NewSectionReader(g, off, n)}
	}
	if b, ok := BytesOf(r); ok && off >= 0 && n >= 0 && off+n <= int64(len(b)) {
		return Bytes(b[off : off+n : off+n])
	}
	return io.NewSectionReader(r, off, n)
}

// ReadAll reads a whole Source into memory. Intended for small arrays and
// tests; large arrays should be streamed.
func ReadAll(s Source) ([]byte, error) {
	if b, ok := BytesOf(s); ok {
		return b, nil
	}
	n := s.Size()
	if n < 0 || n > int64(^uint(0)>>1) {
		return nil, fmt.Errorf("snapshot: source size %d out of range", n)
	}
	buf := make([]byte, n)
	if _, err := s.ReadAt(buf, 0); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		if !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	return buf, nil
}

// fileSource serves a Source from an open file.
type fileSource struct {
	f    *os.File
	size int64
}

func (s fileSource) ReadAt(p []byte, off int64) (int, error) { return s.f.ReadAt(p, off) }
func (s fileSource) Size() int64                             { return s.size }

// FileSource returns a Source reading size bytes of f through ReadAt.
func FileSource(f *os.File, size int64) Source { return fileSource{f: f, size: size} }

// copyPiece is how many bytes CopyTo moves between context checks.
const copyPiece = 4 << 20

// CopyTo writes the first n bytes of src to w in pieces of at most 4 MiB,
// checking ctx between pieces. A memory-backed source is written without
// an intermediate copy and a memory-mapped one releases each piece's pages
// once written (so converting a huge mapped file keeps RSS bounded); any
// other source is read into *buf, which is allocated on first use and may
// be reused across calls.
func CopyTo(ctx context.Context, w io.Writer, src Source, n int64, buf *[]byte) error {
	if n == 0 {
		return nil
	}
	if b, ok := BytesOf(src); ok && int64(len(b)) >= n {
		for off := int64(0); off < n; off += copyPiece {
			if err := ctx.Err(); err != nil {
				return err
			}
			end := min(off+copyPiece, n)
			if _, err := w.Write(b[off:end]); err != nil {
				return err
			}
			Release(src, off, end-off)
		}
		return nil
	}
	if len(*buf) == 0 {
		*buf = make([]byte, copyPiece)
	}
	for off := int64(0); off < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := min(int64(len(*buf)), n-off)
		p := (*buf)[:k]
		if err := readFull(src, p, off); err != nil {
			return fmt.Errorf("read data at %d: %w", off, err)
		}
		if _, err := w.Write(p); err != nil {
			return err
		}
		off += k
	}
	return nil
}

// ReadFullAt reads exactly len(p) bytes of r at off. A short read is
// io.ErrUnexpectedEOF (also when r reports io.EOF or no error), so callers
// can tell a truncated file from other read errors.
func ReadFullAt(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}
