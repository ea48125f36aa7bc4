package dcp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
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

// regularOnly returns f, the just opened entry at full, if it is a
// regular file; otherwise it closes f and refuses it.
func regularOnly(f *os.File, full string) (*os.File, error) {
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
