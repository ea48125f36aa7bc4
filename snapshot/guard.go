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
// raw memory (BytesOf reports false, Section returns a reader), and a
// read of bytes that vanished is an error wrapping ErrSourceFault, in
// whichever goroutine reads — decoders, encoder workers — instead of a
// fatal SIGBUS.
//
// ReadAt serves reads of 32 KiB or more with pread(2) on a descriptor of
// the same open file (kept by the Mapping): the kernel copies from the
// page cache, a truncated file gives a short read, and the mapping itself
// is not touched, so none of its pages is faulted in, counted in RSS or
// has to be dropped again (Release is then a no-op). Smaller reads, and
// all reads when no descriptor could be kept, copy from the mapping under
// debug.SetPanicOnFault and drop the whole pages they read (like
// Release).
//
// The cost is one copy per read, which readers of non-memory sources make
// anyway. The Guarded is valid until the Mapping is closed. Reads see the
// file as it is now, up to the size it had when it was mapped (Size).
type Guarded struct{ m *Mapping }

// preadMin is the smallest read Guarded serves with pread: smaller ones
// (a decoder's header fields) cost less as a copy from the mapping than as
// a system call, and they cover no whole page to release.
const preadMin = 32 << 10

// Guarded returns the fault-safe view of m.
func (m *Mapping) Guarded() *Guarded { return &Guarded{m: m} }

// Size implements Source.
func (g *Guarded) Size() int64 { return int64(len(g.m.data)) }

// Name returns the path the mapping was made from.
func (g *Guarded) Name() string { return g.m.name }

// ReadAt implements io.ReaderAt; bytes that vanished (the file shrank
// below the mapped size, or its storage failed) are reported as an error
// wrapping ErrSourceFault that names the file, the read and the offset
// where the data ended.
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
	want := p[:min(int64(len(p)), int64(len(data))-off)]
	if rf := g.m.rf; rf != nil && len(want) >= preadMin {
		n, err := rf.ReadAt(want, off)
		if n < len(want) {
			cause := "the file was truncated or its storage failed while mapped"
			if err != nil && !errors.Is(err, io.EOF) {
				cause = fmt.Sprintf("the file was truncated or its storage failed while mapped: %v", err)
			}
			return 0, fmt.Errorf("%w: %s: read of %d bytes at offset %d ended at offset %d (mapped size %d): %s",
				ErrSourceFault, g.m.name, len(p), off, off+int64(n), len(data), cause)
		}
	} else {
		n, fault, ok := guardedCopy(want, data[off:])
		if !ok {
			at := int64(fault - uintptr(unsafe.Pointer(unsafe.SliceData(data))))
			return 0, fmt.Errorf("%w: %s: read of %d bytes at offset %d faulted at offset %d (mapped size %d): the file was truncated or its storage failed while mapped",
				ErrSourceFault, g.m.name, len(p), off, at, len(data))
		}
		releasePages(data, off, int64(n))
	}
	if len(want) < len(p) {
		return len(want), io.EOF
	}
	return len(want), nil
}

// Release implements Releaser: a no-op when reads go through the
// descriptor (they never fault the mapping in).
func (g *Guarded) Release(off, n int64) {
	if g.m.rf == nil {
		releasePages(g.m.data, off, n)
	}
}

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

// Viewer is implemented by sources backed by a memory-mapped file that may
// change while mapped (a Guarded and its Sections). View calls fn with
// the source's bytes [off, off+n) straight from the mapping — no copy,
// which for hashing a large checkpoint costs about a fifth less CPU than a
// pread(2) into a buffer — and turns a memory fault inside fn (the file
// shrank, or its storage failed) into an error wrapping ErrSourceFault
// instead of a fatal SIGBUS. The guard covers only the calling goroutine:
// fn must not hand b to another goroutine or keep it after it returns.
// The pages are released from the resident set afterwards (they stay in
// the page cache), so a streaming reader's RSS stays bounded.
type Viewer interface {
	Source
	View(off, n int64, fn func(b []byte)) error
}

// View implements Viewer.
func (g *Guarded) View(off, n int64, fn func(b []byte)) error {
	data := g.m.data
	if off < 0 || n < 0 || off > int64(len(data)) || n > int64(len(data))-off {
		return fmt.Errorf("snapshot: %s: view of %d bytes at offset %d is outside the mapped %d", g.m.name, n, off, len(data))
	}
	b := data[off : off+n : off+n]
	err := Guard(fmt.Sprintf("%s: view of %d bytes at offset %d (mapped size %d)", g.m.name, n, off, len(data)), func() error {
		fn(b)
		return nil
	})
	releasePages(data, off, n)
	return err
}

// guardedSection is a Section of a Guarded: a Viewer too.
type guardedSection struct {
	g       *Guarded
	off, n  int64
	section *io.SectionReader
}

func (s *guardedSection) ReadAt(p []byte, off int64) (int, error) { return s.section.ReadAt(p, off) }
func (s *guardedSection) Size() int64                             { return s.n }

// View implements Viewer.
func (s *guardedSection) View(off, n int64, fn func(b []byte)) error {
	if off < 0 || n < 0 || off > s.n || n > s.n-off {
		return fmt.Errorf("snapshot: %s: view of %d bytes at offset %d is outside the %d-byte section", s.g.m.name, n, off, s.n)
	}
	return s.g.View(s.off+off, n, fn)
}
