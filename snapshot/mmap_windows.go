package snapshot

import (
	"os"
	"unsafe"

	"golang.org/x/sys/windows"
)

// mapRead maps the first size bytes of f read-only (a PAGE_READONLY file
// mapping and a FILE_MAP_READ view; the view outlives the mapping handle
// and f).
func mapRead(f *os.File, size int) ([]byte, error) {
	h, err := windows.CreateFileMapping(windows.Handle(f.Fd()), nil, windows.PAGE_READONLY, uint32(uint64(size)>>32), uint32(size), nil)
	if err != nil {
		return nil, os.NewSyscallError("CreateFileMapping", err)
	}
	defer windows.CloseHandle(h)
	addr, err := windows.MapViewOfFile(h, windows.FILE_MAP_READ, 0, 0, uintptr(size))
	if err != nil {
		return nil, os.NewSyscallError("MapViewOfFile", err)
	}
	// addr is the address of memory Go does not manage (the view).
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), size), nil
}

// unmap unmaps the view mapRead returned.
func unmap(data []byte) error {
	return windows.UnmapViewOfFile(uintptr(unsafe.Pointer(unsafe.SliceData(data))))
}

// dropPages does nothing on Windows: the pages of a read-only file view
// are reclaimed by the system when memory is short.
func dropPages(b []byte) {}

// readFile duplicates f's handle for Guarded's reads of the same open
// file; nil when that fails (Guarded then copies from the mapping under
// SetPanicOnFault).
func readFile(f *os.File) *os.File {
	self := windows.CurrentProcess()
	var dup windows.Handle
	if err := windows.DuplicateHandle(self, windows.Handle(f.Fd()), self, &dup, 0, false, windows.DUPLICATE_SAME_ACCESS); err != nil {
		return nil
	}
	return os.NewFile(uintptr(dup), f.Name())
}
