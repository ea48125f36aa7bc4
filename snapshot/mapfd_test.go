package snapshot

import (
	"os"
	"path/filepath"
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

	d, _ := os.Open(dir)
	defer d.Close()
	if _, err := MapOpenFile(d); err == nil {
		t.Fatal("directory mapped")
	}
}
