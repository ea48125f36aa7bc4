package progress

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestTerminalLogClearsLine: a log record written while a progress line is
// drawn erases that line first (in the same write), starts at column 0 and
// the meter's next redraw draws the line again below it; records written
// with no line on the screen are passed on unchanged.
func TestTerminalLogClearsLine(t *testing.T) {
	var screen bytes.Buffer
	term := NewTerminal(&screen)
	log := slog.New(slog.NewTextHandler(term.Log(), &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { now = now.Add(time.Second); return now }

	log.Info("before")
	m := Start(Options{Out: term.Progress(), Label: "gen 1 encode", Total: 4096, Now: clock})
	m.Add(1024)
	log.Info("stage finished", "stage", "sign")
	m.Add(1024)
	m.Finish()
	log.Info("after")

	got := screen.String()
	want := "level=INFO msg=before\n" +
		"\rgen 1 encode: 1.0 KiB / 4.0 KiB (25%), 1.0 KiB/s, ETA 3s\x1b[K" +
		"\r\x1b[Klevel=INFO msg=\"stage finished\" stage=sign\n" +
		"\rgen 1 encode: 2.0 KiB / 4.0 KiB (50%), 1.0 KiB/s, ETA 2s\x1b[K" +
		"\rgen 1 encode: 2.0 KiB, 682 B/s in 3s\x1b[K\n" +
		"level=INFO msg=after\n"
	if got != want {
		t.Fatalf("screen\n got %q\nwant %q", got, want)
	}
	// Every log record starts at column 0: after a newline or a clear.
	for _, rec := range []string{"level=INFO msg=before", "level=INFO msg=\"stage", "level=INFO msg=after"} {
		i := strings.Index(got, rec)
		if i < 0 || (i > 0 && got[i-1] != '\n' && !strings.HasSuffix(got[:i], clearLine)) {
			t.Fatalf("record %q not at column 0 in %q", rec, got)
		}
	}
}

// TestTerminalConcurrent: log records and redraws from several goroutines
// never split each other (run with -race).
func TestTerminalConcurrent(t *testing.T) {
	var screen bytes.Buffer
	term := NewTerminal(&screen)
	m := Start(Options{Out: term.Progress(), Label: "x", Total: 1 << 20, Interval: time.Nanosecond})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if g%2 == 0 {
					term.Log().Write([]byte("record\n"))
				} else {
					m.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	m.Finish()
	for _, l := range strings.Split(screen.String(), "\n") {
		// A line holding a record holds it whole, after any erased
		// progress line: the record is what follows the last "\r\x1b[K".
		if i := strings.Index(l, "record"); i >= 0 {
			if l[i:] != "record" {
				t.Fatalf("split line %q", l)
			}
			if pre := l[:i]; pre != "" && !strings.HasSuffix(pre, clearLine) {
				t.Fatalf("record after a progress line without a clear: %q", l)
			}
		}
	}
	if n := strings.Count(screen.String(), "record\n"); n != 400 {
		t.Fatalf("%d records", n)
	}
}
