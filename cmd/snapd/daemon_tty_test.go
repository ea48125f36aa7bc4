package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/configs"
	"github.com/snapd-ml/snapd/internal/progress"
)

// TestDaemonOutputsShareTerminal: the daemon's logger and its encode
// progress line share stderr on a terminal: a log record written while
// the line is drawn erases it first and starts at column 0 (text and JSON
// logs); without a terminal or with --quiet there is no progress writer
// and the log goes to stderr as is.
func TestDaemonOutputsShareTerminal(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var errb bytes.Buffer
		e := newEnv(io.Discard, &errb)
		e.forceTTY = true
		logOut, progOut := e.daemonOutputs()
		if progOut == nil {
			t.Fatal("no progress writer on a terminal")
		}
		c := configs.Default()
		c.Log.Format = format
		log := newLogger(logOut, c)
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		m := progress.Start(progress.Options{Out: progOut, Label: "gen 000001 encode", Total: 1 << 20,
			Now: func() time.Time { now = now.Add(time.Second); return now }})
		m.Add(4096)
		log.Info("stage done", "stage", "encode")
		m.Add(4096)
		m.Finish()
		s := errb.String()
		i := strings.Index(s, "stage done")
		j := strings.LastIndex(s[:i], "\r")
		if i < 0 || j < 0 || !strings.HasPrefix(s[j:], "\r\x1b[K") || strings.Contains(s[j+4:i], "\x1b") {
			t.Fatalf("%s: record not after a cleared line: %q", format, s)
		}
		if !strings.Contains(s[:j], "gen 000001 encode: 4.0 KiB / 1.0 MiB") || !strings.Contains(s[i:], "\rgen 000001 encode: 8.0 KiB") {
			t.Fatalf("%s: progress not drawn before and after the record: %q", format, s)
		}
	}
	for _, quiet := range []bool{false, true} {
		var errb bytes.Buffer
		e := newEnv(io.Discard, &errb)
		e.forceTTY = quiet // a terminal but --quiet; or no terminal
		e.global.quiet = quiet
		logOut, progOut := e.daemonOutputs()
		if progOut != nil || logOut != io.Writer(&errb) {
			t.Fatalf("quiet=%v: progress %v, log %T", quiet, progOut, logOut)
		}
	}
}
