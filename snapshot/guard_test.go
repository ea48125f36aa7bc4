package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// A source truncated while mapped killed the process
// with SIGBUS. Reads through Guarded fail with ErrSourceFault instead, in
// any goroutine.
//
// Both ways Guarded reads are checked: pread on the mapping's descriptor
// (the default) and the copy from the mapping under SetPanicOnFault (when
// no descriptor could be kept).
func TestGuardedTruncatedWhileMapped(t *testing.T) {
	t.Run("descriptor", func(t *testing.T) { testGuardedTruncated(t, true) })
	t.Run("mapping", func(t *testing.T) { testGuardedTruncated(t, false) })
}

func testGuardedTruncated(t *testing.T, viaDescriptor bool) {
	p := filepath.Join(t.TempDir(), "src.bin")
	data := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := MapFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.rf == nil {
		t.Fatal("MapFile kept no descriptor")
	}
	if !viaDescriptor {
		m.rf.Close()
		m.rf = nil
	}
	g := m.Guarded()
	if _, ok := BytesOf(g); ok {
		t.Fatal("Guarded exposes raw memory")
	}
	buf := make([]byte, 4096)
	if n, err := g.ReadAt(buf, 8192); err != nil || n != 4096 || !bytes.Equal(buf, data[8192:8192+4096]) {
		t.Fatalf("read before truncation: %d %v", n, err)
	}
	if all, err := io.ReadAll(io.NewSectionReader(g, 0, g.Size())); err != nil || !bytes.Equal(all, data) {
		t.Fatalf("whole file through Guarded: %d bytes, %v", len(all), err)
	}
	if n, err := g.ReadAt(buf[:10], g.Size()-4); n != 4 || err != io.EOF || !bytes.Equal(buf[:4], data[len(data)-4:]) {
		t.Fatalf("read past the end: %d %v", n, err)
	}
	if err := os.Truncate(p, 4096); err != nil {
		t.Fatal(err)
	}
	// The first page is still backed; everything after it faults.
	if _, err := g.ReadAt(buf[:100], 0); err != nil {
		t.Fatalf("read inside the remaining page: %v", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = g.ReadAt(make([]byte, 64<<10), int64(i+1)*(128<<10))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ErrSourceFault) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "truncated") ||
			!strings.Contains(err.Error(), fmt.Sprintf("at offset %d", (i+1)*(128<<10))) {
			t.Fatalf("goroutine %d: %v", i, err)
		}
	}
	// A read across the new end names where the data ended.
	if _, err := g.ReadAt(make([]byte, 64<<10), 0); !errors.Is(err, ErrSourceFault) || (viaDescriptor && !strings.Contains(err.Error(), "ended at offset 4096")) {
		t.Fatalf("read across the new end: %v", err)
	}
	// A small read across the new end is copied from the mapping either way.
	if _, err := g.ReadAt(make([]byte, 8192), 0); !errors.Is(err, ErrSourceFault) || !strings.Contains(err.Error(), "faulted at offset") {
		t.Fatalf("small read across the new end: %v", err)
	}
	// Stream copies stop with the error too.
	var sink bytes.Buffer
	var cbuf []byte
	if err := CopyTo(context.Background(), &sink, g, g.Size(), &cbuf); !errors.Is(err, ErrSourceFault) {
		t.Fatalf("CopyTo: %v", err)
	}
	if _, err := io.Copy(io.Discard, io.NewSectionReader(Section(g, 0, g.Size()), 0, g.Size())); !errors.Is(err, ErrSourceFault) {
		t.Fatalf("Section: %v", err)
	}
	// Direct access to the mapping under Guard.
	err = Guard(p, func() error {
		var s byte
		for _, c := range m.Bytes()[512<<10:] {
			s += c
		}
		if s == 1 { // use s: the loads must happen
			return errors.New("sum")
		}
		return nil
	})
	if !errors.Is(err, ErrSourceFault) {
		t.Fatalf("Guard: %v", err)
	}
}

// TestGuardedView: View hands out the mapped bytes of a Guarded and of its
// Sections (which stay Viewers and expose no raw memory through BytesOf);
// a range outside is an error; after the file shrank, a view of the
// vanished bytes fails with ErrSourceFault — also when the fault happens
// inside assembly (SHA-256, as the WTXT encoder hashes views) — and the
// process lives on.
func TestGuardedView(t *testing.T) {
	p := filepath.Join(t.TempDir(), "src.bin")
	data := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := MapFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	g := m.Guarded()
	var got []byte
	if err := g.View(5000, 70000, func(b []byte) { got = bytes.Clone(b) }); err != nil || !bytes.Equal(got, data[5000:75000]) {
		t.Fatalf("view: %v", err)
	}
	sec := Section(g, 4096, 1<<19)
	v, ok := sec.(Viewer)
	if !ok {
		t.Fatalf("a Section of a Guarded is a %T, not a Viewer", sec)
	}
	if _, ok := BytesOf(sec); ok {
		t.Fatal("a Section of a Guarded exposes raw memory")
	}
	if err := v.View(100, 200, func(b []byte) { got = bytes.Clone(b) }); err != nil || !bytes.Equal(got, data[4196:4396]) {
		t.Fatalf("section view: %v", err)
	}
	buf := make([]byte, 300)
	if n, err := sec.ReadAt(buf, 1<<19-100); n != 100 || err != io.EOF || !bytes.Equal(buf[:100], data[4096+1<<19-100:4096+1<<19]) {
		t.Fatalf("section read at its end: %d %v", n, err)
	}
	for _, r := range [][2]int64{{-1, 10}, {0, 1<<20 + 1}, {1 << 20, 1}} {
		if err := g.View(r[0], r[1], func([]byte) { t.Fatal("fn called") }); err == nil {
			t.Fatalf("view %v outside the mapping: no error", r)
		}
	}
	if err := v.View(1<<19, 1, func([]byte) { t.Fatal("fn called") }); err == nil {
		t.Fatal("view past the section: no error")
	}

	if err := os.Truncate(p, 8192); err != nil {
		t.Fatal(err)
	}
	if err := g.View(0, 8192, func(b []byte) { sha256.Sum256(b) }); err != nil {
		t.Fatalf("view of bytes still there: %v", err)
	}
	err = g.View(4096, 1<<19, func(b []byte) { sha256.Sum256(b) })
	if !errors.Is(err, ErrSourceFault) || !strings.Contains(err.Error(), "src.bin") {
		t.Fatalf("view of vanished bytes: %v", err)
	}
	err = v.View(0, 1<<19, func(b []byte) { h := sha256.New(); h.Write(b) })
	if !errors.Is(err, ErrSourceFault) {
		t.Fatalf("section view of vanished bytes: %v", err)
	}
}
