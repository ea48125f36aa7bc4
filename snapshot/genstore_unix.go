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

// processExists reports whether a process with this pid exists (kill 0
// does not fail with ESRCH).
func processExists(pid int) bool {
	return unix.Kill(pid, 0) != unix.ESRCH
}
