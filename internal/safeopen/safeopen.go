// Package safeopen opens paths that snapd does not control (checkpoint
// sources named in requests, WAL segments, cursor and outcome files, state
// files) so that a hostile or changing file system cannot block or fool
// the process:
//
//   - the open never blocks: O_NONBLOCK, so a FIFO (or a device that waits
//     for a carrier) opens at once instead of waiting for a writer;
//   - the opened descriptor is checked with fstat, not the path before the
//     open, so a symlink flipped between a stat and the open is judged by
//     what was really opened; anything but a regular file (or a directory,
//     where the caller accepts one) is refused with ErrNotRegular;
//   - with NoFollow, a symlink as the last path component is refused
//     (O_NOFOLLOW): files snapd writes itself are never links, so a link
//     there (e.g. a WAL segment pointing at /dev/zero) is an attack or a
//     mistake.
//
// O_NONBLOCK does not change reads or writes of regular files or
// directories, so the returned *os.File behaves like one from os.Open.
//
// On Windows the guarantees are weaker: there is no O_NOFOLLOW, so
// NoFollow is an os.Lstat of the path before the open (a symlink, or
// another reparse point, is refused), and a link swapped in between
// that check and the open is followed; the opened handle is still
// checked to be a regular file (or an accepted directory), and named
// pipes live outside the file system (\\.\pipe\), so an open cannot
// block on one.
package safeopen

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular: the path is not a regular file (nor an accepted
// directory): a FIFO, device, socket, or (with NoFollow) a symlink.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge: ReadFile found a file larger than its limit.
var ErrTooLarge = errors.New("file too large")

// Flags choose what Open accepts.
type Flags uint8

const (
	// NoFollow refuses a symlink as the last path component.
	NoFollow Flags = 1 << iota
	// AllowDir accepts a directory as well as a regular file.
	AllowDir
)

// Open opens path read-only with the guarantees of the package comment.
func Open(path string, fl Flags) (*os.File, error) {
	return OpenFile(path, os.O_RDONLY, 0, fl)
}

// OpenFile is os.OpenFile with the guarantees of the package comment:
// flag (os.O_RDWR, os.O_CREATE, os.O_APPEND, ...) is or-ed with O_NONBLOCK
// (and O_NOFOLLOW with NoFollow); the result is a regular file, or a
// directory with AllowDir, else the file is closed and the error wraps
// ErrNotRegular and names the path and what it is. Errors never contain
// file content.
func OpenFile(path string, flag int, perm fs.FileMode, fl Flags) (*os.File, error) {
	f, err := openFile(path, flag, perm, fl)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := check(st.Mode(), fl); err != nil {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return f, nil
}

func check(m fs.FileMode, fl Flags) error {
	switch {
	case m.IsRegular():
		return nil
	case m.IsDir() && fl&AllowDir != 0:
		return nil
	}
	return fmt.Errorf("%w: it is a %s", ErrNotRegular, Kind(m))
}

// Kind names a file type for error messages.
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "special file (" + m.Type().String() + ")"
}

// ReadFile reads a whole regular file opened with Open(path, fl), refusing
// (ErrTooLarge, before reading) a file larger than limit bytes. It is for
// small state files; the size check is made on the opened descriptor and
// the read stops at limit+1 bytes even if the file grows meanwhile.
func ReadFile(path string, limit int64, fl Flags) ([]byte, error) {
	f, err := Open(path, fl)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %d bytes, at most %d expected", ErrTooLarge, st.Size(), limit)}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: grew past %d bytes while read", ErrTooLarge, limit)}
	}
	return b, nil
}
