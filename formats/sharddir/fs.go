package sharddir

import (
	"fmt"
	"io"
	"os"
)

// errSymlinkDir: an entry is a symlink to a directory inside the tree
// (skipped like a subdirectory).
var errSymlinkDir = fmt.Errorf("%w: symbolic link to a directory", ErrUnsafe)

// regularOnly returns f, the just opened entry at full, if it is a regular
// file; otherwise it closes f and refuses it (errSymlinkDir for a
// directory a symlink led to).
func regularOnly(f *os.File, full string) (*os.File, error) {
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
