// Package dirfs reads a directory tree that snapd does not control (a
// sharded checkpoint directory, a DCP checkpoint) so that nothing outside
// it is ever read and a hostile or changing tree cannot block or fool the
// process, and renames a finished directory into place without replacing
// anything.
//
// A Root is an open directory. Every entry is opened relative to it:
//
//   - by a plain file name only (no separator, no "." or "..");
//   - resolution stays beneath the directory: on Linux openat2 with
//     RESOLVE_BENEATH follows a symbolic link to a sibling and refuses one
//     leaving the tree (ErrOutside); where the kernel lacks openat2, on
//     macOS and the BSDs (O_NOFOLLOW) and on Windows (os.Root, an Lstat
//     before the open) every symbolic link is refused (ErrUnsafe);
//   - the open never blocks (O_NONBLOCK: a FIFO opens at once and is then
//     refused);
//   - the opened descriptor, not the path, must be a regular file
//     (ErrUnsafe; ErrDir for a directory a symbolic link led to).
//
// Refusals are *Error values carrying the path and the check that failed;
// the formats that use this package turn them into their own located
// errors. Other failures (a missing file, a permission error) are
// *os.PathError values, so errors.Is(err, fs.ErrNotExist) holds for a
// missing entry.
package dirfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Kinds of refusal, the Kind of an *Error (which also matches them with
// errors.Is).
var (
	// ErrUnsafe: the path is not a directory (OpenRoot), not a plain file
	// name, not a regular file (a FIFO, a device, a socket, a directory),
	// or a symbolic link this system cannot follow safely, or a loop.
	ErrUnsafe = errors.New("unsafe path")
	// ErrOutside wraps ErrUnsafe: the entry resolves outside the
	// directory (a symbolic link leaving the tree).
	ErrOutside = fmt.Errorf("%w: outside the directory", ErrUnsafe)
	// ErrDir wraps ErrUnsafe: the opened entry is a directory (a symbolic
	// link to a directory inside the tree).
	ErrDir = fmt.Errorf("%w: a directory", ErrUnsafe)
	// ErrLimit: a directory with more entries, or a file with more bytes,
	// than the caller's bound.
	ErrLimit = errors.New("limit exceeded")
	// ErrGrew: a file grew while ReadSmall read it.
	ErrGrew = errors.New("file grew while read")
	// ErrShrank: a file ended before the size fstat reported; Err is the
	// io error of the short read.
	ErrShrank = errors.New("file shrank while read")
)

// Error is a refusal: Path is the directory or entry concerned, Offset
// the byte offset in it when known (-1: none), Check what failed in words
// that never quote file content, Kind one of this package's sentinels and
// Err the system or io error behind it, if any.
type Error struct {
	Kind   error
	Path   string
	Offset int64
	Check  string
	Err    error
}

func (e *Error) Error() string { return e.Path + ": " + e.Check }

// Unwrap returns Kind and, when set, Err.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

func refuse(kind error, path string, format string, args ...any) *Error {
	return &Error{Kind: kind, Path: path, Offset: -1, Check: fmt.Sprintf(format, args...)}
}

// plainName reports whether name is a file name of the directory itself:
// not empty, not "." or "..", and without "/" or the system's separator
// (a backslash is an ordinary byte of a name on Unix).
func plainName(name string) bool {
	return name != "" && name != "." && name != ".." &&
		!strings.ContainsRune(name, '/') && !strings.ContainsRune(name, filepath.Separator)
}

// checkPlain refuses a name that is not plainName; callers check names
// with their own rules first, so this is the last guard.
func checkPlain(full, name string) error {
	if !plainName(name) {
		return refuse(ErrUnsafe, full, "is not a plain file name of the directory")
	}
	return nil
}

// regularOnly returns f, the just opened entry at full, if it is a
// regular file; otherwise it closes f and refuses it (ErrDir for a
// directory, which only a symbolic link can lead to).
func regularOnly(f *os.File, full string) (*os.File, error) {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		kind := ErrUnsafe
		if st.IsDir() {
			kind = ErrDir
		}
		return nil, refuse(kind, full, "not a regular file (%s); only regular files are read", DescribeMode(st.Mode()))
	}
	return f, nil
}

// DescribeMode names the file type of m for an error message ("a FIFO",
// "a device", "a socket", "a directory", else "mode <type>").
func DescribeMode(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return fmt.Sprintf("mode %s", m.Type())
}

// ReadSmall reads the whole regular file f, which must hold at most limit
// bytes by fstat (else ErrLimit, "<size> bytes, limit <limit>"). A file
// that ends early fails with ErrShrank (Err the io error), one that grew
// after fstat with ErrGrew at the offset of its fstat size: it is read
// only up to that size plus one byte, which tells it grew. Other read
// errors are "read <name>: <err>".
func ReadSmall(f *os.File, limit int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, refuse(ErrLimit, f.Name(), "%d bytes, limit %d", st.Size(), limit)
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			e := refuse(ErrShrank, f.Name(), "file shrank while read")
			e.Err = err
			return nil, e
		}
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	var one [1]byte
	if n, _ := f.Read(one[:]); n > 0 {
		e := refuse(ErrGrew, f.Name(), "file grew while read")
		e.Offset = st.Size()
		return nil, e
	}
	return b, nil
}

// readNames lists the entries of the open directory f (at path), at most
// max of them.
func readNames(f *os.File, path string, max int) ([]string, error) {
	var out []string
	for {
		batch, err := f.Readdirnames(256)
		out = append(out, batch...)
		if len(out) > max {
			return nil, refuse(ErrLimit, path, "directory has more than %d entries", max)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// Path is the directory's path as given to OpenRoot.
func (r *Root) Path() string { return r.path }
