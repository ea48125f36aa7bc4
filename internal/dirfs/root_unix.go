//go:build unix

package dirfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// errNoBeneath: openBeneath met a symbolic link it cannot follow safely
// (the kernel lacks openat2's RESOLVE_BENEATH).
var errNoBeneath = errors.New("symbolic link refused")

// Root is an open directory; every file below it is opened relative to
// its descriptor, so nothing outside the tree is ever read. It is not
// safe for concurrent Close.
type Root struct {
	path string
	fd   int
}

// OpenRoot opens dir (following a symbolic link in dir itself: that is
// the path the caller named) without blocking, and refuses anything but a
// directory (ErrUnsafe, "not a directory").
func OpenRoot(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			return nil, refuse(ErrUnsafe, dir, "not a directory")
		}
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &Root{path: dir, fd: fd}, nil
}

// Close closes the directory; files opened from it stay open.
func (r *Root) Close() error { return unix.Close(r.fd) }

// Names lists the directory's entries (unsorted), at most max of them
// (ErrLimit, "directory has more than <max> entries").
func (r *Root) Names(max int) ([]string, error) {
	fd, err := unix.Openat(r.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: r.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), r.path)
	defer f.Close()
	return readNames(f, r.path, max)
}

// Lstat returns the file type of the entry name (fs.FileMode type bits;
// 0 for a regular file) without following a symbolic link.
func (r *Root) Lstat(name string) (fs.FileMode, error) {
	full := filepath.Join(r.path, name)
	if err := checkPlain(full, name); err != nil {
		return 0, err
	}
	var st unix.Stat_t
	err := unix.Fstatat(r.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return 0, &os.PathError{Op: "lstat", Path: full, Err: err}
	}
	return modeOf(uint32(st.Mode)), nil
}

// Open opens the entry name (a plain file name) for reading: resolution
// must stay beneath the directory (RESOLVE_BENEATH: a symbolic link to a
// sibling is followed, one leaving the tree is refused with ErrOutside;
// on kernels without openat2, macOS and BSD every symbolic link is
// refused), the open never blocks (O_NONBLOCK: a FIFO opens at once and
// is then refused), and the opened descriptor must be a regular file
// (fstat). The file's Name is the directory's path joined with name.
func (r *Root) Open(name string) (*os.File, error) {
	full := filepath.Join(r.path, name)
	if err := checkPlain(full, name); err != nil {
		return nil, err
	}
	fd, err := openBeneath(r.fd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY)
	if errors.Is(err, errNoBeneath) {
		return nil, refuse(ErrUnsafe, full, "is a symbolic link (refused: this kernel cannot check that it stays inside the directory)")
	}
	if err != nil {
		switch {
		case errors.Is(err, unix.EXDEV):
			return nil, refuse(ErrOutside, full, "resolves outside the directory (a symbolic link leaving the tree is refused)")
		case errors.Is(err, unix.ELOOP):
			return nil, refuse(ErrUnsafe, full, "symbolic link loop")
		}
		return nil, &os.PathError{Op: "open", Path: full, Err: err}
	}
	return regularOnly(os.NewFile(uintptr(fd), full), full)
}

// modeOf turns a stat mode's file type into an fs.FileMode type (0 for a
// regular file).
func modeOf(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return 0
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFDIR:
		return fs.ModeDir
	}
	return fs.ModeIrregular
}
