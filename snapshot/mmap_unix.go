//go:build unix

package snapshot

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapRead maps the first size bytes of f read-only and shared, hinting
// sequential access.
func mapRead(f *os.File, size int) ([]byte, error) {
	data, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	_ = unix.Madvise(data, unix.MADV_SEQUENTIAL)
	return data, nil
}

// unmap unmaps what mapRead mapped.
func unmap(data []byte) error { return unix.Munmap(data) }

// dropPages tells the kernel the whole pages of b (part of a read-only
// file mapping) are not needed now (MADV_DONTNEED).
func dropPages(b []byte) { _ = unix.Madvise(b, unix.MADV_DONTNEED) }
