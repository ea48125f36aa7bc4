package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/snapd-ml/snapd/internal/safeopen"
)

const readChunk = 64 << 10

// resyncMark starts every record; a line that fails to parse is searched
// for it to recover a good record glued behind a torn fragment.
var resyncMark = []byte(Magic + " gen=")

// ReaderOptions tune a Reader.
type ReaderOptions struct {
	// OnCorrupt is called for every run of bytes that is skipped because
	// it is not a valid record (bad CRC, garbage, torn line in a sealed
	// segment). Nil ignores them; Skipped counts them either way.
	OnCorrupt func(*CorruptError)
	// Seal lets the reader seal a segment that is not the highest one but
	// still open (a rotation interrupted by a crash), so that it can move
	// past it. Only the consumer should set it; plain readers never
	// modify the directory.
	Seal bool
}

// Reader reads records from a WAL directory in order, scanner style:
//
//	r := wal.NewReader(dir, from, wal.ReaderOptions{})
//	for r.Next() { use(r.Record()) }
//	if err := r.Err(); err != nil { ... }
//
// When Next returns false with a nil Err the reader is at the end of the
// log; a later Next continues with whatever was appended meanwhile
// (tailing). An unterminated last line of the open segment is an append in
// progress or a torn write: it is not returned, Pending reports its size,
// and RepairSegment decides which. A Reader is not safe for concurrent use.
type Reader struct {
	dir  string
	opts ReaderOptions

	pos     Pos // start of buf in the segment
	f       *os.File
	buf     []byte
	final   bool // saw the segment sealed and re-read to EOF
	rec     Record
	err     error
	pending int64
	skipped int
	scan    bool // never wait for an open segment below the highest
}

// NewReader starts reading at from. A zero Pos (or one whose segment was
// already removed) starts at the first segment at or after it.
func NewReader(dir string, from Pos, opts ReaderOptions) *Reader {
	return &Reader{dir: dir, opts: opts, pos: from}
}

// Record returns the record found by the last successful Next.
func (r *Reader) Record() Record { return r.rec }

// Err returns the I/O error that stopped Next, if any. Corrupt records are
// not errors.
func (r *Reader) Err() error { return r.err }

// Pos returns the position after the last record or skipped bytes: where
// a new Reader would continue.
func (r *Reader) Pos() Pos { return r.pos }

// Pending returns the length of the unterminated tail of the open segment
// seen at the last end of log (0 if none).
func (r *Reader) Pending() int64 { return r.pending }

// Skipped returns how many corrupt byte runs were skipped so far.
func (r *Reader) Skipped() int { return r.skipped }

// Close releases the open segment.
func (r *Reader) Close() error {
	if r.f != nil {
		err := r.f.Close()
		r.f = nil
		return err
	}
	return nil
}

func (r *Reader) corrupt(off, n int64, reason string) {
	r.skipped++
	if r.opts.OnCorrupt != nil {
		r.opts.OnCorrupt(&CorruptError{Segment: r.pos.Segment, Offset: off, Length: n, Reason: reason})
	}
}

// consume drops n bytes from the front of buf.
func (r *Reader) consume(n int) {
	r.buf = r.buf[n:]
	r.pos.Offset += int64(n)
	if len(r.buf) == 0 {
		r.buf = r.buf[:0:cap(r.buf)]
	}
}

// Next advances to the next valid record.
func (r *Reader) Next() bool {
	if r.err != nil {
		return false
	}
	r.pending = 0
	for {
		if r.f == nil {
			ok, err := r.openSegment()
			if err != nil {
				r.err = err
				return false
			}
			if !ok {
				return false
			}
		}
		if i := bytes.IndexByte(r.buf, '\n'); i >= 0 {
			if r.line(r.buf[:i+1]) {
				return true
			}
			continue
		}
		if len(r.buf) >= MaxLineSize {
			r.skipGarbage()
			continue
		}
		n, err := r.readMore()
		if err != nil {
			r.err = err
			return false
		}
		if n > 0 {
			r.final = false
			continue
		}
		// End of the segment's current content.
		sealed, _, err := sealedFd(int(r.f.Fd()))
		if err != nil {
			r.err = fmt.Errorf("wal: stat segment %s: %w", SegmentName(r.pos.Segment), err)
			return false
		}
		if !sealed && r.scan {
			// Listing: an open segment below the highest one is read
			// as it is now.
			higher, err := r.nextSegment()
			if err != nil {
				r.err = err
				return false
			}
			sealed, r.final = higher != 0, true
		}
		if !sealed {
			if r.opts.Seal {
				higher, err := r.nextSegment()
				if err != nil {
					r.err = err
					return false
				}
				if higher != 0 {
					if err := sealSegment(r.dir, r.pos.Segment); err != nil {
						r.err = err
						return false
					}
					continue
				}
			}
			r.pending = int64(len(r.buf))
			return false
		}
		if !r.final {
			// Appends that completed before the seal may have landed
			// after our last read: read to EOF once more.
			r.final = true
			continue
		}
		if len(r.buf) > 0 {
			r.corrupt(r.pos.Offset, int64(len(r.buf)), "torn last line of sealed segment")
			r.consume(len(r.buf))
		}
		next, err := r.nextSegment()
		if err != nil {
			r.err = err
			return false
		}
		if next == 0 {
			return false // sealed and nothing newer yet
		}
		r.f.Close()
		r.f = nil
		r.pos = Pos{Segment: next}
	}
}

