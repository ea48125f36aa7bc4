package torch

import (
	"archive/zip"
	"bytes"
	"testing"
)

// hostileTorch is a .pt of about 40 KB whose deflated data.pkl (within
// DefaultMaxPickle once inflated) is 8 million EMPTY_LIST opcodes: each
// list the unpickler builds is charged to the decode budget, so the
// objects exceed the 256 MiB default budget of a small file long before
// the pickle ends, and the decode is refused with ErrLimit.
func hostileTorch(tb testing.TB) []byte {
	tb.Helper()
	pkl := concat([]byte{0x80, 2}, bytes.Repeat([]byte{']'}, 8<<20), []byte{'.'})
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, m := range []struct {
		name    string
		data    []byte
		deflate bool
	}{{"archive/data.pkl", pkl, true}, {"archive/version", []byte("3\n"), false}} {
		method := zip.Store
		if m.deflate {
			method = zip.Deflate
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: m.name, Method: method})
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := w.Write(m.data); err != nil {
			tb.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}
