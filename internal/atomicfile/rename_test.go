package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestRenameNoReplace(t *testing.T) {
	t.Run("system", func(t *testing.T) { testRenameNoReplace(t, RenameNoReplace) })
	t.Run("fallback", func(t *testing.T) { testRenameNoReplace(t, renameExclusiveFallback) })
}

func testRenameNoReplace(t *testing.T, RenameNoReplace func(oldpath, newpath string) error) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(a, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RenameNoReplace(a, b); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("over an existing file: %v, want fs.ErrExist", err)
	}
	if got, _ := os.ReadFile(b); string(got) != "old" {
		t.Fatalf("target replaced: %q", got)
	}
	c := filepath.Join(dir, "c")
	if err := RenameNoReplace(a, c); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(c); string(got) != "new" {
		t.Fatalf("renamed file holds %q", got)
	}
	if _, err := os.Lstat(a); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("source still there: %v", err)
	}

	d1, d2 := filepath.Join(dir, "d1"), filepath.Join(dir, "d2")
	for _, d := range []string{d1, d2} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := RenameNoReplace(d1, d2); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("over an existing (empty) directory: %v, want fs.ErrExist", err)
	}
	d3 := filepath.Join(dir, "d3")
	if err := RenameNoReplace(d1, d3); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(d3); err != nil || !st.IsDir() {
		t.Fatalf("renamed directory: %v", err)
	}
}
