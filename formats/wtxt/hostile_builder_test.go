package wtxt

import (
	"bytes"
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
)

// hostileWTXT is golden-tiny.wtxt (858 bytes) whose one array declares
// 2^40 bytes (shape=1099511627776, bytes=1099511627776) over its
// one-line body of 3 bytes.
//
// WTXT cannot amplify: every raw byte is stored as base64 text (4 bytes
// of file per 3 raw bytes, plus line framing), nothing is compressed,
// the decoder's arrays stream from the file on demand, and the index it
// holds costs less per chunk than the chunk's own structure lines. So a
// declared size beyond the file is corruption, refused by the structure
// checks before any allocation sized by it: HostileErr is
// formats.ErrCorrupt, as for STB.
func hostileWTXT(tb testing.TB) []byte {
	tb.Helper()
	b := formatstest.ReadTestdata(tb, "testdata/golden-tiny.wtxt")
	const huge = "1099511627776"
	for _, r := range [][2]string{{"shape=3 ", "shape=" + huge + " "}, {"bytes=3 ", "bytes=" + huge + " "}} {
		if bytes.Count(b, []byte(r[0])) != 1 {
			tb.Fatalf("golden-tiny.wtxt: %q does not occur once", r[0])
		}
		b = bytes.Replace(b, []byte(r[0]), []byte(r[1]), 1)
	}
	return b
}
