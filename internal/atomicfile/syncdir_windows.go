package atomicfile

// SyncDir does nothing on Windows: a directory handle cannot be flushed
// (FlushFileBuffers needs write access to a file), and NTFS journals the
// renames and creations in it itself.
func SyncDir(dir string) error { return nil }
