// Package progress draws one self-overwriting progress line for long work
// (convert, verify, assemble, verify-repo, the daemon) on a terminal:
// bytes done of the total, rate and ETA, redrawn at most every Interval.
//
// A Meter counts bytes (Add, or the Reader/Writer/ReaderAt wrappers, which
// are safe for concurrent use). It draws nothing when its output is nil,
// which is what New returns for a non-terminal or with quiet set: callers
// wrap unconditionally. Time comes from an injected clock so tests drive
// redraws without sleeping.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultInterval is the least time between two redraws.
const DefaultInterval = 200 * time.Millisecond

// Options configure a Meter.
type Options struct {
	// Out receives the line ("\r" + text + erase to end of line); nil
	// draws nothing (counting still works).
	Out io.Writer
	// Label starts the line (e.g. the file name).
	Label string
	// Total is the expected byte count; 0 when unknown (no percentage or
	// ETA then).
	Total int64
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Interval is the least time between redraws; default DefaultInterval.
	Interval time.Duration
}

// Meter counts bytes and redraws the line. The zero value is not usable;
// use New or Start.
type Meter struct {
	o     Options
	done  atomic.Int64
	start time.Time

	mu    sync.Mutex // guards drawing state and Out
	last  time.Time  // last redraw (the start before the first)
	drawn bool       // a line is on the screen
	shown bool       // a line was drawn at some point
	ended bool
}

// IsTerminal reports whether f is a terminal: on Linux an ioctl TCGETS
// succeeds, on macOS and the BSDs TIOCGETA, on Windows GetConsoleMode;
// elsewhere it reports false (no progress line is drawn).
func IsTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	return isTerminal(f.Fd())
}

// Output returns w when it is a terminal and quiet is false, else nil: the
// Out to give Options.
func Output(w io.Writer, quiet bool) io.Writer {
	if quiet {
		return nil
	}
	if f, ok := w.(*os.File); ok && IsTerminal(f) {
		return w
	}
	return nil
}

// Start returns a Meter for o, its start time read from o.Now.
func Start(o Options) *Meter {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Total < 0 {
		o.Total = 0
	}
	t := o.Now()
	return &Meter{o: o, start: t, last: t}
}

// Enabled reports whether the Meter draws anything.
func (m *Meter) Enabled() bool { return m != nil && m.o.Out != nil }

// Done returns the bytes counted so far.
func (m *Meter) Done() int64 { return m.done.Load() }

// SetTotal changes the expected byte count (e.g. once it is known).
func (m *Meter) SetTotal(n int64) {
	if n < 0 {
		n = 0
	}
	m.mu.Lock()
	m.o.Total = n
	m.mu.Unlock()
}

// Add counts n more bytes and redraws when Interval has passed since the
// last redraw (or the start: the first line appears after Interval). A
// redraw in progress elsewhere is not waited for.
func (m *Meter) Add(n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.done.Add(n)
	if m.o.Out == nil || !m.mu.TryLock() {
		return
	}
	defer m.mu.Unlock()
	now := m.o.Now()
	if m.ended || now.Sub(m.last) < m.o.Interval {
		return
	}
	m.draw(now, false)
}

// Finish draws the final line, with the average rate, followed by a
// newline; nothing when no line was drawn (work shorter than Interval
// stays silent). It is idempotent.
func (m *Meter) Finish() {
	if m == nil || m.o.Out == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return
	}
	m.ended = true
	if !m.shown {
		return
	}
	m.draw(m.o.Now(), true)
	io.WriteString(m.o.Out, "\n")
}

// Hide erases the line so that other output can be written to the same
// terminal (the caller's stdout, say); counting goes on and the next
// redraw draws it again.
func (m *Meter) Hide() {
	if m == nil || m.o.Out == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.drawn {
		io.WriteString(m.o.Out, "\r\x1b[K")
		m.drawn = false
	}
}

