//go:build unix

package snapshot

import (
	"os"

	"golang.org/x/sys/unix"
)

// How GenStore.lock takes the store's lock file.
const (
	lockShared    = unix.LOCK_SH
	lockExclusive = unix.LOCK_EX
)

// errLockBusy is what tryLock returns while another process holds the
// lock in a conflicting mode.
const errLockBusy = unix.EWOULDBLOCK

// tryLock takes flock how on f without waiting (errLockBusy when another
// process holds it); closing f releases it.
func tryLock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err != unix.EINTR {
			return err
		}
	}
}

// unlock drops f's flock before f is closed: closing alone does not
// while another descriptor shares f's open file (a child this process is
// forking holds a copy until it execs).
func unlock(f *os.File) {
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
}

// processExists reports whether a process with this pid exists (kill 0
// does not fail with ESRCH).
func processExists(pid int) bool {
	return unix.Kill(pid, 0) != unix.ESRCH
}
