package dcp

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/snapd-ml/snapd/internal/dirfs"
)

// checkFileName accepts a plain file name of the directory: what torch's
// FileSystemWriter writes (__<rank>_<n>.distcp) and any other name
// without a directory part. The error says what is wrong, never quoting
// the name.
func checkFileName(name string) error {
	switch {
	case name == "":
		return errors.New("is empty")
	case len(name) > 255:
		return fmt.Errorf("is %d bytes long (at most 255)", len(name))
	case strings.HasPrefix(name, "/"):
		return errors.New("is an absolute path (only a file of the directory is read)")
	case name == "." || name == ".." || strings.HasPrefix(name, "../"):
		return errors.New("leaves the directory")
	case strings.ContainsAny(name, "/\\"):
		return errors.New("names a file in another directory (only a file of the directory itself is read)")
	case strings.HasPrefix(name, "."):
		return errors.New("is a dot-file (.metadata and temp files are not item files)")
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] == 0x7f {
			return errors.New("contains a control byte")
		}
	}
	return nil
}

// openFile opens the entry name of r for reading (dirfs.Root.Open:
// beneath the directory, without blocking, regular files only) after
// checking it with checkFileName, except for ".metadata"; refusals are
// this package's errors (see fsErr).
func openFile(r *dirfs.Root, name string) (*os.File, error) {
	if name != metadataName {
		if err := checkFileName(name); err != nil {
			return nil, errf(r.Path(), "", -1, "", ErrUnsafe, "item file name %v", err)
		}
	}
	f, err := r.Open(name)
	if err != nil {
		return nil, fsErr(err)
	}
	return f, nil
}

// fsErr turns a *dirfs.Error into this package's *formats.Error at the
// same path, offset and check: ErrLimit for a bound, ErrIncomplete for a
// file that grew or shrank while read, ErrUnsafe for any other refusal
// (a symbolic link out of the directory included). Any other error is
// returned as is.
func fsErr(err error) error {
	var e *dirfs.Error
	if !errors.As(err, &e) {
		return err
	}
	kind := ErrUnsafe
	switch {
	case errors.Is(e.Kind, dirfs.ErrLimit):
		kind = ErrLimit
	case errors.Is(e.Kind, dirfs.ErrGrew), errors.Is(e.Kind, dirfs.ErrShrank):
		kind = ErrIncomplete
	}
	return errf(e.Path, "", e.Offset, "", kind, "%s", e.Check)
}
