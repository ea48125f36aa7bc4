package main

import (
	"io"

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
