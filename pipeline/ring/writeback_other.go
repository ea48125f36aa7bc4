//go:build !linux

package ring

import "os"

// kickWriteback does nothing: only Linux has an asynchronous
// sync_file_range; the fsync at commit writes the whole file.
func kickWriteback(f *os.File) {}
