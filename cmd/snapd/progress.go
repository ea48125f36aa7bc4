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
	var out io.Writer
	if e.forceTTY && !e.global.quiet {
		out = e.stderr
	} else {
		out = progress.Output(e.stderr, e.global.quiet)
	}
	return progress.Start(progress.Options{Out: out, Label: label, Total: total, Now: e.now})
}

// wtxtSizeEstimate is about the size of the WTXT written for raw array
// bytes: base64 (4/3) in 76-character lines plus each line's parity and
// separators (3 bytes): 57 raw bytes per 79-byte line. Headers and ch/arr
// lines add a little; the progress line calls it the total.
func wtxtSizeEstimate(raw int64) int64 {
	if raw <= 0 {
		return 0
	}
	lines := raw/57 + 1
	if lines > (1<<62)/79 {
		return 1 << 62
	}
	return lines * 79
}
