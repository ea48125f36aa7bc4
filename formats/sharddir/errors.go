package sharddir

import (
	"errors"
	"fmt"

	"github.com/snapd-ml/snapd/formats"
)

// Sentinel errors wrapped by this package's *formats.Error values;
// ErrCorrupt and ErrLimit also match formats.ErrCorrupt and ErrLimit.
var (
	// ErrCorrupt: the index or the shards contradict each other or the
	// index is not a valid shard index.
	ErrCorrupt = formats.Kind("inconsistent sharded checkpoint", formats.ErrCorrupt)
	// ErrLimit: a bound of Limits was exceeded.
	ErrLimit = formats.Kind("limit exceeded", formats.ErrLimit)
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

// errf is a located failure, a *formats.Error (Format "sharddir"): the file
// (index, shard or entry of the directory, as path), the byte offset in it
// when known (-1: none), the tensor when one is concerned, and the check
// that failed. It never quotes file content beyond names (tensor names are
// cut to 80 bytes).
func errf(path string, off int64, tensor string, err error, format string, args ...any) *formats.Error {
	return &formats.Error{Format: "sharddir", File: path, Offset: off, Tensor: cut(tensor), Check: fmt.Sprintf(format, args...), Err: err}
}

// quote quotes a name for an error message, cut to 80 bytes.
func quote(s string) string { return fmt.Sprintf("%q", cut(s)) }

// cut shortens a name to 80 bytes, marking the cut.
func cut(s string) string {
	const max = 80
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
