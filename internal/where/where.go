// Package where is the one vocabulary of located errors: a failure says
// where it happened (file, line or byte offset, part, array, chunk) and
// which check failed, with the check named in a namespace
// ("wtxt/crc32c", "layout/manifest", "ledger/chain", "format/header").
//
// Every typed error of the project that knows a position implements
// Locator; callers that report errors (cmd/snapd's --json errors) read
// only this interface, never the concrete types:
//
//	if w, ok := where.Of(err); ok { ... w.File, w.Check ... }
//
// A Where never holds file content: its strings are names the error
// already carries (file and array names, validated or quoted when the
// error was made) and check names.
//
// The package imports nothing of the project, so every layer (formats,
// wal, gitops, pipeline, cmd) may implement and read it.
package where

import (
	"errors"
	"io/fs"
	"strings"
)

// Namespaces of Where.Check: the first path element names the vocabulary
// the check belongs to.
const (
	WTXT   = "wtxt"   // the WTXT profile's verifier checks (formats/wtxt.Check)
	Seal   = "seal"   // a WSEAL seal of an armored file (formats/wtxt/armor)
	Format = "format" // a codec's decode checks (formats.Error)
	Layout = "layout" // where a generation's files live: MANIFEST, pieces, segments
	Ledger = "ledger" // the signed Git ledger as verify-repo checks it
	Ranks  = "ranks"  // a multi-rank generation's index and parts
	WAL    = "wal"    // the request log, its segments and cursor
	Git    = "git"    // a git child process or a push to a remote
)

// Where locates a failure. Every member is optional: "" and 0 mean
// unknown, except Offset and Chunk, where -1 means unknown (0 is a real
// offset and a real chunk index). Use None for a Where with nothing known.
type Where struct {
	File   string // the file or directory concerned (a path, a path in a repository, a remote URL)
	Line   int    // 1-based line in File (text formats: WTXT, DELTA, skeletons)
	Offset int64  // byte offset in File (binary formats), -1 when unknown
	Part   string // the part of File: zip member, table or TOC entry, component, commit
	Array  string // array (tensor) name
	Chunk  int64  // chunk index, -1 when unknown
	Check  string // namespaced check: "<namespace>/<check>", e.g. "wtxt/crc32c"
}

// None is a Where with nothing known.
func None() Where { return Where{Offset: -1, Chunk: -1} }

// Check returns the namespaced check name "<ns>/<check>", or "" for an
// empty check.
func Check(ns, check string) string {
	if check == "" {
		return ""
	}
	return ns + "/" + check
}

// Namespace returns the namespace of w.Check ("wtxt" for "wtxt/crc32c"),
// "" when the check has none.
func (w Where) Namespace() string {
	ns, _, ok := strings.Cut(w.Check, "/")
	if !ok {
		return ""
	}
	return ns
}

// Name returns w.Check without its namespace ("crc32c" for
// "wtxt/crc32c"), the form stable check names take in JSON reports.
func (w Where) Name() string {
	_, name, ok := strings.Cut(w.Check, "/")
	if !ok {
		return w.Check
	}
	return name
}

// Under returns w with every member that w leaves unknown taken from
// inner: a wrapping error that knows the file locates the cause it wraps,
// which may know the line, array, chunk and check.
func (w Where) Under(inner Where) Where {
	if w.File == "" {
		w.File = inner.File
	}
	if w.Line == 0 {
		w.Line = inner.Line
	}
	if w.Offset < 0 {
		w.Offset = inner.Offset
	}
	if w.Part == "" {
		w.Part = inner.Part
	}
	if w.Array == "" {
		w.Array = inner.Array
	}
	if w.Chunk < 0 {
		w.Chunk = inner.Chunk
	}
	if w.Check == "" {
		w.Check = inner.Check
	}
	return w
}

// Locator is an error that knows where it happened. An error wrapping
// another Locator should merge the cause's Where (Of, then Under) so
// that the outermost Locator of a chain tells everything known.
type Locator interface {
	error
	Where() Where
}

// Of returns the Where of the first Locator in err's chain (errors.As
// order: the outermost first). Without one, a *fs.PathError in the chain
// gives the file; ok=false when neither is there.
func Of(err error) (w Where, ok bool) {
	var l Locator
	if errors.As(err, &l) {
		return l.Where(), true
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		w = None()
		w.File = pe.Path
		return w, true
	}
	return None(), false
}

// Cause returns the Where of the first Locator in err's chain, None when
// there is none: what a wrapping error's Where merges with Under.
func Cause(err error) Where {
	w, _ := Of(err)
	return w
}

// At returns err located in file: its message and chain are err's, and
// its Where is err's with File set to file when err's Where names none.
// It is for the caller that knows the file a parser was given bytes of
// (a parser of a byte slice knows no name); nil stays nil.
func At(file string, err error) error {
	if err == nil {
		return nil
	}
	return &located{file: file, err: err}
}

type located struct {
	file string
	err  error
}

func (e *located) Error() string { return e.err.Error() }
func (e *located) Unwrap() error { return e.err }

func (e *located) Where() Where {
	w := Cause(e.err)
	if w.File == "" {
		w.File = e.file
	}
	return w
}
