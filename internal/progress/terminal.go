package progress

import (
	"io"
	"sync"
)

// Terminal shares one terminal between progress lines and log records
// (the daemon in the foreground: slog and the encode progress both on
// stderr). Without it a log record written while a progress line is on
// the screen would start in the middle of that line.
//
// Writes through Progress and Log are serialized; a Log write first erases
// a progress line left without its newline, in the same write, so the
// record starts at column 0 and the line is drawn again, below it, at the
// meter's next redraw. Log records must end with a newline (slog's
// handlers write one record per Write, newline-terminated).
type Terminal struct {
	mu      sync.Mutex
	w       io.Writer
	partial bool // a progress line without its newline is on the screen
	buf     []byte
}

// NewTerminal returns a Terminal writing to w.
func NewTerminal(w io.Writer) *Terminal { return &Terminal{w: w} }

// Progress returns the writer to give Options.Out.
func (t *Terminal) Progress() io.Writer { return progressWriter{t} }

// Log returns the writer to give the logger.
func (t *Terminal) Log() io.Writer { return logWriter{t} }

type progressWriter struct{ t *Terminal }

func (p progressWriter) Write(b []byte) (int, error) {
	t := p.t
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.w.Write(b)
	if n > 0 {
		t.partial = b[n-1] != '\n'
	}
	return n, err
}

type logWriter struct{ t *Terminal }

// clearLine moves to column 0 and erases to the end of the line.
const clearLine = "\r\x1b[K"

func (l logWriter) Write(b []byte) (int, error) {
	t := l.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.partial {
		return t.w.Write(b)
	}
	t.buf = append(append(t.buf[:0], clearLine...), b...)
	n, err := t.w.Write(t.buf)
	if n >= len(clearLine) {
		t.partial = false
	}
	n -= len(clearLine)
	if n < 0 {
		n = 0
	}
	return n, err
}
