package snapshot

import (
	"os"

	"golang.org/x/sys/windows"
)

// How GenStore.lock takes the store's lock file.
const (
	lockShared    = 0
	lockExclusive = windows.LOCKFILE_EXCLUSIVE_LOCK
)

// errLockBusy is what tryLock returns while another process holds the
// lock in a conflicting mode.
const errLockBusy = windows.ERROR_LOCK_VIOLATION

// tryLock takes a LockFileEx lock (how: lockShared or lockExclusive) on
// the first byte of f without waiting (errLockBusy when another process
// holds it); closing f releases it.
func tryLock(f *os.File, how int) error {
	var ol windows.Overlapped
	return windows.LockFileEx(windows.Handle(f.Fd()), uint32(how)|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
}

// unlock does nothing: closing f releases its lock (a child process
// does not inherit the handle).
func unlock(f *os.File) {}

// processExists reports whether a process with this pid still runs: it
// can be opened and has no exit code yet. A process snapd may not open
// (access denied) is taken to exist.
func processExists(pid int) bool {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return err == windows.ERROR_ACCESS_DENIED
	}
	defer windows.CloseHandle(h)
	var code uint32
	if err := windows.GetExitCodeProcess(h, &code); err != nil {
		return true
	}
	const stillActive = 259 // STILL_ACTIVE
	return code == stillActive
}
