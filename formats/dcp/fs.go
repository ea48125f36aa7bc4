package dcp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// checkFileName accepts a plain file name of the directory: what torch's
// FileSystemWriter writes (__<rank>_<n>.distcp) and any other name
// without a directory part. The error says what is wrong, never quoting
// the name.
func checkFileName(name string) error {
	switch {
	case name == "":
		return errors.New("is empty")
	case len(name) > 255:
		return fmt.Errorf("is %d bytes long (at most 255)", len(name))
	case strings.HasPrefix(name, "/"):
		return errors.New("is an absolute path (only a file of the directory is read)")
	case name == "." || name == ".." || strings.HasPrefix(name, "../"):
		return errors.New("leaves the directory")
	case strings.ContainsAny(name, "/\\"):
		return errors.New("names a file in another directory (only a file of the directory itself is read)")
	case strings.HasPrefix(name, "."):
		return errors.New("is a dot-file (.metadata and temp files are not item files)")
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] == 0x7f {
			return errors.New("contains a control byte")
		}
	}
	return nil
}

// root is an open directory; every file below it is opened relative to
// its descriptor, so nothing outside the tree is ever read.
type root struct {
	path string
	fd   int
}

// openRoot opens dir without blocking and refuses anything but a
// directory.
func openRoot(dir string) (*root, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			return nil, errf(dir, "", -1, "", ErrUnsafe, "not a directory")
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
			return nil, errf(r.path, "", -1, "", ErrLimit, "directory has more than %d entries", max)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// open opens the entry name (checked with checkFileName, except for
// ".metadata") for reading: resolution must stay beneath the directory
// (RESOLVE_BENEATH; a symlink to a sibling is followed, one leaving the
// tree is refused; on kernels without openat2 every symlink is refused),
// the open never blocks (O_NONBLOCK: a FIFO opens at once and is then
// refused), and the opened descriptor must be a regular file.
func (r *root) open(name string) (*os.File, error) {
	full := filepath.Join(r.path, name)
	if name != metadataName {
		if err := checkFileName(name); err != nil {
			return nil, errf(r.path, "", -1, "", ErrUnsafe, "item file name %v", err)
		}
	}
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY
	fd, err := unix.Openat2(r.fd, name, &unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Openat(r.fd, name, flags|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ELOOP) {
			return nil, errf(full, "", -1, "", ErrUnsafe, "is a symbolic link (refused: this kernel cannot check that it stays inside the directory)")
		}
	}
	if err != nil {
		switch {
		case errors.Is(err, unix.EXDEV):
			return nil, errf(full, "", -1, "", ErrUnsafe, "resolves outside the directory (a symbolic link leaving the tree is refused)")
		case errors.Is(err, unix.ELOOP):
			return nil, errf(full, "", -1, "", ErrUnsafe, "symbolic link loop")
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
		return nil, errf(full, "", -1, "", ErrUnsafe, "not a regular file (%s); only regular files are read", describeMode(st.Mode()))
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
		return nil, errf(f.Name(), "", -1, "", ErrLimit, "%d bytes, limit %d", st.Size(), limit)
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, errf(f.Name(), "", -1, "", ErrIncomplete, "file shrank while read")
		}
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	var one [1]byte
	if n, _ := f.Read(one[:]); n > 0 {
		return nil, errf(f.Name(), "", st.Size(), "", ErrIncomplete, "file grew while read")
	}
	return b, nil
}
