package snapshot

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"unsafe"
)

// ErrSourceFault: reading a memory-mapped source faulted — the file was
// truncated (or its storage failed) while it was mapped. Without the
// guard the kernel's SIGBUS kills the process.
var ErrSourceFault = errors.New("snapshot: mapped source changed while being read")

// Guarded is a view of a Mapping for files that may change while mapped
// (checkpoints named by a request or on a command line): it exposes no
// raw memory (BytesOf reports false, Section returns a reader), and every
// ReadAt copies under debug.SetPanicOnFault in the calling goroutine, so a
// page that vanished is an error wrapping ErrSourceFault in whichever
// goroutine reads — decoders, encoder workers — instead of a fatal SIGBUS.
// ReadAt also drops the whole pages it read from the resident set
// (like Release), so streaming a huge source keeps RSS bounded.
//
// The cost is one copy per read, which readers of non-memory sources make
// anyway. The Guarded is valid until the Mapping is closed.
type Guarded struct{ m *Mapping }

// Guarded returns the fault-safe view of m.
func (m *Mapping) Guarded() *Guarded { return &Guarded{m: m} }

// Size implements Source.
func (g *Guarded) Size() int64 { return int64(len(g.m.data)) }

// Name returns the path the mapping was made from.
func (g *Guarded) Name() string { return g.m.name }

// ReadAt implements io.ReaderAt; a fault is reported as an error wrapping
// ErrSourceFault that names the file and the offset that faulted.
func (g *Guarded) ReadAt(p []byte, off int64) (int, error) {
	data := g.m.data
	if off < 0 {
		return 0, errors.New("snapshot: negative offset")
	}
	if off >= int64(len(data)) {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n, fault, ok := guardedCopy(p, data[off:])
	if !ok {
		at := int64(fault - uintptr(unsafe.Pointer(unsafe.SliceData(data))))
		return 0, fmt.Errorf("%w: %s: read of %d bytes at offset %d faulted at offset %d (mapped size %d): the file was truncated or its storage failed while mapped",
			ErrSourceFault, g.m.name, len(p), off, at, len(data))
	}
	releasePages(data, off, int64(n))
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Release implements Releaser.
func (g *Guarded) Release(off, n int64) { releasePages(g.m.data, off, n) }

// guardedCopy copies src into dst, turning a memory fault into ok=false
// with the faulting address. SetPanicOnFault is per goroutine: it is set
// for the copy only and restored after.
func guardedCopy(dst, src []byte) (n int, addr uintptr, ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			e, isFault := r.(interface{ Addr() uintptr })
			if !isFault {
				panic(r)
			}
			n, addr, ok = 0, e.Addr(), false
		}
	}()
	return copy(dst, src), 0, true
}

// Guard runs fn with SetPanicOnFault set on the calling goroutine and
// turns a memory fault inside fn (an access to a mapped file that shrank)
// into an error wrapping ErrSourceFault. Use it around code that reads
// mapped memory directly (Mapping.Bytes) in a goroutine that must survive
// a hostile file.
func Guard(what string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			e, isFault := r.(interface{ Addr() uintptr })
			if !isFault {
				panic(r)
			}
			err = fmt.Errorf("%w: %s: memory fault at address %#x: the file was truncated or its storage failed while mapped", ErrSourceFault, what, e.Addr())
		}
	}()
	return fn()
}
