package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
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

// WriteUnsynced replaces the file whole, with the mode asked, and leaves
// no temp file behind, also when it fails.
func TestWriteUnsynced(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "status.json")
	for _, data := range []string{"first\n", "second, longer\n", ""} {
		if err := WriteUnsynced(p, []byte(data), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != data {
			t.Fatalf("read %q, %v; want %q", got, err, data)
		}
	}
	if st, err := os.Stat(p); err != nil || (runtime.GOOS != "windows" && st.Mode().Perm() != 0o640) {
		t.Fatalf("stat: %v, %v", st.Mode(), err)
	}
	// A target that cannot be replaced (a directory in its place).
	if err := os.Mkdir(filepath.Join(dir, "busy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "busy", "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteUnsynced(filepath.Join(dir, "busy"), []byte("x"), 0o600); err == nil {
		t.Fatal("replacing a non-empty directory succeeded")
	}
	if n, err := Sweep(dir); err != nil || n != 0 {
		t.Fatalf("temp files left: %d, %v", n, err)
	}
	if err := WriteUnsynced(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}
