package wal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/snapd-ml/snapd/internal/safeopen"
)

// ErrCursorDamaged is wrapped by *CursorError: the persisted cursor
// cannot be a position the consumer reached, so reading from it would
// lose requests.
var ErrCursorDamaged = errors.New("wal: cursor damaged")

// CursorError says why the cursor of a WAL directory cannot be resumed
// from. Damage is never repaired implicitly: RepairCursor (`snapd wal
// repair`) does it on request and says what it did.
type CursorError struct {
	Dir    string // the WAL directory
	Cursor Pos    // the persisted cursor
	// Size is the size of the cursor's segment, -1 when it is missing.
	Size   int64
	Reason string // which check failed
}

func (e *CursorError) Error() string {
	return fmt.Sprintf("wal: cursor %s in %s: %s; requests appended from now on would never be read (repair: stop the daemon and run `snapd wal repair`, which resumes after the last handled request at or before the cursor)",
		e.Cursor, filepath.Join(e.Dir, CursorFile), e.Reason)
}

func (e *CursorError) Unwrap() error { return ErrCursorDamaged }

// CheckCursor reads the cursor of the WAL directory dir and checks it
// against the segments (see CheckCursorAt). It only reads, takes no lock
// and is safe while a consumer runs: the consumer only moves the cursor
// forward to record boundaries and removes segments below it, which never
// makes a sound cursor look damaged. A missing cursor file is sound.
func CheckCursor(dir string) error {
	p, err := ReadCursor(dir)
	if err != nil {
		return err
	}
	return CheckCursorAt(dir, p)
}

// CheckCursorAt checks that p can be where a consumer of dir stopped:
// the zero Pos (no cursor yet); or a position in an existing segment at
// most at its end, at offset 0 or just after a newline (the end of a
// record); or a segment that no longer exists while a higher one does
// (readers continue there). It returns a *CursorError (wrapping
// ErrCursorDamaged) when p is past its segment's end, inside a line, or in
// a segment above every segment present (appenders write below it). I/O
// errors are returned as they are.
func CheckCursorAt(dir string, p Pos) error {
	if p == (Pos{}) {
		return nil
	}
	damaged := func(size int64, format string, a ...any) error {
		return &CursorError{Dir: dir, Cursor: p, Size: size, Reason: fmt.Sprintf(format, a...)}
	}
	f, err := safeopen.Open(segPath(dir, p.Segment), safeopen.NoFollow)
	if errors.Is(err, fs.ErrNotExist) {
		segs, err := Segments(dir)
		if err != nil {
			return err
		}
		if len(segs) > 0 && segs[len(segs)-1] > p.Segment {
			return nil // consumed and removed; reading goes on above it
		}
		if len(segs) == 0 {
			return damaged(-1, "its segment %s does not exist and the log has no segment", SegmentName(p.Segment))
		}
		return damaged(-1, "its segment %s does not exist and the log ends at segment %s, below it", SegmentName(p.Segment), SegmentName(segs[len(segs)-1]))
	}
	if err != nil {
		return fmt.Errorf("wal: check cursor: %w", err)
	}
	defer f.Close()
	var st statT
	if err := fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("wal: check cursor: stat segment %s: %w", SegmentName(p.Segment), err)
	}
	if p.Offset > st.Size {
		return damaged(st.Size, "offset %d is past the end of segment %s (%d bytes)", p.Offset, SegmentName(p.Segment), st.Size)
	}
	if p.Offset == 0 {
		return nil
	}
	var b [1]byte
	if _, err := f.ReadAt(b[:], p.Offset-1); err != nil {
		if err == io.EOF {
			// Shrunk since the stat: only a repair truncates, and never
			// below a record end, so the cursor is past the end.
			return damaged(p.Offset-1, "offset %d is past the end of segment %s", p.Offset, SegmentName(p.Segment))
		}
		return fmt.Errorf("wal: check cursor: read segment %s at %d: %w", SegmentName(p.Segment), p.Offset-1, err)
	}
	if b[0] != '\n' {
		return damaged(st.Size, "offset %d of segment %s (%d bytes) is not a record boundary (the byte before it is not a newline)", p.Offset, SegmentName(p.Segment), st.Size)
	}
	return nil
}

