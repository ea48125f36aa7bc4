package ring

import (
	"os"

	"golang.org/x/sys/unix"
)

// kickWriteback starts writing f's dirty pages without waiting
// (sync_file_range SYNC_FILE_RANGE_WRITE).
func kickWriteback(f *os.File) {
	_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}
