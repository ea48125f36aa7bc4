package dirfs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// RenameDir renames the finished temp directory tmp to dir without
// replacing anything there (renameat2 RENAME_NOREPLACE; a plain rename,
// which never replaces a non-empty directory, on a file system without
// it). The error is the bare errno.
func RenameDir(tmp, dir string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		err = os.Rename(tmp, dir)
	}
	return err
}
