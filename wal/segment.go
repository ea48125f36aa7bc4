package wal

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/safeopen"
)

// SegmentSuffix ends every segment file name.
const SegmentSuffix = ".wal"

// DefaultSegmentSize is the size after which a consumer rotates the active
// segment.
const DefaultSegmentSize = 1 << 20

const (
	modeOpen   = 0o644 // active segment: owner-writable
	modeSealed = 0o444 // sealed segment: no write bit
)

// SegmentName returns the file name of segment n ("00000042.wal").
func SegmentName(n uint64) string { return fmt.Sprintf("%08d%s", n, SegmentSuffix) }

// ParseSegmentName returns the segment number of a segment file name.
func ParseSegmentName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, SegmentSuffix)
	if !ok || len(digits) < 8 || len(digits) > 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || n == 0 || SegmentName(n) != name {
		return 0, false
	}
	return n, true
}

// Segments lists the segment numbers present in dir, ascending. A missing
// directory has no segments.
func Segments(dir string) ([]uint64, error) {
	ents, err := safeopen.ReadDir(dir) // a FIFO in its place fails, never blocks
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wal: list segments: %w", err)
	}
	var segs []uint64
	for _, e := range ents {
		if n, ok := ParseSegmentName(e.Name()); ok {
			segs = append(segs, n)
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i] < segs[j] })
	return segs, nil
}

func segPath(dir string, n uint64) string { return filepath.Join(dir, SegmentName(n)) }

// flock applies a flock(2) operation, retrying on EINTR.
func flock(fd int, how int) error {
	for {
		err := unix.Flock(fd, how)
		if err != unix.EINTR {
			return err
		}
	}
}

// sealedFd reports whether the open segment has been sealed: its write
// bit is clear, or it was unlinked (removed by hand; appending to it would
// lose the request).
func sealedFd(fd int) (sealed bool, size int64, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, 0, err
	}
	return st.Mode&0o200 == 0 || st.Nlink == 0, st.Size, nil
}

// createSegment creates segment n (exclusively) as an open segment and
// makes its existence durable. It returns fs.ErrExist if it is there.
func createSegment(dir string, n uint64) error {
	f, err := safeopen.OpenFile(segPath(dir, n), os.O_WRONLY|os.O_CREATE|os.O_EXCL, modeOpen, safeopen.NoFollow)
	if err != nil {
		return err
	}
	// Undo a restrictive umask: the write bit is the "open" flag.
	err = f.Chmod(modeOpen)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("wal: create segment %s: %w", SegmentName(n), err)
	}
	return atomicfile.SyncDir(dir)
}

// sealSegment clears the write bit of segment n while holding its
// exclusive lock, so that no append is in flight and every later append
// (which checks the bit under a shared lock) goes elsewhere.
func sealSegment(dir string, n uint64) error {
	f, err := safeopen.Open(segPath(dir, n), safeopen.NoFollow)
	if err != nil {
		return fmt.Errorf("wal: seal segment: %w", err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := flock(fd, unix.LOCK_EX); err != nil {
		return fmt.Errorf("wal: seal segment %s: lock: %w", SegmentName(n), err)
	}
	defer flock(fd, unix.LOCK_UN)
	if err := f.Chmod(modeSealed); err != nil {
		return fmt.Errorf("wal: seal segment %s: %w", SegmentName(n), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("wal: seal segment %s: fsync: %w", SegmentName(n), err)
	}
	return nil
}

// rotate starts segment n+1 and seals segment n. The new segment exists
// (durably) before the old one is sealed, so an appender always has a
// target.
func rotate(dir string, n uint64) error {
	if err := createSegment(dir, n+1); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return sealSegment(dir, n)
}

// RepairSegment truncates a torn tail (bytes after the last newline) of
// segment n. It holds the segment's exclusive lock, which appenders hold
// shared while writing, so an unterminated tail seen under it is never an
// append in progress. It returns the removed bytes as a *CorruptError, or
// nil if the segment ends with a newline.
func RepairSegment(dir string, n uint64) (*CorruptError, error) {
	f, err := safeopen.OpenFile(segPath(dir, n), os.O_RDWR, 0, safeopen.NoFollow)
	if err != nil {
		return nil, fmt.Errorf("wal: repair: %w", err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := flock(fd, unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("wal: repair segment %s: lock: %w", SegmentName(n), err)
	}
	defer flock(fd, unix.LOCK_UN)
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("wal: repair segment %s: %w", SegmentName(n), err)
	}
	size := st.Size()
	good, err := lastNewlineEnd(f, size)
	if err != nil {
		return nil, fmt.Errorf("wal: repair segment %s: %w", SegmentName(n), err)
	}
	if good == size {
		return nil, nil
	}
	if err := f.Truncate(good); err != nil {
		return nil, fmt.Errorf("wal: repair segment %s: truncate to %d: %w", SegmentName(n), good, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("wal: repair segment %s: fsync: %w", SegmentName(n), err)
	}
	return &CorruptError{Segment: n, Offset: good, Length: size - good, Reason: "torn tail (no newline) truncated"}, nil
}

// Repair repairs the torn tail of every segment in dir (see RepairSegment)
// and returns what it removed.
func Repair(dir string) ([]*CorruptError, error) {
	segs, err := Segments(dir)
	if err != nil {
		return nil, err
	}
	var out []*CorruptError
	for _, n := range segs {
		ce, err := RepairSegment(dir, n)
		if errors.Is(err, fs.ErrNotExist) {
			continue // consumed and removed meanwhile
		}
		if err != nil {
			return out, err
		}
		if ce != nil {
			out = append(out, ce)
		}
	}
	return out, nil
}

// lastNewlineEnd returns the offset just after the last '\n' in the first
// size bytes of r (0 if there is none).
func lastNewlineEnd(r io.ReaderAt, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	end := size
	for end > 0 {
		start := max(end-int64(len(buf)), 0)
		b := buf[:end-start]
		if _, err := r.ReadAt(b, start); err != nil && err != io.EOF {
			return 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] == '\n' {
				return start + int64(i) + 1, nil
			}
		}
		end = start
	}
	return 0, nil
}
