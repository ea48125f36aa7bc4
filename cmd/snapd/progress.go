package main

import (
	"io"
	"log/slog"

	"github.com/snapd-ml/snapd/gitops/verify"
	"github.com/snapd-ml/snapd/internal/progress"
)

// meter starts a progress line on stderr for long work (convert, verify,
// assemble, verify-repo): drawn only when stderr is a terminal and
// --quiet is not given; otherwise it only counts. Callers Finish it on
// success and Clear it before an error is printed.
func (e *env) meter(label string, total int64) *progress.Meter {
	return progress.Start(progress.Options{Out: e.progressOut(), Label: label, Total: total, Now: e.now})
}

// progressOut is stderr when progress lines are drawn there (a terminal,
// no --quiet), else nil.
func (e *env) progressOut() io.Writer {
	if e.forceTTY && !e.global.quiet {
		return e.stderr
	}
	return progress.Output(e.stderr, e.global.quiet)
}

// daemonOutputs returns the daemon's log and progress writers: stderr and
// no progress when no line is drawn (not a terminal, --quiet); otherwise
// both share stderr through a progress.Terminal, so a log record erases
// the encode progress line before it is written instead of landing in
// its middle.
func (e *env) daemonOutputs() (log, prog io.Writer) {
	if e.progressOut() == nil {
		return e.stderr, nil
	}
	t := progress.NewTerminal(e.stderr)
	return t.Log(), t.Progress()
}

// meterWithLog is meter for work whose components log (the registry
// client's retry warnings): when the line is drawn, the returned env's
// logger (warnings, as the default) and the line share stderr through a
// progress.Terminal; otherwise it returns e and e.meter.
func (e *env) meterWithLog(label string, total int64) (*env, *progress.Meter) {
	if e.progressOut() == nil {
		return e, e.meter(label, total)
	}
	t := progress.NewTerminal(e.stderr)
	le := *e
	le.logger = slog.New(slog.NewTextHandler(t.Log(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	return &le, progress.Start(progress.Options{Out: t.Progress(), Label: label, Total: total, Now: e.now})
}

// repoProgress adds a progress line to verify-repo: the WTXT bytes of the
// generations checked so far (the total is not known before the walk).
// The line is hidden while a generation's result is printed to stdout.
func repoProgress(e *env, vo *verify.Options, target string) *progress.Meter {
	m := e.meter("verify-repo "+target, 0)
	next := vo.OnGeneration
	vo.OnGeneration = func(g *verify.Generation) {
		if next != nil {
			m.Hide()
			next(g)
		}
		m.Add(g.WTXTBytes)
	}
	return m
}
