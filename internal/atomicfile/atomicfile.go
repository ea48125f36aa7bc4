// Package atomicfile writes files so that a reader (or a restart after a
// crash) sees either the old content or the whole new content, never a
// mixture: write to a temp file in the same directory, fsync it, rename it
// over the target, fsync the directory. WriteUnsynced does the same
// without the fsyncs, for files rebuilt when lost.
//
// On Windows os.Rename replaces the target too (MoveFileEx with
// MOVEFILE_REPLACE_EXISTING), but a directory cannot be fsynced there:
// SyncDir does nothing and NTFS's own journal orders the rename.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// TempPrefix starts the names of temp files this package creates; Sweep
// removes leftovers with it.
const TempPrefix = ".snapd-tmp-"

// File is a pending atomic write. Write to it, then Commit, or Abort.
type File struct {
	*os.File
	target string
	done   bool
}

// Create starts an atomic write of path with the given mode.
func Create(path string, mode os.FileMode) (*File, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, TempPrefix+base+"-*")
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &File{File: f, target: path}, nil
}

// Commit fsyncs, closes and renames the file into place, then fsyncs the
// directory.
func (f *File) Commit() error {
	if f.done {
		return errors.New("atomicfile: already committed or aborted")
	}
	f.done = true
	if err := f.File.Sync(); err != nil {
		f.File.Close()
		os.Remove(f.Name())
		return fmt.Errorf("fsync %s: %w", f.Name(), err)
	}
	if err := f.File.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), f.target); err != nil {
		os.Remove(f.Name())
		return err
	}
	return SyncDir(filepath.Dir(f.target))
}

// Abort discards the pending write. It is safe to call after Commit (then
// it does nothing), so `defer f.Abort()` is the usual pattern.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.File.Close()
	os.Remove(f.Name())
}

// WriteFile atomically replaces path with data.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	return WriteFrom(path, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFrom atomically replaces path with what fill writes; if fill fails
// nothing is changed at path.
func WriteFrom(path string, mode os.FileMode, fill func(w io.Writer) error) error {
	f, err := Create(path, mode)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := fill(f); err != nil {
		return err
	}
	return f.Commit()
}

// Sweep removes temp files left in dir by an interrupted write and returns
// how many it removed.
func Sweep(dir string) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), TempPrefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err == nil {
				n++
			}
		}
	}
	return n, nil
}

// WriteUnsynced replaces path with data by rename from a temp file in the
// same directory (named for Sweep), with the given mode, without any
// fsync. A reader sees the old content or the new, never a mixture, while
// the system runs; after a power loss or kernel crash the file may be
// empty, old or missing. It is for files that are rebuilt when lost and
// rewritten often (status records such as a push in progress or the
// daemon's current activity), where an fsync per update would cost more
// than the record is worth. Use WriteFile for anything that must survive
// a crash.
func WriteUnsynced(path string, data []byte, mode os.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, TempPrefix+base+"-*")
	if err != nil {
		return err
	}
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
