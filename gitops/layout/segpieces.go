package layout

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// openSegPieces opens the segment stored as pieces in directory p
// (seg/<hh>/<hex64>.seg/p000000, p000001, ...) of size bytes, recording
// every piece path it opens in paths (nil: none). A missing first piece
// wraps wtxt.ErrBlobNotFound.
func openSegPieces(fsys fs.FS, p string, size int64, paths map[string]bool) (io.ReadCloser, error) {
	name := path.Base(p)
	first := path.Join(p, fmt.Sprintf(SegPieceFmt, 0))
	f, err := fsys.Open(first)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("missing: %w", wtxt.ErrBlobNotFound)
	}
	if err != nil {
		return nil, err
	}
	if paths != nil {
		paths[first] = true
	}
	return &segPieceReader{fsys: fsys, dir: p, name: name, left: size, cur: f, paths: paths}, nil
}

// segPieceReader reads a segment stored as pieces, in order, up to its size.
type segPieceReader struct {
	fsys fs.FS
	dir  string // the segment's directory
	name string // for errors
	left int64  // segment bytes not yet read
	k    int    // index of cur
	cur  fs.File
	got  int64 // bytes read from cur
	// paths records the pieces opened (nil: none).
	paths map[string]bool
}

func (r *segPieceReader) Read(p []byte) (int, error) {
	for {
		if r.left == 0 {
			return 0, r.end()
		}
		if r.cur == nil {
			r.k++
			pp := path.Join(r.dir, fmt.Sprintf(SegPieceFmt, r.k))
			f, err := r.fsys.Open(pp)
			if errors.Is(err, fs.ErrNotExist) {
				return 0, fmt.Errorf("segment %s: piece %d missing (the pieces end %d bytes before the segment's size): %w", r.name, r.k, r.left, wtxt.ErrBlobNotFound)
			}
			if err != nil {
				return 0, fmt.Errorf("segment %s: piece %d: %w", r.name, r.k, err)
			}
			r.cur, r.got = f, 0
			if r.paths != nil {
				r.paths[pp] = true
			}
		}
		if int64(len(p)) > r.left {
			p = p[:r.left]
		}
		n, err := r.cur.Read(p)
		r.left -= int64(n)
		r.got += int64(n)
		switch {
		case err == io.EOF:
			r.cur.Close()
			r.cur = nil
			if r.got == 0 {
				return n, r.fail("empty")
			}
		case err != nil:
			return n, fmt.Errorf("segment %s: piece %d: %w", r.name, r.k, err)
		}
		if n > 0 {
			return n, nil
		}
	}
}

// end checks, once the segment's size has been read, that the current
// piece ends there and no further piece exists.
func (r *segPieceReader) end() error {
	if r.cur != nil {
		var one [1]byte
		n, err := io.ReadFull(r.cur, one[:])
		r.cur.Close()
		r.cur = nil
		if n > 0 {
			return r.fail("longer than the segment's size")
		}
		if err != io.EOF {
			return fmt.Errorf("segment %s: piece %d: %w", r.name, r.k, err)
		}
	}
	if f, err := r.fsys.Open(path.Join(r.dir, fmt.Sprintf(SegPieceFmt, r.k+1))); err == nil {
		f.Close()
		return r.fail("followed by a piece past the segment's size")
	}
	return io.EOF
}

// fail names the segment and the current piece.
func (r *segPieceReader) fail(what string) error {
	return fmt.Errorf("%w: segment %s: piece %d: %s", ErrSkeleton, r.name, r.k, what)
}

func (r *segPieceReader) Close() error {
	if r.cur != nil {
		return r.cur.Close()
	}
	return nil
}
