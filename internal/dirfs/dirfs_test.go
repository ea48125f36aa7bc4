package dirfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// tree makes a directory with the regular files a (3 bytes) and b and
// the subdirectory sub, and opens it.
func tree(t *testing.T) (string, *Root) {
	t.Helper()
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "a"), []byte("abc"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "b"), nil, 0o644))
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	r, err := OpenRoot(dir)
	must(t, err)
	t.Cleanup(func() { r.Close() })
	return dir, r
}

// isRefusal checks that err is an *Error of kind whose message names path
// and contains want.
func isRefusal(t *testing.T, err, kind error, path, want string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, kind) {
		t.Fatalf("error %v (%T), want a *dirfs.Error of %v", err, err, kind)
	}
	if e.Path != path || !strings.Contains(e.Check, want) || err.Error() != path+": "+e.Check {
		t.Fatalf("error %q (path %q), want path %q and %q", err, e.Path, path, want)
	}
}

func TestOpenRegular(t *testing.T) {
	dir, r := tree(t)
	if r.Path() != dir {
		t.Fatalf("Path %q, want %q", r.Path(), dir)
	}
	f, err := r.Open("a")
	must(t, err)
	defer f.Close()
	if f.Name() != filepath.Join(dir, "a") {
		t.Fatalf("Name %q", f.Name())
	}
	b, err := ReadSmall(f, 3)
	must(t, err)
	if string(b) != "abc" {
		t.Fatalf("read %q", b)
	}
}

func TestOpenRefusals(t *testing.T) {
	dir, r := tree(t)
	for _, name := range []string{"", ".", "..", "../a", "sub/x", filepath.Join(dir, "a")} {
		_, err := r.Open(name)
		isRefusal(t, err, ErrUnsafe, filepath.Join(dir, name), "not a plain file name")
		_, err = r.Lstat(name)
		isRefusal(t, err, ErrUnsafe, filepath.Join(dir, name), "not a plain file name")
	}
	_, err := r.Open("sub")
	isRefusal(t, err, ErrDir, filepath.Join(dir, "sub"), "not a regular file (a directory)")
	if _, err := r.Open("missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := r.Lstat("missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("lstat missing: %v", err)
	}
	file := filepath.Join(dir, "a")
	_, err = OpenRoot(file)
	isRefusal(t, err, ErrUnsafe, file, "not a directory")
	if _, err := OpenRoot(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing root: %v", err)
	}
}

func TestNamesAndLstat(t *testing.T) {
	dir, r := tree(t)
	names, err := r.Names(3)
	must(t, err)
	sort.Strings(names)
	if strings.Join(names, ",") != "a,b,sub" {
		t.Fatalf("names %q", names)
	}
	_, err = r.Names(2)
	isRefusal(t, err, ErrLimit, dir, "directory has more than 2 entries")
	for name, want := range map[string]fs.FileMode{"a": 0, "sub": fs.ModeDir} {
		typ, err := r.Lstat(name)
		must(t, err)
		if typ != want {
			t.Fatalf("%s: type %v, want %v", name, typ, want)
		}
	}
}

func TestReadSmallLimit(t *testing.T) {
	dir, r := tree(t)
	f, err := r.Open("a")
	must(t, err)
	defer f.Close()
	_, err = ReadSmall(f, 2)
	isRefusal(t, err, ErrLimit, filepath.Join(dir, "a"), "3 bytes, limit 2")
	if e := err.(*Error); e.Offset != -1 {
		t.Fatalf("offset %d", e.Offset)
	}
}

func TestDescribeMode(t *testing.T) {
	for m, want := range map[fs.FileMode]string{
		fs.ModeNamedPipe:                  "a FIFO",
		fs.ModeDevice | fs.ModeCharDevice: "a device",
		fs.ModeSocket:                     "a socket",
		fs.ModeDir:                        "a directory",
		fs.ModeIrregular:                  "mode ?---------",
	} {
		if got := DescribeMode(m); got != want {
			t.Errorf("%v: %q, want %q", m, got, want)
		}
	}
}

// TestRenameDir: a finished directory is renamed into place; one already
// there (not empty) is never replaced.
func TestRenameDir(t *testing.T) {
	parent := t.TempDir()
	tmp, dir := filepath.Join(parent, ".tmp"), filepath.Join(parent, "out")
	must(t, os.Mkdir(tmp, 0o755))
	must(t, os.WriteFile(filepath.Join(tmp, "f"), []byte("new"), 0o644))
	must(t, RenameDir(tmp, dir))
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "new" {
		t.Fatalf("after rename: %q %v", b, err)
	}
	must(t, os.Mkdir(tmp, 0o755))
	must(t, os.WriteFile(filepath.Join(tmp, "f"), []byte("newer"), 0o644))
	err := RenameDir(tmp, dir)
	if err == nil {
		t.Fatal("replaced an existing directory")
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		t.Fatalf("error %v is a *os.LinkError, want the bare system error", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "new" {
		t.Fatalf("existing directory changed: %q %v", b, err)
	}
}
