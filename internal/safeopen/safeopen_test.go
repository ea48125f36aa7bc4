//go:build unix

package safeopen

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// noHang runs fn and fails the test if it does not return (the timeout
// is only a guard against the hang this package exists to prevent).
func noHang(t *testing.T, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(testutil.Guard):
		t.Fatalf("%s: blocked", what)
		return nil
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, []byte("secret-bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	toFifo := filepath.Join(dir, "to-fifo")
	if err := os.Symlink(fifo, toFifo); err != nil {
		t.Fatal(err)
	}
	toReg := filepath.Join(dir, "to-reg")
	if err := os.Symlink(reg, toReg); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path string
		fl   Flags
		want string // "" = ok
	}{
		{reg, 0, ""},
		{reg, NoFollow, ""},
		{toReg, 0, ""},
		{toReg, NoFollow, "symbolic link"},
		{fifo, 0, "named pipe (FIFO)"},
		{fifo, AllowDir, "named pipe (FIFO)"},
		{toFifo, 0, "named pipe (FIFO)"},
		{toFifo, NoFollow, "symbolic link"},
		{zero, 0, "character device"},
		{zero, NoFollow, "symbolic link"},
		{"/dev/null", 0, "character device"},
		{dir, 0, "directory"},
		{dir, AllowDir, ""},
	}
	for _, c := range cases {
		var f *os.File
		err := noHang(t, c.path, func() (err error) { f, err = Open(c.path, c.fl); return })
		if c.want == "" {
			if err != nil {
				t.Errorf("%s (%d): %v", c.path, c.fl, err)
				continue
			}
			f.Close()
			continue
		}
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s (%d): %v, want ErrNotRegular naming the path and %q", c.path, c.fl, err, c.want)
		}
	}
	// Writers too: O_WRONLY|O_APPEND on a FIFO without a reader fails at
	// once; O_RDWR (which Linux never blocks on) is refused by fstat.
	for _, flag := range []int{os.O_WRONLY | os.O_APPEND, os.O_RDWR} {
		err := noHang(t, "write open", func() error { _, err := OpenFile(fifo, flag, 0, NoFollow); return err })
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "named pipe") {
			t.Errorf("flag %#x: FIFO opened for writing: %v", flag, err)
		}
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state")
	os.WriteFile(p, []byte("0123456789"), 0o644)
	if b, err := ReadFile(p, 10, NoFollow); err != nil || string(b) != "0123456789" {
		t.Fatalf("%q %v", b, err)
	}
	if _, err := ReadFile(p, 9, NoFollow); !errors.Is(err, ErrTooLarge) || strings.Contains(err.Error(), "0123") {
		t.Fatalf("limit: %v", err)
	}
	zero := filepath.Join(dir, "zero")
	os.Symlink("/dev/zero", zero)
	for _, fl := range []Flags{0, NoFollow} {
		if err := noHang(t, "zero", func() error { _, err := ReadFile(zero, 1<<20, fl); return err }); !errors.Is(err, ErrNotRegular) {
			t.Fatalf("/dev/zero link (%d): %v", fl, err)
		}
	}
}

func TestReadDir(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b", "a", "c"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	ents, err := ReadDir(dir)
	if err != nil || len(ents) != 3 || ents[0].Name() != "a" || ents[2].Name() != "c" {
		t.Fatalf("%v %v", ents, err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, filepath.Join(dir, "a")} {
		if err := noHang(t, p, func() error { _, err := ReadDir(p); return err }); !errors.Is(err, syscall.ENOTDIR) {
			t.Fatalf("%s: %v", p, err)
		}
	}
}
