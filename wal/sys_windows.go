package wal

import (
	"os"
	"syscall"

	"golang.org/x/sys/windows"
)

// The flock(2) operations, emulated with LockFileEx (see flock).
const (
	lockSH = 1 << iota
	lockEX
	lockUN
	lockNB
)

// errWouldBlock: a lockNB flock found the lock held.
const errWouldBlock = windows.ERROR_LOCK_VIOLATION

// errEINTR is never returned on Windows (no signals interrupt I/O).
const errEINTR = syscall.EINTR

// lockOffset is where flock's one-byte lock lies: far past any end of
// file, because Windows locks are mandatory and would otherwise block
// other handles' reads of the locked bytes.
const lockOffset = 1 << 62

// statT is what fstat fills in: the fields of a Unix stat the WAL reads.
type statT struct {
	Mode  uint32 // 0o444 for a read-only file, else 0o666
	Nlink uint32
	Size  int64
	Uid   int // always -1, like os.Geteuid on Windows
}

// fstat fills st from GetFileInformationByHandle.
func fstat(fd int, st *statT) error {
	var fi windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(windows.Handle(fd), &fi); err != nil {
		return os.NewSyscallError("GetFileInformationByHandle", err)
	}
	st.Mode = 0o666
	if fi.FileAttributes&windows.FILE_ATTRIBUTE_READONLY != 0 {
		st.Mode = 0o444
	}
	st.Nlink = fi.NumberOfLinks
	st.Size = int64(fi.FileSizeHigh)<<32 | int64(fi.FileSizeLow)
	st.Uid = -1
	return nil
}

// sysPread reads at off without moving the file pointer; 0 bytes at end
// of file, like pread(2).
func sysPread(fd int, b []byte, off int64) (int, error) {
	var n uint32
	ol := windows.Overlapped{Offset: uint32(off), OffsetHigh: uint32(off >> 32)}
	err := windows.ReadFile(windows.Handle(fd), b, &n, &ol)
	if err == windows.ERROR_HANDLE_EOF {
		return int(n), nil
	}
	return int(n), err
}

// sysWrite writes b at the file pointer (the end, for a file opened with
// os.O_APPEND).
func sysWrite(fd int, b []byte) (int, error) {
	var n uint32
	err := windows.WriteFile(windows.Handle(fd), b, &n, nil)
	return int(n), err
}

// flock emulates flock(2) with a LockFileEx lock of one byte at
// lockOffset: lockSH shared, lockEX exclusive, lockNB without waiting
// (errWouldBlock), lockUN to release.
func flock(fd int, how int) error {
	h := windows.Handle(fd)
	ol := windows.Overlapped{Offset: uint32(lockOffset & 0xffffffff), OffsetHigh: uint32(lockOffset >> 32)}
	if how&lockUN != 0 {
		return windows.UnlockFileEx(h, 0, 1, 0, &ol)
	}
	var flags uint32
	if how&lockEX != 0 {
		flags |= windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	if how&lockNB != 0 {
		flags |= windows.LOCKFILE_FAIL_IMMEDIATELY
	}
	return windows.LockFileEx(h, flags, 0, 1, 0, &ol)
}
