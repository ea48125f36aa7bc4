package sharddir

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors wrapped by *Error.
var (
	// ErrCorrupt: the index or the shards contradict each other or the
	// index is not a valid shard index.
	ErrCorrupt = errors.New("inconsistent sharded checkpoint")
	// ErrLimit: a bound of Limits was exceeded.
	ErrLimit = errors.New("limit exceeded")
	// ErrUnsafe: a path leaves the directory, or names something that is
	// not a regular file (FIFO, device, socket, directory).
	ErrUnsafe = errors.New("unsafe path")
	// ErrOutside wraps ErrUnsafe for a file whose path resolves outside
	// the directory (a symlink leaving the tree).
	ErrOutside = fmt.Errorf("%w: outside the directory", ErrUnsafe)
	// ErrInvalidSnapshot: Write was given a snapshot (or recorded layout
	// attributes) it cannot turn into a directory.
	ErrInvalidSnapshot = errors.New("cannot write snapshot as a directory")
)

// Error is a located failure: the file (index, shard or entry of the
// directory), the byte offset in it when known, the tensor when one is
// concerned, and the check that failed. It never quotes file content
// beyond names (tensor and file names, cut to 80 bytes).
type Error struct {
	Path   string // file the check concerns (directory-relative or full)
	Offset int64  // byte offset in Path, -1 when none
	Tensor string // tensor/array name, may be empty
	Check  string // what failed
	Err    error  // a sentinel above, or an underlying error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("sharddir: ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	if e.Offset >= 0 {
		fmt.Fprintf(&b, "offset %d: ", e.Offset)
	}
	if e.Tensor != "" {
		fmt.Fprintf(&b, "tensor %s: ", quote(e.Tensor))
	}
	b.WriteString(e.Check)
	if e.Err != nil {
		b.WriteString(" (")
		b.WriteString(e.Err.Error())
		b.WriteString(")")
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// quote quotes a name for an error message, cut to 80 bytes.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		return fmt.Sprintf("%q...", s[:max])
	}
	return fmt.Sprintf("%q", s)
}

func errf(path string, off int64, tensor string, err error, format string, args ...any) *Error {
	return &Error{Path: path, Offset: off, Tensor: tensor, Check: fmt.Sprintf(format, args...), Err: err}
}
