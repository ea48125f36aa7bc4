//go:build unix && !linux

package snapshot

import (
	"os"

	"golang.org/x/sys/unix"
)

// readFile duplicates f's descriptor (close-on-exec) for Guarded's reads
// of the same open file; nil when that fails (Guarded then copies from
// the mapping under SetPanicOnFault). There is no fadvise here: the
// system's read-ahead is left as it is.
func readFile(f *os.File) *os.File {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), f.Name())
}
