package snapshot

import (
	"fmt"
	"os"
)

// MapOpenFile maps the already opened file f read-only, like MapFile does
// for a path. It is for callers that open untrusted paths themselves
// (O_NOFOLLOW, O_NONBLOCK, beneath a directory): f must be a regular file,
// anything else (FIFO, device, directory) is refused without reading. The
// caller keeps ownership of f and may close it right after the call; the
// mapping stays valid until its Close.
func MapOpenFile(f *os.File) (*Mapping, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("mmap %s: not a regular file (%s)", f.Name(), st.Mode().Type())
	}
	size := st.Size()
	if size == 0 {
		return &Mapping{name: f.Name()}, nil
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("mmap %s: file too large (%d bytes)", f.Name(), size)
	}
	data, err := mapRead(f, int(size))
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", f.Name(), err)
	}
	return &Mapping{data: data, name: f.Name(), rf: readFile(f)}, nil
}
