package atomicfile

import (
	"errors"
	"os"
)

// RenameNoReplace renames oldpath (a file or a directory) to newpath
// unless newpath exists; then it fails with an *os.LinkError for which
// errors.Is(err, fs.ErrExist) holds, and oldpath is left in place.
//
// The check and the rename are one system call where the system has one
// (renameat2 RENAME_NOREPLACE on Linux, renameatx_np RENAME_EXCL on
// macOS, MoveFileEx without MOVEFILE_REPLACE_EXISTING on Windows). Where
// the file system refuses it, a file is hard-linked to newpath and then
// removed from oldpath (still exclusive), and a directory is renamed
// after an os.Lstat of newpath (a target created between the two may be
// replaced, if it is an empty directory).
func RenameNoReplace(oldpath, newpath string) error {
	err := renameNoReplace(oldpath, newpath)
	if err == nil {
		return nil
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return err
	}
	return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
}

// renameExclusiveFallback is RenameNoReplace for a file system without an
// exclusive rename: link and remove for a file, Lstat then rename for a
// directory.
func renameExclusiveFallback(oldpath, newpath string) error {
	st, err := os.Lstat(oldpath)
	if err != nil {
		return err
	}
	if st.IsDir() {
		if _, err := os.Lstat(newpath); err == nil {
			return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: os.ErrExist}
		}
		return os.Rename(oldpath, newpath)
	}
	if err := os.Link(oldpath, newpath); err != nil {
		return err
	}
	return os.Remove(oldpath)
}
