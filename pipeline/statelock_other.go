//go:build !linux

package pipeline

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

// errLockHeld: another open file holds the state directory's lock.
var errLockHeld = errors.New("lock held")

// lockFile fails: the daemon, which alone locks a state directory, runs
// on Linux only (its lock is an OFD lock that status can probe).
func lockFile(f *os.File) error {
	return fmt.Errorf("the daemon runs on Linux only, not %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// unlockFile has nothing to drop (lockFile never locks here).
func unlockFile(f *os.File) error { return nil }

// lockHeld reports false: no daemon runs on this system.
func lockHeld(f *os.File) bool { return false }
