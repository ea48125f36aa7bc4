//go:build unix

package keys

import (
	"os"
	"syscall"
)

// openNonblock opens path read-only without blocking on a FIFO or device
// (the caller checks the descriptor is a regular file before reading).
func openNonblock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
