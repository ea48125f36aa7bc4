package gittest

import (
	"errors"
	"fmt"
)

// mkfifo fails with errors.ErrUnsupported: Windows has no FIFOs in the
// file system.
func mkfifo(p string) error {
	return fmt.Errorf("mkfifo %s: no FIFOs on Windows: %w", p, errors.ErrUnsupported)
}
