//go:build unix

package dcp

import (
	"errors"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// errNoBeneath: openBeneath met a symbolic link it cannot follow safely
// (the kernel lacks openat2's RESOLVE_BENEATH).
var errNoBeneath = errors.New("symbolic link refused")

// root is an open directory; every file below it is opened relative to
// its descriptor, so nothing outside the tree is ever read.
type root struct {
	path string
	fd   int
}

// openRoot opens dir without blocking and refuses anything but a
// directory.
func openRoot(dir string) (*root, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			return nil, errf(dir, "", -1, "", ErrUnsafe, "not a directory")
		}
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &root{path: dir, fd: fd}, nil
}

func (r *root) close() error { return unix.Close(r.fd) }

// names lists the directory's entries (unsorted), at most max of them.
func (r *root) names(max int) ([]string, error) {
	fd, err := unix.Openat(r.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: r.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), r.path)
	defer f.Close()
	var out []string
	for {
		batch, err := f.Readdirnames(256)
		out = append(out, batch...)
		if len(out) > max {
			return nil, errf(r.path, "", -1, "", ErrLimit, "directory has more than %d entries", max)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// open opens the entry name (checked with checkFileName, except for
// ".metadata") for reading: resolution must stay beneath the directory
// (RESOLVE_BENEATH; a symlink to a sibling is followed, one leaving the
// tree is refused; on kernels without openat2, macOS and BSD every symlink
// is refused),
// the open never blocks (O_NONBLOCK: a FIFO opens at once and is then
// refused), and the opened descriptor must be a regular file.
func (r *root) open(name string) (*os.File, error) {
	full := filepath.Join(r.path, name)
	if name != metadataName {
		if err := checkFileName(name); err != nil {
			return nil, errf(r.path, "", -1, "", ErrUnsafe, "item file name %v", err)
		}
	}
	fd, err := openBeneath(r.fd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY)
	if errors.Is(err, errNoBeneath) {
		return nil, errf(full, "", -1, "", ErrUnsafe, "is a symbolic link (refused: this kernel cannot check that it stays inside the directory)")
	}
	if err != nil {
		switch {
		case errors.Is(err, unix.EXDEV):
			return nil, errf(full, "", -1, "", ErrUnsafe, "resolves outside the directory (a symbolic link leaving the tree is refused)")
		case errors.Is(err, unix.ELOOP):
			return nil, errf(full, "", -1, "", ErrUnsafe, "symbolic link loop")
		}
		return nil, &os.PathError{Op: "open", Path: full, Err: err}
	}
	return regularOnly(os.NewFile(uintptr(fd), full), full)
}