// line handles one complete line; it reports whether it yielded a record.
func (r *Reader) line(line []byte) bool {
	start := r.pos
	if len(line) == 1 || string(line) == SealMarker {
		r.consume(len(line)) // empty line or seal marker: ignore
		return false
	}
	req, err := ParseLine(line)
	if err == nil {
		r.consume(len(line))
		r.rec = Record{Request: req, Pos: start, End: r.pos}
		return true
	}
	// Resync: a good record may follow a torn fragment on the same line.
	for k := 1; k < len(line); {
		j := bytes.Index(line[k:], resyncMark)
		if j < 0 {
			break
		}
		k += j
		if req2, err2 := ParseLine(line[k:]); err2 == nil {
			r.corrupt(start.Offset, int64(k), "torn or garbage bytes before record: "+err.Error())
			r.consume(len(line))
			r.rec = Record{Request: req2, Pos: Pos{start.Segment, start.Offset + int64(k)}, End: r.pos}
			return true
		}
		k++
	}
	r.corrupt(start.Offset, int64(len(line)), err.Error())
	r.consume(len(line))
	return false
}

// skipGarbage drops a run of at least MaxLineSize bytes without a newline,
// keeping a possible record start.
func (r *Reader) skipGarbage() {
	k := bytes.Index(r.buf[1:], resyncMark)
	n := len(r.buf) - len(resyncMark) + 1
	if k >= 0 {
		n = k + 1
	}
	r.corrupt(r.pos.Offset, int64(n), fmt.Sprintf("no newline within %d bytes", MaxLineSize))
	r.consume(n)
}

// truncated tells the reader that segment seg was cut to size bytes (a
// repaired torn tail): buffered bytes past size are gone. Without this an
// append landing at the cut before the next read would be read after the
// stale bytes, as one garbage line.
func (r *Reader) truncated(seg uint64, size int64) {
	if r.f == nil || r.pos.Segment != seg {
		return
	}
	if have := size - r.pos.Offset; have < int64(len(r.buf)) {
		r.buf = r.buf[:max(have, 0)]
	}
}

// readMore appends up to readChunk bytes from the segment to buf.
func (r *Reader) readMore() (int, error) {
	if cap(r.buf)-len(r.buf) < readChunk {
		nb := make([]byte, len(r.buf), len(r.buf)+readChunk+MaxLineSize)
		copy(nb, r.buf)
		r.buf = nb
	}
	at := r.pos.Offset + int64(len(r.buf))
	dst := r.buf[len(r.buf) : len(r.buf)+readChunk]
	n, err := r.f.ReadAt(dst, at)
	r.buf = r.buf[:len(r.buf)+n]
	if err != nil && err != io.EOF {
		return n, fmt.Errorf("wal: read segment %s at %d: %w", SegmentName(r.pos.Segment), at, err)
	}
	if n == 0 && len(r.buf) > 0 {
		// A repair may have truncated an unterminated tail we hold.
		st, err := r.f.Stat()
		if err != nil {
			return 0, fmt.Errorf("wal: stat segment %s: %w", SegmentName(r.pos.Segment), err)
		}
		if have := st.Size() - r.pos.Offset; have < int64(len(r.buf)) {
			r.buf = r.buf[:max(have, 0)]
		}
	}
	return n, nil
}

// openSegment opens the segment at pos, or the first one after it if it is
// gone. It reports false when no segment exists yet.
func (r *Reader) openSegment() (bool, error) {
	segs, err := Segments(r.dir)
	if err != nil {
		return false, err
	}
	for _, n := range segs {
		if n < r.pos.Segment {
			continue
		}
		f, err := safeopen.Open(segPath(r.dir, n), safeopen.NoFollow)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("wal: open segment: %w", err)
		}
		if n != r.pos.Segment {
			r.pos = Pos{Segment: n}
		}
		r.f = f
		r.buf = r.buf[:0]
		r.final = false
		return true, nil
	}
	return false, nil
}

// nextSegment returns the lowest segment number above the current one, or
// 0 if there is none.
func (r *Reader) nextSegment() (uint64, error) {
	segs, err := Segments(r.dir)
	if err != nil {
		return 0, err
	}
	for _, n := range segs {
		if n > r.pos.Segment {
			return n, nil
		}
	}
	return 0, nil
}
