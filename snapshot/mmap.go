package snapshot

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/snapd-ml/snapd/internal/safeopen"
)

// Mapping is a read-only memory map of a whole file. It is a Source whose
// bytes can be sliced without copying (see BytesOf and Section), so a
// checkpoint larger than the heap can be decoded in place. The bytes are valid
// until Close.
type Mapping struct {
	data []byte
	name string
	rf   *os.File // the mapped file, for Guarded's reads; nil: none
}

// MapFile maps the file at path read-only. An empty file maps to an empty
// Mapping. The path may be a symlink, but what it opens must be a regular
// file: the open never blocks (a FIFO swapped in for a checkpoint is
// refused at once, safeopen.ErrNotRegular) and the type and size are taken
// from the opened descriptor.
func MapFile(path string) (*Mapping, error) {
	f, err := safeopen.Open(path, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size == 0 {
		return &Mapping{name: path}, nil
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("mmap %s: file too large (%d bytes)", path, size)
	}
	data, err := mapRead(f, int(size))
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return &Mapping{data: data, name: path, rf: readFile(f)}, nil
}

// Bytes returns the mapped bytes; they must not be written and are invalid
// after Close.
func (m *Mapping) Bytes() []byte { return m.data }

// Name returns the path the mapping was made from.
func (m *Mapping) Name() string { return m.name }

// ReadAt implements io.ReaderAt.
func (m *Mapping) ReadAt(p []byte, off int64) (int, error) { return Bytes(m.data).ReadAt(p, off) }

// Size implements Source.
func (m *Mapping) Size() int64 { return int64(len(m.data)) }

// Close unmaps the file.
func (m *Mapping) Close() error {
	if m.rf != nil {
		m.rf.Close()
		m.rf = nil
	}
	if m.data == nil {
		return nil
	}
	err := unmap(m.data)
	m.data = nil
	return err
}

// Release implements Releaser for the whole mapping.
func (m *Mapping) Release(off, n int64) { releasePages(m.data, off, n) }

// releasePages madvises MADV_DONTNEED on the whole pages inside b[off:off+n]
// (b must be part of a read-only file mapping: for anonymous memory this
// would discard data).
func releasePages(b []byte, off, n int64) {
	if off < 0 || n <= 0 || off >= int64(len(b)) {
		return
	}
	end := min(off+n, int64(len(b)))
	base := int64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	page := int64(os.Getpagesize())
	lo := (base+off+page-1)/page*page - base
	hi := (base+end)/page*page - base
	if hi <= lo {
		return
	}
	dropPages(b[lo:hi])
}
