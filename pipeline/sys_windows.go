package pipeline

import (
	"io/fs"

	"golang.org/x/sys/windows"
)

// fileID reports device and inode 0 (ok, so that size and mtime still
// tell files apart): FileInfo on Windows carries neither, and the daemon
// that fingerprints sources runs on Linux only.
func fileID(fi fs.FileInfo) (dev, ino uint64, ok bool) { return 0, 0, true }

// transientErrnos are the errors that may go away by themselves: disk
// full, quota, I/O errors, resource exhaustion, sharing violations.
func transientErrnos() []error {
	return []error{windows.ERROR_DISK_FULL, windows.ERROR_HANDLE_DISK_FULL, windows.ERROR_DISK_QUOTA_EXCEEDED, windows.ERROR_IO_DEVICE,
		windows.ERROR_TOO_MANY_OPEN_FILES, windows.ERROR_NOT_ENOUGH_MEMORY, windows.ERROR_OUTOFMEMORY, windows.ERROR_SHARING_VIOLATION,
		windows.ERROR_LOCK_VIOLATION, windows.ERROR_SEM_TIMEOUT, windows.ERROR_WRITE_PROTECT}
}
