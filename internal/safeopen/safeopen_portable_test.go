package safeopen

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenPortable holds on every system: regular files open, a symlink
// is refused with NoFollow, a directory only with AllowDir, and ReadDir
// sorts and refuses a file.
func TestOpenPortable(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, fl := range []Flags{0, NoFollow} {
		f, err := Open(reg, fl)
		if err != nil {
			t.Fatalf("regular file (%d): %v", fl, err)
		}
		f.Close()
	}
	if _, err := Open(dir, 0); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("directory: %v", err)
	}
	f, err := Open(dir, AllowDir)
	if err != nil {
		t.Fatalf("directory with AllowDir: %v", err)
	}
	f.Close()
	if _, err := ReadDir(reg); err == nil {
		t.Fatal("ReadDir of a file succeeded")
	}
	if ents, err := ReadDir(dir); err != nil || len(ents) != 1 || ents[0].Name() != "reg" {
		t.Fatalf("ReadDir: %v %v", ents, err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg, link); err != nil {
		t.Skipf("no symlinks here: %v", err)
	}
	if _, err := Open(link, NoFollow); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("symlink with NoFollow: %v", err)
	}
	f, err = Open(link, 0)
	if err != nil {
		t.Fatalf("symlink: %v", err)
	}
	f.Close()
}
