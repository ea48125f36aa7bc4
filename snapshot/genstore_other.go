//go:build !linux

package snapshot

import "github.com/snapd-ml/snapd/internal/atomicfile"

// renameNoReplace renames tmp to final unless final exists (then an
// error that is fs.ErrExist); see atomicfile.RenameNoReplace.
func renameNoReplace(tmp, final string, isDir bool) error {
	return atomicfile.RenameNoReplace(tmp, final)
}
