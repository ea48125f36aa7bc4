//go:build unix

package pipeline

import (
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// fileID returns the device and inode of fi (from os.Stat or a DirEntry's
// Info); ok is false when the system gives none.
func fileID(fi fs.FileInfo) (dev, ino uint64, ok bool) {
	s, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return uint64(s.Dev), uint64(s.Ino), true
}

// transientErrnos are the errors that may go away by themselves: disk
// full, quota, I/O errors, resource exhaustion.
func transientErrnos() []error {
	return []error{unix.ENOSPC, unix.EDQUOT, unix.EIO, unix.EAGAIN, unix.EINTR, unix.EMFILE, unix.ENFILE, unix.ENOMEM, unix.EBUSY, unix.ETIMEDOUT, unix.EROFS}
}
