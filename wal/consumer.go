package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/safeopen"
)

// ConsumerOptions tune a Consumer.
type ConsumerOptions struct {
	// SegmentSize: when a completion finds the active (highest) segment
	// at least this large, the consumer rotates to a new one. Segments may
	// exceed it by what is appended between two completions. 0 means
	// DefaultSegmentSize.
	SegmentSize int64
	// Now stamps outcomes; nil means time.Now.
	Now func() time.Time
}

// Consumer is the single process that handles requests (the daemon). It
// holds an exclusive lock on the WAL directory, the durable cursor (where
// to resume) and the durable outcome of every generation (done or failed),
// and it rotates and removes segments.
//
// Delivery is at least once: the cursor moves past a record only after its
// outcome is fsynced, so a crash at any point re-delivers at most the
// records whose cursor update was lost. Handling is idempotent by
// generation: Handle does not run the handler for a generation that is
// already done (nor again for the same failed request), so a re-delivered
// or duplicate request is skipped. The handler itself runs twice only if
// the process dies after the handler finished but before its outcome was
// fsynced; handlers should therefore produce their effect atomically
// (e.g. rename into place) so that a second run is harmless.
//
// Methods are safe for concurrent use, but completions must be reported
// in log order.
type Consumer struct {
	dir     string
	opts    ConsumerOptions
	lock    *os.File
	repairs []*CorruptError

	mu       sync.Mutex
	outcomes map[uint64]Outcome
	failed   map[Pos]Outcome // failed requests by position
	cursor   Pos
	olog     *os.File
	closed   bool
}

// OpenConsumer takes the WAL directory dir (creating it), failing with
// ErrLocked if another consumer holds it. It sweeps stale temp files,
// repairs torn tails of segments and of the outcomes log, and loads the
// cursor and outcomes. A damaged cursor (see CheckCursorAt) fails with a
// *CursorError wrapping ErrCursorDamaged; RepairCursor repairs it.
func OpenConsumer(dir string, opts ConsumerOptions) (*Consumer, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	lock, err := safeopen.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o644, safeopen.NoFollow)
	if err != nil {
		return nil, fmt.Errorf("wal: open lock: %w", err)
	}
	if err := flock(int(lock.Fd()), lockEX|lockNB); err != nil {
		lock.Close()
		if errors.Is(err, errWouldBlock) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("wal: lock %s: %w", dir, err)
	}
	c := &Consumer{dir: dir, opts: opts, lock: lock}
	if err := c.init(); err != nil {
		lock.Close()
		return nil, err
	}
	return c, nil
}

func (c *Consumer) init() error {
	if _, err := atomicfile.Sweep(c.dir); err != nil {
		return fmt.Errorf("wal: sweep: %w", err)
	}
	rep, err := Repair(c.dir)
	if err != nil {
		return err
	}
	c.repairs = rep
	opath := filepath.Join(c.dir, OutcomesFile)
	ol, err := readOutcomes(opath)
	if err != nil {
		return err
	}
	c.repairs = append(c.repairs, ol.corrupt...)
	f, err := safeopen.OpenFile(opath, os.O_RDWR|os.O_CREATE, 0o644, safeopen.NoFollow)
	if err != nil {
		return fmt.Errorf("wal: open outcomes: %w", err)
	}
	// Drop a torn last line (a crash mid-append) so new lines start clean.
	st, err := f.Stat()
	if err == nil && st.Size() != ol.good {
		if err = f.Truncate(ol.good); err == nil {
			err = f.Sync()
		}
	}
	if err == nil {
		_, err = f.Seek(0, 2)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("wal: outcomes log: %w", err)
	}
	c.olog = f
	c.outcomes, c.failed = ol.latest, ol.failed
	if c.cursor, err = ReadCursor(c.dir); err != nil {
		f.Close()
		return err
	}
	// A cursor past its segment's end or inside a line (a lost tail, a
	// state directory restored from mixed backups) would make every later
	// request land below it, never read: refuse to start instead.
	if err := CheckCursorAt(c.dir, c.cursor); err != nil {
		f.Close()
		return err
	}
	return nil
}

// Dir returns the WAL directory.
func (c *Consumer) Dir() string { return c.dir }

// Repairs returns what OpenConsumer removed or skipped: torn segment
// tails and corrupt outcome lines.
func (c *Consumer) Repairs() []*CorruptError { return c.repairs }

// Cursor returns the position after the last completed record: where a
// Reader or Listener should start.
func (c *Consumer) Cursor() Pos {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cursor
}

// Outcome returns the latest outcome recorded for gen.
func (c *Consumer) Outcome(gen uint64) (Outcome, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.outcomes[gen]
	return o, ok
}

