package snapshot

import (
	"os"

	"golang.org/x/sys/unix"
)

// readFile duplicates f's descriptor (close-on-exec) for Guarded's reads
// of the same open file, hinting sequential access; nil when that fails
// (Guarded then copies from the mapping under SetPanicOnFault).
func readFile(f *os.File) *os.File {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	_ = unix.Fadvise(fd, 0, 0, unix.FADV_SEQUENTIAL)
	return os.NewFile(uintptr(fd), f.Name())
}
