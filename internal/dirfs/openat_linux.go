package dirfs

import (
	"errors"

	"golang.org/x/sys/unix"
)

// openBeneath opens name relative to the directory dirfd with flags,
// resolving beneath it (openat2 RESOLVE_BENEATH: a symlink leaving the
// tree fails with EXDEV); on a kernel without openat2 a symlink is not
// followed at all (errNoBeneath).
func openBeneath(dirfd int, name string, flags int) (int, error) {
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ELOOP) {
			return -1, errNoBeneath
		}
	}
	return fd, err
}
