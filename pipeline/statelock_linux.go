package pipeline

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// errLockHeld: another open file holds the state directory's lock.
var errLockHeld = errors.New("lock held")

// lockFile takes an OFD write lock (not flock) on f without waiting
// (errLockHeld when another holds it): `snapd status` can then ask
// whether it is held (F_OFD_GETLK, lockHeld) without taking a lock
// itself, so a status probe never makes a starting daemon see its
// directory "in use". Like flock it belongs to the open file, so it ends
// with the process.
func lockFile(f *os.File) error {
	var err error
	for {
		lk := unix.Flock_t{Type: unix.F_WRLCK}
		err = unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
		if err != unix.EINTR {
			break
		}
	}
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return errLockHeld
	}
	return err
}

// unlockFile drops f's OFD lock. Closing f alone does not when another
// descriptor shares its open file: a child this process is forking
// holds a copy of every descriptor until it execs, so a lock dropped by
// Close alone can outlive the daemon that held it, and a daemon started
// again in the same process would find its directory "in use".
func unlockFile(f *os.File) error {
	for {
		lk := unix.Flock_t{Type: unix.F_UNLCK}
		err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
		if err != unix.EINTR {
			return err
		}
	}
}

// lockHeld reports whether another open file holds f's OFD write lock
// (F_OFD_GETLK: asks without taking it).
func lockHeld(f *os.File) bool {
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil || lk.Type == unix.F_UNLCK {
		return false
	}
	return true
}