// Clear erases the line without a final one (on failure, before an error
// message is printed). It is idempotent.
func (m *Meter) Clear() {
	if m == nil || m.o.Out == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ended = true
	if m.drawn {
		io.WriteString(m.o.Out, "\r\x1b[K")
		m.drawn = false
	}
}

// Line renders the progress text for done bytes of total after elapsed
// (no control characters); the final line states what was done, its
// average rate and time, not the (possibly estimated) total. Exported for tests and for callers that log
// instead of drawing.
func Line(label string, done, total int64, elapsed time.Duration, final bool) string {
	var b strings.Builder
	if label != "" {
		b.WriteString(label)
		b.WriteString(": ")
	}
	b.WriteString(Bytes(done))
	if total > 0 && !final {
		pct := float64(done) / float64(total) * 100
		if pct > 100 {
			pct = 100
		}
		fmt.Fprintf(&b, " / %s (%.0f%%)", Bytes(total), pct)
	}
	var rate float64
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	if elapsed > 0 {
		fmt.Fprintf(&b, ", %s/s", Bytes(int64(rate)))
	}
	switch {
	case final:
		fmt.Fprintf(&b, " in %s", round(elapsed))
	case total > 0 && rate > 0 && done < total:
		eta := time.Duration(float64(total-done) / rate * float64(time.Second))
		fmt.Fprintf(&b, ", ETA %s", round(eta))
	}
	return b.String()
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	default:
		return d.Round(time.Millisecond)
	}
}

// Bytes formats n with binary units (B, KiB, MiB, GiB, TiB).
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit || u == "TiB" {
			return fmt.Sprintf("%.1f %s", f, u)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// draw writes the line; m.mu is held.
func (m *Meter) draw(now time.Time, final bool) {
	s := Line(m.o.Label, m.done.Load(), m.o.Total, now.Sub(m.start), final)
	io.WriteString(m.o.Out, "\r"+s+"\x1b[K")
	m.last, m.drawn, m.shown = now, true, true
}

// Reader counts the bytes read through r.
func (m *Meter) Reader(r io.Reader) io.Reader { return &reader{r: r, m: m} }

// Writer counts the bytes written through w.
func (m *Meter) Writer(w io.Writer) io.Writer { return &writer{w: w, m: m} }

type reader struct {
	r io.Reader
	m *Meter
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.m.Add(int64(n))
	return n, err
}

type writer struct {
	w io.Writer
	m *Meter
}

func (w *writer) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.m.Add(int64(n))
	return n, err
}

// WriteAtSeeker is a file-like writer (an *os.File).
type WriteAtSeeker interface {
	io.Writer
	io.WriterAt
	io.Seeker
}

// Wrap counts the bytes written through w, by Write and, when w is a
// WriteAtSeeker, by WriteAt too, keeping its Seek so writers that take a
// seekable fast path (wtxt.Encode) still do. A nil Meter returns w.
func (m *Meter) Wrap(w io.Writer) io.Writer {
	if m == nil {
		return w
	}
	if f, ok := w.(WriteAtSeeker); ok {
		return &fileWriter{f: f, m: m}
	}
	return m.Writer(w)
}

type fileWriter struct {
	f WriteAtSeeker
	m *Meter
}

func (w *fileWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.m.Add(int64(n))
	return n, err
}

func (w *fileWriter) WriteAt(p []byte, off int64) (int, error) {
	n, err := w.f.WriteAt(p, off)
	w.m.Add(int64(n))
	return n, err
}

func (w *fileWriter) Seek(off int64, whence int) (int64, error) { return w.f.Seek(off, whence) }

// WTXTEstimate is about the size of the WTXT written for raw array
// bytes: base64 (4/3) in 76-character lines plus each line's parity and
// separators (3 bytes): 57 raw bytes per 79-byte line. Headers and ch/arr
// lines add a little; the progress line calls it the total.
func WTXTEstimate(raw int64) int64 {
	if raw <= 0 {
		return 0
	}
	lines := raw/57 + 1
	if lines > (1<<62)/79 {
		return 1 << 62
	}
	return lines * 79
}
