package dirfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// openNoBlock opens name in r, failing the test if the open hangs (the
// timeout is only a guard: the open itself must never block).
func openNoBlock(t *testing.T, r *Root, name string) (*os.File, error) {
	t.Helper()
	type res struct {
		f   *os.File
		err error
	}
	done := make(chan res, 1)
	go func() {
		f, err := r.Open(name)
		done <- res{f, err}
	}()
	select {
	case x := <-done:
		return x.f, x.err
	case <-time.After(10 * time.Second):
		t.Fatalf("open of %s blocked", name)
		return nil, nil
	}
}

// TestHostileTree: FIFOs, devices and symbolic links out of the tree are
// refused without blocking; a symbolic link to a sibling is followed
// where the kernel can keep it beneath the directory (openat2).
func TestHostileTree(t *testing.T) {
	dir, r := tree(t)
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("SECRET"), 0o644))
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	must(t, os.Symlink("fifo", filepath.Join(dir, "to-fifo")))
	must(t, os.Symlink("a", filepath.Join(dir, "to-a")))
	must(t, os.Symlink("sub", filepath.Join(dir, "to-sub")))
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "abs-out")))
	must(t, os.Symlink("../"+filepath.Base(outside)+"/secret", filepath.Join(dir, "rel-out")))
	must(t, os.Symlink("/dev/zero", filepath.Join(dir, "zero")))
	must(t, os.Symlink("loop", filepath.Join(dir, "loop")))

	_, err := openNoBlock(t, r, "fifo")
	isRefusal(t, err, ErrUnsafe, filepath.Join(dir, "fifo"), "not a regular file (a FIFO)")

	// Without openat2 (an old kernel) every symbolic link is refused.
	f, err := openNoBlock(t, r, "to-a")
	if err != nil {
		isRefusal(t, err, ErrUnsafe, filepath.Join(dir, "to-a"), "is a symbolic link (refused: this kernel cannot check")
		t.Skip("kernel without openat2: symbolic links are refused")
	}
	f.Close()
	_, err = openNoBlock(t, r, "to-fifo")
	isRefusal(t, err, ErrUnsafe, filepath.Join(dir, "to-fifo"), "not a regular file (a FIFO)")
	_, err = openNoBlock(t, r, "to-sub")
	isRefusal(t, err, ErrDir, filepath.Join(dir, "to-sub"), "not a regular file (a directory)")
	for _, n := range []string{"abs-out", "rel-out", "zero"} {
		_, err = openNoBlock(t, r, n)
		isRefusal(t, err, ErrOutside, filepath.Join(dir, n), "resolves outside the directory")
	}
	_, err = openNoBlock(t, r, "loop")
	isRefusal(t, err, ErrUnsafe, filepath.Join(dir, "loop"), "symbolic link loop")

	for name, want := range map[string]fs.FileMode{"fifo": fs.ModeNamedPipe, "to-a": fs.ModeSymlink} {
		typ, err := r.Lstat(name)
		must(t, err)
		if typ != want {
			t.Fatalf("%s: type %v, want %v", name, typ, want)
		}
	}
}

// TestOpenRootNoBlock: a FIFO named as the directory is refused at once.
func TestOpenRootNoBlock(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	must(t, syscall.Mkfifo(fifo, 0o644))
	_, err := OpenRoot(fifo)
	isRefusal(t, err, ErrUnsafe, fifo, "not a directory")
}

// TestReadSmallGrew: a file whose content outgrows its fstat size (here a
// /proc file, size 0) is refused with ErrGrew at that size.
func TestReadSmallGrew(t *testing.T) {
	r, err := OpenRoot("/proc/self")
	if err != nil {
		t.Skip(err)
	}
	defer r.Close()
	f, err := r.Open("status")
	must(t, err)
	defer f.Close()
	_, err = ReadSmall(f, 1<<20)
	isRefusal(t, err, ErrGrew, "/proc/self/status", "file grew while read")
	var e *Error
	if errors.As(err, &e); e.Offset != 0 {
		t.Fatalf("offset %d, want 0", e.Offset)
	}
}
