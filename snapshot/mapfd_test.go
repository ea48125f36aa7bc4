package snapshot

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestMapOpenFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := MapOpenFile(f)
	f.Close() // the mapping outlives the descriptor
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Bytes()) != "hello" || m.Name() != p {
		t.Fatalf("mapped %q as %s", m.Bytes(), m.Name())
	}
	m.Close()

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	ff, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ff.Close()
	if _, err := MapOpenFile(ff); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("FIFO: %v", err)
	}
	d, _ := os.Open(dir)
	defer d.Close()
	if _, err := MapOpenFile(d); err == nil {
		t.Fatal("directory mapped")
	}
}
