//go:build !windows

package atomicfile

import (
	"fmt"
	"os"
)

// SyncDir fsyncs a directory so that renames and creations in it are
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
