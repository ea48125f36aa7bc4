package snapshot

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Issue 11 item 7: a source truncated while mapped killed the process
// with SIGBUS. Reads through Guarded fail with ErrSourceFault instead, in
// any goroutine.
func TestGuardedTruncatedWhileMapped(t *testing.T) {
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
	if _, ok := BytesOf(g); ok {
		t.Fatal("Guarded exposes raw memory")
	}
	buf := make([]byte, 4096)
	if n, err := g.ReadAt(buf, 8192); err != nil || n != 4096 || !bytes.Equal(buf, data[8192:8192+4096]) {
		t.Fatalf("read before truncation: %d %v", n, err)
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
		if !errors.Is(err, ErrSourceFault) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "truncated") {
			t.Fatalf("goroutine %d: %v", i, err)
		}
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
