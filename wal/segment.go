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

// SealMarker is the line a consumer appends, under the segment's
// exclusive lock, to seal it: appenders that find it as the segment's
// last line go to the next segment. Unlike clearing the write bit (the
// seal of WALs before the marker, still honoured) it works when the
// segment belongs to another user of the WAL's group. It is never a
// request line (Magic differs) and readers skip it silently.
const SealMarker = "snapseal/1\n"

// dirMode is the permission the WAL directory is created with before
// the umask: umask 022 gives 0755 (single user), 0002/0007 the
// group-shared mode (0775/0770; a setgid parent makes it setgid too).
const dirMode = 0o775

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

// sealedFd reports whether the open segment has been sealed: its last
// line is SealMarker, its owner-write bit is clear (the seal of older
// consumers, and of this one when it owns the segment), or it was unlinked
// (removed by hand; appending to it would lose the request). fd must be
// readable.
func sealedFd(fd int) (sealed bool, size int64, err error) {
	var st statT
	if err := fstat(fd, &st); err != nil {
		return false, 0, err
	}
	if st.Mode&0o200 == 0 || st.Nlink == 0 {
		return true, st.Size, nil
	}
	m, err := markerAtEnd(fd, st.Size)
	return m, st.Size, err
}

// markerAtEnd reports whether the first size bytes of fd end with
// SealMarker as a whole line (at offset 0 or after a newline).
func markerAtEnd(fd int, size int64) (bool, error) {
	const n = int64(len(SealMarker))
	if size < n {
		return false, nil
	}
	var buf [len(SealMarker) + 1]byte
	b, off := buf[:], size-n-1
	if size == n {
		b, off = buf[1:], 0
	}
	for {
		k, err := sysPread(fd, b, off)
		if err == errEINTR {
			continue
		}
		if err != nil {
			return false, err
		}
		if k != len(b) {
			return false, nil // shrunk meanwhile (repair): not sealed
		}
		break
	}
	return string(buf[1:]) == SealMarker && (size == n || buf[0] == '\n'), nil
}

// segmentPerm is the mode of a new segment in a directory of mode dm:
// 0644, or 0664 in a group-writable (group-shared) directory, without
// the others' read bit when others cannot enter the directory. Only the
// owner-write bit matters to the protocol (set: not sealed by chmod).
func segmentPerm(dm fs.FileMode) fs.FileMode {
	perm := fs.FileMode(modeOpen)
	if dm&0o020 != 0 {
		perm |= 0o020
	}
	if dm&0o001 == 0 {
		perm &^= 0o004
	}
	return perm
}

// createSegment creates segment n (exclusively) as an open segment and
// makes its existence durable. It returns fs.ErrExist if it is there.
func createSegment(dir string, n uint64) error {
	perm := fs.FileMode(modeOpen)
	if st, err := os.Stat(dir); err == nil {
		perm = segmentPerm(st.Mode())
	}
	f, err := safeopen.OpenFile(segPath(dir, n), os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm, safeopen.NoFollow)
	if err != nil {
		return err
	}
	// Undo a restrictive umask: the owner-write bit is the "open" flag,
	// the group-write bit lets the group-shared WAL's other user seal it.
	err = f.Chmod(perm)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("wal: create segment %s: %w", SegmentName(n), err)
	}
	return atomicfile.SyncDir(dir)
}

// sealSegment seals segment n while holding its exclusive lock, so that
// no append is in flight and every later append (which checks for the
// seal under a shared lock) goes elsewhere: it appends SealMarker
// (after a newline if a torn tail lacks one), fsyncs, and clears the
// write bits too when it owns the file (another user's segment keeps
// them: the marker is the seal). A segment already sealed either way is
// left alone.
func sealSegment(dir string, n uint64) error {
	name := SegmentName(n)
	f, err := safeopen.Open(segPath(dir, n), safeopen.NoFollow)
	if err != nil {
		return fmt.Errorf("wal: seal segment: %w", err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := flock(fd, lockEX); err != nil {
		return fmt.Errorf("wal: seal segment %s: lock: %w", name, err)
	}
	defer flock(fd, lockUN)
	sealed, size, err := sealedFd(fd)
	if err != nil {
		return fmt.Errorf("wal: seal segment %s: %w", name, err)
	}
	if sealed {
		return nil
	}
	// A second descriptor writes: the locked one is read-only, so that a
	// segment sealed by chmod (no write bit) can still be checked above.
	w, err := safeopen.OpenFile(segPath(dir, n), os.O_WRONLY|os.O_APPEND, 0, safeopen.NoFollow)
	if err != nil {
		return fmt.Errorf("wal: seal segment: %w", err)
	}
	defer w.Close()
	line := []byte(SealMarker)
	if size > 0 {
		end, err := lastNewlineEnd(f, size)
		if err != nil {
			return fmt.Errorf("wal: seal segment %s: %w", name, err)
		}
		if end != size {
			line = append([]byte{'\n'}, line...) // ends the torn tail as a (corrupt) line
		}
	}
	if _, err := w.Write(line); err != nil {
		return fmt.Errorf("wal: seal segment %s: append seal marker: %w", name, err)
	}
	if err := w.Sync(); err != nil {
		return fmt.Errorf("wal: seal segment %s: fsync: %w", name, err)
	}
	var st statT
	if err := fstat(fd, &st); err == nil && int(st.Uid) == os.Geteuid() {
		// Also the old seal, for appenders that predate the marker.
		if err := f.Chmod(fs.FileMode(st.Mode) & 0o444); err != nil {
			return fmt.Errorf("wal: seal segment %s: %w", name, err)
		}
	}
	return nil
}

// segmentSealed reports whether segment n is sealed (see sealedFd).
func segmentSealed(dir string, n uint64) (bool, error) {
	f, err := safeopen.Open(segPath(dir, n), safeopen.NoFollow)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sealed, _, err := sealedFd(int(f.Fd()))
	return sealed, err
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
//
// A sealed segment is left as it is (its torn last line is reported and
// skipped by readers): it may have no write bit, or belong to the other
// user of a group-shared WAL.
func RepairSegment(dir string, n uint64) (*CorruptError, error) {
	lf, err := safeopen.Open(segPath(dir, n), safeopen.NoFollow)
	if err != nil {
		return nil, fmt.Errorf("wal: repair: %w", err)
	}
	defer lf.Close()
	fd := int(lf.Fd())
	if err := flock(fd, lockEX); err != nil {
		return nil, fmt.Errorf("wal: repair segment %s: lock: %w", SegmentName(n), err)
	}
	defer flock(fd, lockUN)
	sealed, size, err := sealedFd(fd)
	if err != nil {
		return nil, fmt.Errorf("wal: repair segment %s: %w", SegmentName(n), err)
	}
	if sealed {
		return nil, nil
	}
	f, err := safeopen.OpenFile(segPath(dir, n), os.O_RDWR, 0, safeopen.NoFollow)
	if err != nil {
		return nil, fmt.Errorf("wal: repair: %w", err)
	}
	defer f.Close()
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
