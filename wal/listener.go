package wal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultPollInterval is the Listener's polling period.
const DefaultPollInterval = 250 * time.Millisecond

// ListenerOptions tune a Listener.
type ListenerOptions struct {
	// PollInterval is how often the directory is re-read without a
	// notification: the only wake-up source when NoNotify is set or
	// fsnotify cannot watch the directory, a safety net otherwise. 0
	// means DefaultPollInterval.
	PollInterval time.Duration
	// NoNotify disables fsnotify (polling only; e.g. network file
	// systems that do not deliver events).
	NoNotify bool
	// ReadOnly stops the listener from sealing stale segments and from
	// repairing torn tails; set it for anything but the consumer.
	ReadOnly bool
	// OnCorrupt receives skipped records and repaired tails; nil ignores them.
	OnCorrupt func(*CorruptError)
	// OnError receives I/O errors (the listener retries at the next
	// poll); nil ignores them.
	OnError func(error)
}

// Listener watches a WAL directory and delivers new records, in log
// order, to a channel owned by its caller. Bursts of appends are
// coalesced: one wake-up reads everything appended so far.
//
// Lifecycle: NewListener, Start(ctx, out), Close(ctx). No goroutine
// started by Start outlives Close (or the cancellation of Start's ctx
// followed by Close). The listener never closes out.
type Listener struct {
	dir  string
	from Pos
	opts ListenerOptions

	mu      sync.Mutex
	started bool
	stop    chan struct{}
	done    chan struct{}
	notify  bool // fsnotify in use
}

// NewListener prepares a listener that starts reading at from (usually
// Consumer.Cursor()).
func NewListener(dir string, from Pos, opts ListenerOptions) *Listener {
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	return &Listener{dir: dir, from: from, opts: opts, stop: make(chan struct{}), done: make(chan struct{})}
}

// Start begins watching; records are sent to out until ctx ends or Close
// is called. It fails if called twice. If fsnotify cannot be set up the
// listener falls back to polling (Notifying reports which).
func (l *Listener) Start(ctx context.Context, out chan<- Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return errors.New("wal: listener already started")
	}
	select {
	case <-l.stop:
		return ErrClosed
	default:
	}
	l.started = true
	var w *fsnotify.Watcher
	if !l.opts.NoNotify {
		var err error
		if w, err = fsnotify.NewWatcher(); err == nil {
			if err = w.Add(l.dir); err != nil {
				w.Close()
				w = nil
			}
		}
		if err != nil && l.opts.OnError != nil {
			l.opts.OnError(fmt.Errorf("wal: fsnotify on %s unavailable, polling every %s: %w", l.dir, l.opts.PollInterval, err))
		}
	}
	l.notify = w != nil
	go l.run(ctx, w, out)
	return nil
}

// Notifying reports whether fsnotify is in use (false: polling only).
func (l *Listener) Notifying() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.notify
}

// Close stops the listener and waits for its goroutine (or for ctx).
func (l *Listener) Close(ctx context.Context) error {
	l.mu.Lock()
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	started := l.started
	l.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wal: listener close: %w", ctx.Err())
	}
}

func (l *Listener) run(ctx context.Context, w *fsnotify.Watcher, out chan<- Record) {
	defer close(l.done)
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	ropts := ReaderOptions{OnCorrupt: l.opts.OnCorrupt, Seal: !l.opts.ReadOnly}
	r := NewReader(l.dir, l.from, ropts)
	defer func() { r.Close() }()
	tick := time.NewTicker(l.opts.PollInterval)
	defer tick.Stop()
	var lastPending Pos
	for {
		// Drain everything that is there now.
		for r.Next() {
			select {
			case out <- r.Record():
			case <-ctx.Done():
				return
			case <-l.stop:
				return
			}
		}
		if err := r.Err(); err != nil {
			if l.opts.OnError != nil {
				l.opts.OnError(err)
			}
			pos := r.Pos()
			r.Close()
			r = NewReader(l.dir, pos, ropts)
		}
		polled := false
		select {
		case <-ctx.Done():
			return
		case <-l.stop:
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if _, seg := ParseSegmentName(filepath.Base(ev.Name)); !seg {
				continue
			}
			// Coalesce the burst: swallow what is queued.
			for more := true; more; {
				select {
				case _, ok := <-events:
					more = ok
				default:
					more = false
				}
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if l.opts.OnError != nil {
				l.opts.OnError(fmt.Errorf("wal: fsnotify: %w", err))
			}
		case <-tick.C:
			polled = true
		}
		// A tail that stays unterminated from one poll to the next is
		// either a slow append or a torn one; RepairSegment tells them
		// apart under the segment lock.
		if polled && !l.opts.ReadOnly {
			if p := r.Pending(); p > 0 {
				if lastPending == r.Pos() {
					if ce, err := RepairSegment(l.dir, r.Pos().Segment); err != nil {
						if l.opts.OnError != nil {
							l.opts.OnError(err)
						}
					} else if ce != nil {
						// Drop the torn bytes the reader holds before an
						// append can reuse their offsets.
						r.truncated(ce.Segment, ce.Offset)
						if l.opts.OnCorrupt != nil {
							l.opts.OnCorrupt(ce)
						}
					}
					lastPending = Pos{}
				} else {
					lastPending = r.Pos()
				}
			} else {
				lastPending = Pos{}
			}
		}
	}
}
