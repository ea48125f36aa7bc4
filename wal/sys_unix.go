//go:build unix

package wal

import "golang.org/x/sys/unix"

// The flock(2) operations.
const (
	lockSH = unix.LOCK_SH
	lockEX = unix.LOCK_EX
	lockUN = unix.LOCK_UN
	lockNB = unix.LOCK_NB
)

// errWouldBlock: a lockNB flock found the lock held.
const errWouldBlock = unix.EWOULDBLOCK

// errEINTR: a system call was interrupted by a signal.
const errEINTR = unix.EINTR

// statT is what fstat fills in.
type statT = unix.Stat_t

// fstat is fstat(2).
func fstat(fd int, st *statT) error { return unix.Fstat(fd, st) }

// sysPread is pread(2).
func sysPread(fd int, b []byte, off int64) (int, error) { return unix.Pread(fd, b, off) }

// sysWrite is write(2).
func sysWrite(fd int, b []byte) (int, error) { return unix.Write(fd, b) }

// flock applies a flock(2) operation, retrying on EINTR.
func flock(fd int, how int) error {
	for {
		err := unix.Flock(fd, how)
		if err != unix.EINTR {
			return err
		}
	}
}
