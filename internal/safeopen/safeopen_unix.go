//go:build unix

package safeopen

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
)

// openFile opens path with O_NONBLOCK (and O_NOFOLLOW with NoFollow),
// naming a refused symlink or FIFO with ErrNotRegular; OpenFile checks
// what it opened.
func openFile(path string, flag int, perm fs.FileMode, fl Flags) (*os.File, error) {
	flag |= syscall.O_NONBLOCK
	if fl&NoFollow != 0 {
		flag |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		if fl&NoFollow != 0 && errors.Is(err, syscall.ELOOP) {
			return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: it is a symbolic link", ErrNotRegular)}
		}
		if errors.Is(err, syscall.ENXIO) {
			// A FIFO without a reader opened for writing with
			// O_NONBLOCK (or a device without its hardware): name it.
			if st, serr := os.Stat(path); serr == nil {
				if cerr := check(st.Mode(), fl); cerr != nil {
					return nil, &fs.PathError{Op: "open", Path: path, Err: cerr}
				}
			}
		}
		return nil, err
	}
	return f, nil
}

// ReadDir is os.ReadDir (entries sorted by name) for a directory that may
// have been replaced by a FIFO or another special file: it is opened with
// O_DIRECTORY|O_NONBLOCK, so anything but a directory fails at once
// (syscall.ENOTDIR) instead of blocking the open.
func ReadDir(path string) ([]fs.DirEntry, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, err
}
