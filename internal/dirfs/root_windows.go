package dirfs

import (
	"io/fs"
	"os"
	"path/filepath"
)

// Root is an open directory; every file below it is opened through an
// os.Root, so nothing outside the tree is ever read. It is not safe for
// concurrent Close.
type Root struct {
	path string
	r    *os.Root
}

// OpenRoot opens dir (following a symbolic link in dir itself: that is
// the path the caller named) and refuses anything but a directory
// (ErrUnsafe, "not a directory").
func OpenRoot(dir string) (*Root, error) {
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return nil, refuse(ErrUnsafe, dir, "not a directory")
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &Root{path: dir, r: r}, nil
}

// Close closes the directory; files opened from it stay open.
func (r *Root) Close() error { return r.r.Close() }

// Names lists the directory's entries (unsorted), at most max of them
// (ErrLimit, "directory has more than <max> entries").
func (r *Root) Names(max int) ([]string, error) {
	f, err := r.r.Open(".")
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: r.path, Err: err}
	}
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
	st, err := r.r.Lstat(name)
	if err != nil {
		return 0, &os.PathError{Op: "lstat", Path: full, Err: err}
	}
	return st.Mode().Type(), nil
}

// Open opens the entry name (a plain file name) for reading. A symbolic
// link (or another reparse point) is refused (ErrUnsafe), as on a Linux
// kernel without openat2: the os.Root would keep its target inside the
// tree, but one swapped in after the check is only kept inside, not
// refused. The opened file must be a regular file.
func (r *Root) Open(name string) (*os.File, error) {
	full := filepath.Join(r.path, name)
	if err := checkPlain(full, name); err != nil {
		return nil, err
	}
	if st, err := r.r.Lstat(name); err == nil && st.Mode()&(fs.ModeSymlink|fs.ModeIrregular) != 0 {
		return nil, refuse(ErrUnsafe, full, "is a symbolic link (refused: this system cannot check that it stays inside the directory)")
	}
	f, err := r.r.Open(name)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: full, Err: err}
	}
	return regularOnly(f, full)
}
