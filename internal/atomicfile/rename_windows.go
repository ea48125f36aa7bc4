package atomicfile

import "golang.org/x/sys/windows"

// renameNoReplace is MoveFileEx without MOVEFILE_REPLACE_EXISTING, which
// fails with ERROR_ALREADY_EXISTS (fs.ErrExist) when newpath exists.
func renameNoReplace(oldpath, newpath string) error {
	from, err := windows.UTF16PtrFromString(oldpath)
	if err != nil {
		return err
	}
	to, err := windows.UTF16PtrFromString(newpath)
	if err != nil {
		return err
	}
	return windows.MoveFileEx(from, to, 0)
}
