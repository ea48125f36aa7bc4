package safeopen

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
)

// openFile opens path with os.OpenFile. With NoFollow the path is
// os.Lstat-ed first and a symlink (or another reparse point that is not a
// plain file or directory) is refused with ErrNotRegular; Windows has no
// O_NOFOLLOW, so a link swapped in after that check is followed (OpenFile
// still checks what it opened).
func openFile(path string, flag int, perm fs.FileMode, fl Flags) (*os.File, error) {
	if fl&NoFollow != 0 {
		if st, err := os.Lstat(path); err == nil {
			m := st.Mode()
			if m&fs.ModeSymlink != 0 {
				return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: it is a symbolic link", ErrNotRegular)}
			}
			if m&fs.ModeIrregular != 0 {
				return nil, &fs.PathError{Op: "open", Path: path, Err: check(m, fl)}
			}
		}
	}
	return os.OpenFile(path, flag, perm)
}

// ReadDir is os.ReadDir (entries sorted by name) that fails with
// syscall.ENOTDIR, like the Unix version, when path is not a directory.
func ReadDir(path string) ([]fs.DirEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, &fs.PathError{Op: "open", Path: path, Err: syscall.ENOTDIR}
	}
	ents, err := f.ReadDir(-1)
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, err
}
