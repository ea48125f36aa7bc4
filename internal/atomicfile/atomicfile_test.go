package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileAndFailure(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x")
	if err := WriteFile(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := WriteFrom(p, 0o600, func(w io.Writer) error {
		w.Write([]byte("partial"))
		return errors.New("boom")
	})
	if err == nil {
		t.Fatal("want error")
	}
	b, _ := os.ReadFile(p)
	if string(b) != "one" {
		t.Fatalf("target changed to %q", b)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("leftovers: %v", ents)
	}
}

func TestSweep(t *testing.T) {
	dir := t.TempDir()
	f, err := Create(filepath.Join(dir, "y"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.File.Close() // simulate a crash: never committed nor aborted
	n, err := Sweep(dir)
	if err != nil || n != 1 {
		t.Fatalf("swept %d, %v", n, err)
	}
}
