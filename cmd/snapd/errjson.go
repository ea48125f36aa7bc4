package main

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"slices"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
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
	Part   string `json:"part,omitempty"` // zip member, table, TOC entry, component
	Array  string `json:"array,omitempty"`
	Chunk  *int64 `json:"chunk,omitempty"`
	Check  string `json:"check,omitempty"`
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

// errorWhere collects the position the error carries.
func errorWhere(err error) whereJSON {
	var w whereJSON
	var we *wtxt.Error
	var fe *formats.Error
	var pe *fs.PathError
	switch {
	case errors.As(err, &we):
		w.File, w.Line, w.Array, w.Check = we.File, we.Line, we.Array, string(we.Check)
		if we.Chunk >= 0 {
			c := we.Chunk
			w.Chunk = &c
		}
	case errors.As(err, &fe):
		w.File, w.Part, w.Array, w.Check = fe.File, fe.Where, fe.Tensor, fe.Check
		if fe.Offset >= 0 {
			o := fe.Offset
			w.Offset = &o
		}
	case errors.As(err, &pe):
		w.File = pe.Path
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
