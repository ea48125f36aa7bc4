//go:build unix && !linux

package dirfs

import (
	"errors"

	"golang.org/x/sys/unix"
)

// openBeneath opens name (a plain file name) relative to the directory
// dirfd with flags, not following a symlink (errNoBeneath): there is no
// RESOLVE_BENEATH here to follow one safely.
func openBeneath(dirfd int, name string, flags int) (int, error) {
	fd, err := unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ELOOP) {
		return -1, errNoBeneath
	}
	return fd, err
}
