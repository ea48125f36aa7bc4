//go:build !linux

package dirfs

import (
	"errors"
	"os"

	"github.com/snapd-ml/snapd/internal/atomicfile"
)

// RenameDir renames the finished temp directory tmp to dir without
// replacing anything there (atomicfile.RenameNoReplace). The error is
// the bare system error.
func RenameDir(tmp, dir string) error {
	err := atomicfile.RenameNoReplace(tmp, dir)
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
