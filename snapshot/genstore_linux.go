package snapshot

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames tmp to final unless final exists (then an
// error that is fs.ErrExist): renameat2 RENAME_NOREPLACE, or, on a file
// system without it, a link (file) or an Lstat then rename (directory).
func renameNoReplace(tmp, final string, isDir bool) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// File system without RENAME_NOREPLACE.
		if isDir {
			if _, serr := os.Lstat(final); serr == nil {
				err = unix.EEXIST
			} else {
				err = os.Rename(tmp, final)
			}
		} else if err = os.Link(tmp, final); err == nil {
			os.Remove(tmp)
		}
	}
	return err
}
