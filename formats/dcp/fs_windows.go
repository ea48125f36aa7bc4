package dcp

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// root is an open directory; every file below it is opened through an
// os.Root, so nothing outside the tree is ever read.
type root struct {
	path string
	r    *os.Root
}

// openRoot opens dir (following a symlink in dir itself: that is the path
// the caller named) and refuses anything but a directory.
func openRoot(dir string) (*root, error) {
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return nil, errf(dir, "", -1, "", ErrUnsafe, "not a directory")
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &root{path: dir, r: r}, nil
}

func (r *root) close() error { return r.r.Close() }

// names lists the directory's entries (unsorted), at most max of them.
func (r *root) names(max int) ([]string, error) {
	f, err := r.r.Open(".")
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: r.path, Err: err}
	}
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
// ".metadata") for reading. A symbolic link (or another reparse point) is
// refused, as on a Linux kernel without openat2: the os.Root would keep
// its target inside the tree, but one swapped in after the check is only
// kept inside, not refused. The opened file must be a regular file.
func (r *root) open(name string) (*os.File, error) {
	full := filepath.Join(r.path, name)
	if name != metadataName {
		if err := checkFileName(name); err != nil {
			return nil, errf(r.path, "", -1, "", ErrUnsafe, "item file name %v", err)
		}
	}
	if st, err := r.r.Lstat(name); err == nil && st.Mode()&(fs.ModeSymlink|fs.ModeIrregular) != 0 {
		return nil, errf(full, "", -1, "", ErrUnsafe, "is a symbolic link (refused: this system cannot check that it stays inside the directory)")
	}
	f, err := r.r.Open(name)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: full, Err: err}
	}
	return regularOnly(f, full)
}
