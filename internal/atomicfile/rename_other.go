//go:build !linux && !darwin && !windows

package atomicfile

func renameNoReplace(oldpath, newpath string) error {
	return renameExclusiveFallback(oldpath, newpath)
}
