package dcp

import (
	"errors"
	"fmt"

	"github.com/snapd-ml/snapd/formats"
)

// Sentinel errors wrapped by this package's *formats.Error values. Each
// also matches the formats sentinel named in its comment.
var (
	// ErrCorrupt (formats.ErrCorrupt): .metadata or the items contradict
	// themselves or each other: chunks that overlap, leave holes or
	// exceed their tensor, a chunk without a storage entry, an item that
	// does not decode to the tensor its metadata describes.
	ErrCorrupt = formats.Kind("malformed DCP checkpoint", formats.ErrCorrupt)
	// ErrIncomplete (formats.ErrTruncated): the directory is not (yet) a
	// whole checkpoint: no .metadata, an item file that does not exist,
	// or one shorter than the items .metadata places in it. torch writes
	// .metadata last (a rename), so a directory still being written, or
	// one whose rank files are not yet visible on a shared file system,
	// fails with it; the daemon retries such a source.
	ErrIncomplete = formats.Kind("incomplete DCP checkpoint", formats.ErrTruncated)
	// ErrLimit (formats.ErrLimit): a bound of Limits or the decode budget.
	ErrLimit = formats.Kind("limit exceeded", formats.ErrLimit)
	// ErrUnsupported (formats.ErrUnsupported): valid DCP this package does
	// not read (sparse layouts, storage transforms such as compression,
	// dtypes without a snapshot counterpart).
	ErrUnsupported = formats.Kind("unsupported DCP feature", formats.ErrUnsupported)
	// ErrUnsafe: an item's file name leaves the directory (a path, "..",
	// an absolute name) or names something that is not a regular file
	// (a FIFO, a device, a symbolic link out of the directory). It
	// matches formats.ErrCorrupt: such a .metadata is not a checkpoint
	// snapd reads.
	ErrUnsafe = formats.Kind("unsafe path", formats.ErrCorrupt)
	// ErrInvalidSnapshot: Write was given a snapshot it cannot write as
	// a DCP directory.
	ErrInvalidSnapshot = errors.New("cannot write snapshot as a DCP checkpoint")
)

// Part strings of errors.
const (
	whereMetadata = "member .metadata"
)

// errf is a located failure, a *formats.Error (Format "dcp"): the file
// (the directory's .metadata or an item file, as a path), where in it
// (a chunk index, a storage entry), the byte offset when known (-1:
// none), the tensor (FQN) when one is concerned, and the check that
// failed. It never quotes file content beyond names (cut to 80 bytes by
// formats.Error's %q of Tensor).
func errf(file, where string, off int64, fqn string, err error, format string, args ...any) *formats.Error {
	return &formats.Error{Format: "dcp", File: file, Part: where, Offset: off, Tensor: cut(fqn), Check: fmt.Sprintf(format, args...), Err: err}
}

// cut shortens a name to 80 bytes, marking the cut.
func cut(s string) string {
	const max = 80
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

// quote quotes a name for an error message, cut to 80 bytes.
func quote(s string) string { return fmt.Sprintf("%q", cut(s)) }
