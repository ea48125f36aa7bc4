package numpy

import (
	"compress/flate"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
)

// maxCursors is how many decompression positions an inflateSource keeps:
// enough for an encoder's concurrent passes to each continue where it
// left off instead of inflating again from the member's start.
const maxCursors = 4

// inflateSource serves the uncompressed bytes of a deflated zip member
// without holding them: a read continues the nearest decompressor that is
// at or before its offset (skipping forward), or starts one from the
// member's start. Memory is maxCursors decompressors (~45 KiB each).
// Decode verified the member's size and CRC-32 in a streaming pass before
// creating it. Safe for concurrent use (reads are serialized).
type inflateSource struct {
	r          io.ReaderAt
	off, csize int64 // compressed data in r
	size       int64 // uncompressed size

	mu      sync.Mutex
	cursors []*cursor
	clock   uint64
}

type cursor struct {
	zr   io.ReadCloser
	pos  int64
	used uint64
}

// Size implements snapshot.Source.
func (s *inflateSource) Size() int64 { return s.size }

// ReadAt implements io.ReaderAt.
func (s *inflateSource) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("numpy: negative offset")
	}
	if off >= s.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	var short error
	if rest := s.size - off; int64(len(p)) > rest {
		p, short = p[:rest], io.EOF
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var c *cursor
	for _, k := range s.cursors {
		if k.pos <= off && (c == nil || k.pos > c.pos) {
			c = k
		}
	}
	if c == nil {
		if len(s.cursors) < maxCursors {
			c = &cursor{}
			s.cursors = append(s.cursors, c)
		} else {
			c = s.cursors[0]
			for _, k := range s.cursors {
				if k.used < c.used {
					c = k
				}
			}
		}
		sec := io.NewSectionReader(s.r, s.off, s.csize)
		if c.zr == nil {
			c.zr = flate.NewReader(sec)
		} else if err := c.zr.(flate.Resetter).Reset(sec, nil); err != nil {
			return 0, err
		}
		c.pos = 0
	}
	s.clock++
	c.used = s.clock
	if skip := off - c.pos; skip > 0 {
		n, err := io.CopyN(io.Discard, c.zr, skip)
		c.pos += n
		if err != nil {
			return 0, fmt.Errorf("numpy: inflate member data: %w", err)
		}
	}
	n, err := io.ReadFull(c.zr, p)
	c.pos += int64(n)
	if err != nil {
		return n, fmt.Errorf("numpy: inflate member data: %w", err)
	}
	return n, short
}

// verifyInflate inflates a deflated member once, streaming, and checks
// that it yields exactly the declared size with the declared CRC-32. The
// declared size was checked against the budgets before.
func verifyInflate(r io.ReaderAt, m *member, fail func(int64, error, string, ...any) error) error {
	zr := flate.NewReader(io.NewSectionReader(r, m.dataOff, int64(m.csize)))
	defer zr.Close()
	h := crc32.NewIEEE()
	n, err := io.Copy(h, io.LimitReader(zr, int64(m.usize)+1))
	switch {
	case err != nil:
		return fail(m.dataOff, ErrCorrupt, "inflate: %v", err)
	case uint64(n) > m.usize:
		return fail(m.dataOff, ErrCorrupt, "inflates to more than the declared %d bytes", m.usize)
	case uint64(n) != m.usize:
		return fail(m.dataOff, ErrCorrupt, "inflates to %d bytes, the zip says %d", n, m.usize)
	case h.Sum32() != m.crc:
		return fail(m.dataOff, ErrCorrupt, "crc32 of the inflated data is %08x, the zip says %08x", h.Sum32(), m.crc)
	}
	return nil
}
