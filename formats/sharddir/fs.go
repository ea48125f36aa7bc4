package sharddir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/snapd-ml/snapd/internal/dirfs"
)

// errSymlinkDir: an entry is a symlink to a directory inside the tree
// (skipped like a subdirectory).
var errSymlinkDir = fmt.Errorf("%w: symbolic link to a directory", ErrUnsafe)

// openFile opens the entry name of r for reading (dirfs.Root.Open: beneath
// the directory, without blocking, regular files only) after checking it
// with checkFileName; refusals are this package's errors (see fsErr).
func openFile(r *dirfs.Root, name string) (*os.File, error) {
	if err := checkFileName(name); err != nil {
		return nil, errf(filepath.Join(r.Path(), name), -1, "", ErrUnsafe, "%v", err)
	}
	f, err := r.Open(name)
	if err != nil {
		return nil, fsErr(err)
	}
	return f, nil
}

// fsErr turns a *dirfs.Error into this package's *formats.Error at the
// same path, offset and check: ErrOutside for a path resolving outside
// the directory, errSymlinkDir for a link to a directory, ErrLimit for a
// bound, ErrCorrupt for a file that grew while read, ErrUnsafe for any
// other refusal; a file that shrank while read is "read <path>: <io
// error>". Any other error is returned as is.
func fsErr(err error) error {
	var e *dirfs.Error
	if !errors.As(err, &e) {
		return err
	}
	kind := ErrUnsafe
	switch {
	case errors.Is(e.Kind, dirfs.ErrOutside):
		kind = ErrOutside
	case errors.Is(e.Kind, dirfs.ErrDir):
		kind = errSymlinkDir
	case errors.Is(e.Kind, dirfs.ErrLimit):
		kind = ErrLimit
	case errors.Is(e.Kind, dirfs.ErrGrew):
		kind = ErrCorrupt
	case errors.Is(e.Kind, dirfs.ErrShrank):
		return fmt.Errorf("read %s: %w", e.Path, e.Err)
	}
	return errf(e.Path, e.Offset, "", kind, "%s", e.Check)
}
