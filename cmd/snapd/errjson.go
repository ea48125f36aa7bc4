package main

import (
	"encoding/json"
	"errors"
	"io"
	"slices"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/internal/where"
	"github.com/snapd-ml/snapd/snapshot"
)

// errorJSON is what a command run with --json prints on stdout when it
// fails before writing its own JSON (docs/JSON.md): stdout then always
// holds one JSON document, the result or this. The human-readable
// "snapd: error:" line still goes to stderr. Commands whose JSON report
// carries the failures (verify, verify-repo, diff) print only the report.
type errorJSON struct {
	Error errorBody `json:"error"`
}

type errorBody struct {
	// Code is "usage" (exit 2: bad flags or arguments), "io" (exit 2: a
	// file, directory, network or credential could not be used) or
	// "invalid" (exit 1: bad input or a failed check).
	Code     string    `json:"code"`
	ExitCode int       `json:"exit_code"`
	Message  string    `json:"message"`
	Hint     string    `json:"hint,omitempty"`
	Where    whereJSON `json:"where"`
}

// whereJSON locates the failure; every member is optional.
type whereJSON struct {
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Offset *int64 `json:"offset,omitempty"`
	Part   string `json:"part,omitempty"` // zip member, table, TOC entry, component, commit, branch
	Array  string `json:"array,omitempty"`
	Chunk  *int64 `json:"chunk,omitempty"`
	// Check is the check's name within its namespace ("crc32c"), the
	// stable names of the reports; Namespace names the vocabulary
	// ("wtxt", "format", "seal", "layout", "ledger", "ranks", "wal", "git").
	Check     string `json:"check,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// errorCode names the class of err as errorBody.Code does.
func errorCode(err error) string {
	var u usageError
	switch {
	case errors.As(err, &u), isCobraUsage(err):
		return "usage"
	case exitCode(err) == exitUsage:
		return "io"
	}
	return "invalid"
}

// errorWhere collects the position the error carries: the Where of its
// outermost internal/where.Locator (which merges what its causes know),
// else the path of a *fs.PathError.
func errorWhere(err error) whereJSON {
	l, ok := where.Of(err)
	if !ok {
		return whereJSON{}
	}
	w := whereJSON{File: l.File, Line: l.Line, Part: l.Part, Array: l.Array, Check: l.Name(), Namespace: l.Namespace()}
	if l.Offset >= 0 {
		o := l.Offset
		w.Offset = &o
	}
	if l.Chunk >= 0 {
		c := l.Chunk
		w.Chunk = &c
	}
	return w
}

// newErrorJSON builds the error object for err.
func newErrorJSON(err error) errorJSON {
	return errorJSON{errorBody{Code: errorCode(err), ExitCode: exitCode(err), Message: err.Error(), Hint: hintFor(err), Where: errorWhere(err)}}
}

// wantsJSON reports whether the command was asked for JSON output: its
// --json flag was set, or (when flag parsing itself failed) the arguments
// hold --json.
func wantsJSON(cmd *cobra.Command, args []string) bool {
	if cmd != nil {
		if f := cmd.Flags().Lookup("json"); f != nil && f.Changed {
			return f.Value.String() == "true"
		}
	}
	return slices.Contains(args, "--json") || slices.Contains(args, "--json=true")
}

// countingWriter remembers whether anything was written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeErrorJSON prints the error object on w (indented like the
// commands' JSON).
func writeErrorJSON(w io.Writer, err error) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(newErrorJSON(err))
}

// diffJSON returns ds with the shapes of scalars as [] instead of null
// (docs/JSON.md: one type per field).
func diffJSON(ds []snapshot.ArrayDiff) []snapshot.ArrayDiff {
	out := slices.Clone(ds)
	for i := range out {
		if out[i].Shape == nil {
			out[i].Shape = []int64{}
		}
	}
	return out
}