// CursorRepair is what RepairCursor did.
type CursorRepair struct {
	// Damage is the cursor's damage; nil when the cursor was sound and
	// nothing was written.
	Damage *CursorError
	// Old and New are the cursor before and after the repair.
	Old, New Pos
	// LastHandled is the last record of the handled run that New
	// follows (HasLastHandled false: New is the start of the scan).
	LastHandled    Record
	HasLastHandled bool
	// Redelivered counts the valid records between New and the old
	// cursor (or the end of the log before it): they are delivered
	// again. Those already handled (Seen) are skipped by the consumer by
	// generation; Unhandled of them were never handled and are handled
	// now. FirstUnhandled is the first of those (when Unhandled > 0).
	Redelivered    int
	Unhandled      int
	FirstUnhandled Record
	// Corrupt lists the corrupt byte runs met while scanning.
	Corrupt []*CorruptError
}

// RepairCursor repairs a damaged cursor of the WAL directory dir (see
// CheckCursorAt): it takes the consumer lock (ErrLocked while a consumer
// runs), scans the valid records that end at or before the cursor — from
// the start of the cursor's segment, or of the lowest segment when the
// cursor's segment is missing — and moves the cursor to the end of the
// longest run of records from that start that are already handled (their
// generation done, or this request failed: what Consumer.Seen skips). So
// no request is skipped: every record after the new cursor is delivered,
// and the handled ones among them are skipped by generation as after a
// crash. The new cursor is written atomically and durably (temp file,
// fsync, rename, fsync of the directory). A sound cursor is left alone
// (Damage nil).
func RepairCursor(ctx context.Context, dir string) (*CursorRepair, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("wal: repair cursor: %w", err)
	}
	lock, err := safeopen.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o644, safeopen.NoFollow)
	if err != nil {
		return nil, fmt.Errorf("wal: open lock: %w", err)
	}
	defer lock.Close()
	if err := flock(int(lock.Fd()), lockEX|lockNB); err != nil {
		if errors.Is(err, errWouldBlock) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("wal: lock %s: %w", dir, err)
	}
	defer flock(int(lock.Fd()), lockUN) // before the Close: see Consumer.Close
	old, err := ReadCursor(dir)
	if err != nil {
		return nil, err
	}
	rep := &CursorRepair{Old: old, New: old}
	cerr := CheckCursorAt(dir, old)
	if cerr == nil {
		return rep, nil
	}
	if !errors.As(cerr, &rep.Damage) {
		return nil, cerr
	}
	outcomes, err := LoadOutcomes(dir)
	if err != nil {
		return nil, err
	}
	start := Pos{Segment: old.Segment}
	if rep.Damage.Size < 0 {
		segs, err := Segments(dir)
		if err != nil {
			return nil, err
		}
		start = Pos{}
		if len(segs) > 0 {
			start = Pos{Segment: segs[0]}
		}
	}
	rep.New = start
	r := NewReader(dir, start, ReaderOptions{OnCorrupt: func(ce *CorruptError) { rep.Corrupt = append(rep.Corrupt, ce) }})
	r.scan = true
	defer r.Close()
	prefix := true
	for r.Next() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rec := r.Record()
		if old.Less(rec.End) {
			break // ends after the cursor: delivered anyway
		}
		o, ok := outcomes[rec.Gen]
		handled := ok && (o.State == Done || o.Pos == rec.Pos)
		if prefix && handled {
			rep.New, rep.LastHandled, rep.HasLastHandled = rec.End, rec, true
			continue
		}
		prefix = false
		rep.Redelivered++
		if !handled {
			if rep.Unhandled == 0 {
				rep.FirstUnhandled = rec
			}
			rep.Unhandled++
		}
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	if err := writeCursor(dir, rep.New); err != nil {
		return nil, err
	}
	return rep, nil
}
