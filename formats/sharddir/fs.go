package sharddir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// root is an open directory; every file below it is opened relative to its
// descriptor so that nothing outside the tree is ever read.
type root struct {
	path string
	fd   int
}

// openRoot opens dir (following a symlink in dir itself: that is the path
// the caller named) without blocking, and refuses anything but a
// directory.
func openRoot(dir string) (*root, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			return nil, errf(dir, -1, "", ErrUnsafe, "not a directory")
		}
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &root{path: dir, fd: fd}, nil
}

func (r *root) close() error { return unix.Close(r.fd) }

// names lists the directory's entries (unsorted), at most max of them.
func (r *root) names(max int) ([]string, error) {
	fd, err := unix.Openat(r.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: r.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), r.path)
	defer f.Close()
	var out []string
	for {
		batch, err := f.Readdirnames(256)
		out = append(out, batch...)
		if len(out) > max {
			return nil, errf(r.path, -1, "", ErrLimit, "directory has more than %d entries", max)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// errSymlinkDir: an entry is a symlink to a directory inside the tree
// (skipped like a subdirectory).
var errSymlinkDir = fmt.Errorf("%w: symbolic link to a directory", ErrUnsafe)

// lstat stats the entry name without following a symlink.
func (r *root) lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(r.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return st, &os.PathError{Op: "lstat", Path: filepath.Join(r.path, name), Err: err}
	}
	return st, nil
}

// open opens the entry name (a plain file name) for reading: resolution
// must stay beneath the directory (a symlink to a sibling is followed, one
// leaving the tree is refused; RESOLVE_BENEATH, or O_NOFOLLOW when the
// kernel lacks openat2), the open never blocks (O_NONBLOCK: a FIFO opens
// at once and is then refused), and the opened descriptor must be a
// regular file (fstat).
func (r *root) open(name string) (*os.File, error) {
	full := filepath.Join(r.path, name)
	if err := checkFileName(name); err != nil {
		return nil, errf(full, -1, "", ErrUnsafe, "%v", err)
	}
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY
	fd, err := unix.Openat2(r.fd, name, &unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Openat(r.fd, name, flags|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ELOOP) {
			return nil, errf(full, -1, "", ErrUnsafe, "is a symbolic link (refused: this kernel cannot check that it stays inside the directory)")
		}
	}
	if err != nil {
		switch {
		case errors.Is(err, unix.EXDEV):
			return nil, errf(full, -1, "", ErrOutside, "resolves outside the directory (a symbolic link leaving the tree is refused)")
		case errors.Is(err, unix.ELOOP):
			return nil, errf(full, -1, "", ErrUnsafe, "symbolic link loop")
		}
		return nil, &os.PathError{Op: "open", Path: full, Err: err}
	}
	f := os.NewFile(uintptr(fd), full)
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		err := ErrUnsafe
		if st.IsDir() {
			err = errSymlinkDir
		}
		return nil, errf(full, -1, "", err, "not a regular file (%s); only regular files are read", describeMode(st.Mode()))
	}
	return f, nil
}

func describeMode(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return fmt.Sprintf("mode %s", m.Type())
}

// readSmall reads the whole regular file f of at most limit bytes.
func readSmall(f *os.File, limit int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, errf(f.Name(), -1, "", ErrLimit, "%d bytes, limit %d", st.Size(), limit)
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	// A file that grew after fstat is read only up to its fstat size plus
	// one byte, which tells it grew.
	var one [1]byte
	if n, _ := f.Read(one[:]); n > 0 {
		return nil, errf(f.Name(), st.Size(), "", ErrCorrupt, "file grew while read")
	}
	return b, nil
}

// modeOf turns a stat mode's file type into an fs.FileMode type.
func modeOf(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFDIR:
		return fs.ModeDir
	}
	return fs.ModeIrregular
}
