package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/snapd-ml/snapd/internal/safeopen"
)

// maxOpenAttempts bounds the retries of finding the active segment while
// segments rotate underneath.
const maxOpenAttempts = 1000

// Writer appends requests to the WAL in dir. Any number of Writers, in any
// number of processes (including the Python helper), may append to the
// same directory at once. A Writer is safe for concurrent use.
//
// Each Append takes a shared flock on the active segment, checks that the
// segment is not sealed (fstat, and a pread of its last line for the seal
// marker), writes the line with one write(2) on an
// O_APPEND descriptor and unlocks: five system calls, no fsync. Requests
// are therefore durable against a crash of the process but not against a
// crash of the machine; a request lost that way was never acknowledged by
// a snapshot, and a torn line it leaves is detected and skipped.
type Writer struct {
	dir string

	mu     sync.Mutex
	f      *os.File
	fd     int
	buf    []byte
	closed bool
}

// OpenWriter prepares appends to the WAL directory dir, creating it (and
// the first segment) if needed.
func OpenWriter(dir string) (*Writer, error) {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	w := &Writer{dir: dir, buf: make([]byte, 0, 512)}
	if err := w.open(); err != nil {
		return nil, err
	}
	return w, nil
}

// Append writes one request line. It returns ErrInvalidRequest or
// ErrLineTooLong for requests that cannot be encoded, and an I/O error
// otherwise; a short write (disk full) is reported as an error and leaves
// a torn line that readers skip.
func (w *Writer) Append(r Request) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	line, err := r.AppendLine(w.buf[:0])
	if err != nil {
		return err
	}
	w.buf = line[:0]
	for range maxOpenAttempts {
		if w.f == nil {
			if err := w.open(); err != nil {
				return err
			}
		}
		ok, err := w.tryAppend(line)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		// Sealed: a newer segment is the target.
		w.f.Close()
		w.f = nil
	}
	return fmt.Errorf("wal: append to %s: no open segment after %d attempts", w.dir, maxOpenAttempts)
}

// tryAppend writes line unless the segment is sealed.
func (w *Writer) tryAppend(line []byte) (bool, error) {
	if err := flock(w.fd, lockSH); err != nil {
		return false, fmt.Errorf("wal: append: lock %s: %w", w.f.Name(), err)
	}
	defer flock(w.fd, lockUN)
	sealed, _, err := sealedFd(w.fd)
	if err != nil {
		return false, fmt.Errorf("wal: append: stat %s: %w", w.f.Name(), err)
	}
	if sealed {
		return false, nil
	}
	for {
		n, err := sysWrite(w.fd, line)
		if err == errEINTR && n <= 0 {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("wal: append to %s: %w", w.f.Name(), err)
		}
		if n != len(line) {
			return false, fmt.Errorf("wal: append to %s: short write of %d of %d bytes (torn line will be skipped by readers)", w.f.Name(), n, len(line))
		}
		return true, nil
	}
}

// open finds the active (highest, unsealed) segment, creating the first
// or the next one when needed.
func (w *Writer) open() error {
	for range maxOpenAttempts {
		segs, err := Segments(w.dir)
		if err != nil {
			return err
		}
		if len(segs) == 0 {
			if err := createSegment(w.dir, 1); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			continue
		}
		last := segs[len(segs)-1]
		// Read access too: the seal check reads the segment's last line.
		f, err := safeopen.OpenFile(segPath(w.dir, last), os.O_RDWR|os.O_APPEND, 0, safeopen.NoFollow)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wal: open segment: %w", err)
		}
		fd := int(f.Fd())
		sealed, _, err := sealedFd(fd)
		if err != nil {
			f.Close()
			return fmt.Errorf("wal: stat segment: %w", err)
		}
		if sealed {
			// The highest segment is sealed; start the next one
			// (whoever creates it first wins).
			f.Close()
			if err := createSegment(w.dir, last+1); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			continue
		}
		w.f, w.fd = f, fd
		return nil
	}
	return fmt.Errorf("wal: open %s: no open segment after %d attempts", w.dir, maxOpenAttempts)
}

// Close releases the segment. Appends after Close fail with ErrClosed.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if w.f != nil {
		err := w.f.Close()
		w.f = nil
		return err
	}
	return nil
}

// Append appends one request to the WAL in dir with a short-lived Writer
// (what `snapd request-snapshot` does).
func Append(dir string, r Request) error {
	w, err := OpenWriter(dir)
	if err != nil {
		return err
	}
	if err := w.Append(r); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