// Seen reports whether rec needs no handling: its generation is done, or
// this very request already failed.
func (c *Consumer) Seen(rec Record) bool {
	if c.Handled(rec) {
		return true
	}
	o, ok := c.Outcome(rec.Gen)
	return ok && o.State == Done
}

// Handled reports whether this very request (its position) already has an
// outcome: a redelivery after a crash lost the cursor update. Unlike Seen,
// another request for a generation that is done is not handled: a caller
// that must tell a duplicate from a re-used generation number (the
// daemon) judges it and completes it with its own outcome.
func (c *Consumer) Handled(rec Record) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.failed[rec.Pos]; ok {
		return true
	}
	o, ok := c.outcomes[rec.Gen]
	return ok && o.Pos == rec.Pos
}

// Handle runs fn for rec unless Seen(rec), records the outcome (Done if fn
// returns nil, Failed with its message otherwise) and advances the cursor.
// If fn fails because ctx ended, nothing is recorded and the error is
// returned, so the request is delivered again after a restart. It returns
// the generation's outcome and whether fn ran; err reports only cursor,
// outcome-log or context failures.
func (c *Consumer) Handle(ctx context.Context, rec Record, fn func(context.Context, Record) error) (o Outcome, ran bool, err error) {
	if err := ctx.Err(); err != nil {
		return o, false, err
	}
	if c.Seen(rec) {
		o, _ = c.Outcome(rec.Gen)
		return o, false, c.Skip(rec)
	}
	ferr := fn(ctx, rec)
	if ferr != nil && ctx.Err() != nil {
		return o, true, fmt.Errorf("wal: handling gen %d interrupted: %w", rec.Gen, ferr)
	}
	state, msg := Done, ""
	if ferr != nil {
		state, msg = Failed, ferr.Error()
	}
	o, err = c.Complete(rec, state, msg)
	return o, true, err
}

// Complete durably records the outcome of rec (fsync) and then moves the
// cursor past it (atomic file). Records must be completed in log order.
func (c *Consumer) Complete(rec Record, state State, msg string) (Outcome, error) {
	if state != Done && state != Failed {
		return Outcome{}, fmt.Errorf("wal: complete gen %d: state must be done or failed, not %s", rec.Gen, state)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkOrder(rec); err != nil {
		return Outcome{}, err
	}
	o := Outcome{Gen: rec.Gen, State: state, Pos: rec.Pos, Time: c.opts.Now().UTC(), Source: rec.Source, Message: msg}
	if err := appendSync(c.olog, encodeOutcome(o)); err != nil {
		return Outcome{}, fmt.Errorf("wal: record outcome of gen %d: %w", rec.Gen, err)
	}
	addOutcome(c.outcomes, c.failed, o)
	return o, c.advance(rec.End)
}

// Skip moves the cursor past rec without recording anything (for requests
// that are Seen).
func (c *Consumer) Skip(rec Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkOrder(rec); err != nil {
		return err
	}
	return c.advance(rec.End)
}

func (c *Consumer) checkOrder(rec Record) error {
	if c.closed {
		return ErrClosed
	}
	if rec.Pos.Less(c.cursor) {
		return fmt.Errorf("%w: record at %s is before the cursor %s", ErrOutOfOrder, rec.Pos, c.cursor)
	}
	return nil
}

// advance persists the cursor, then removes consumed segments and rotates
// the active one when it is full.
func (c *Consumer) advance(p Pos) error {
	if err := writeCursor(c.dir, p); err != nil {
		return err
	}
	c.cursor = p
	segs, err := Segments(c.dir)
	if err != nil {
		return err
	}
	for _, n := range segs {
		if n < p.Segment {
			if err := os.Remove(segPath(c.dir, n)); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("wal: remove consumed segment: %w", err)
			}
		}
	}
	if len(segs) == 0 {
		return nil
	}
	top := segs[len(segs)-1]
	st, err := os.Stat(segPath(c.dir, top))
	if err != nil {
		return fmt.Errorf("wal: stat active segment: %w", err)
	}
	if st.Size() < c.opts.SegmentSize {
		return nil
	}
	sealed, err := segmentSealed(c.dir, top)
	if err != nil {
		return fmt.Errorf("wal: stat active segment: %w", err)
	}
	if !sealed {
		if err := rotate(c.dir, top); err != nil {
			return err
		}
	}
	return nil
}

// Close releases the outcomes log and the directory lock.
func (c *Consumer) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.olog.Close()
	// Unlocked before it is closed: closing alone does not unlock while a
	// child being forked holds a copy of the descriptor.
	flock(int(c.lock.Fd()), lockUN)
	if lerr := c.lock.Close(); err == nil {
		err = lerr
	}
	return err
}
