package armor

import (
	"bytes"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

func FuzzParseSeal(f *testing.F) {
	for _, b := range testutil.Seeds(f, "testdata/*.wseal") {
		f.Add(b)
	}
	fixed := testutil.SourceTexts(f, ".", "..")
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSeal(b)
		if err != nil {
			if run, ok := testutil.EchoedRun(err.Error(), b, fixed...); ok {
				t.Fatalf("error echoes the input run %q: %v", run, err)
			}
			return
		}
		if !bytes.Equal(s.Marshal(), b) {
			t.Fatalf("parse/marshal not stable")
		}
	})
}

func FuzzScan(f *testing.F) {
	for _, b := range testutil.Seeds(f, "testdata/*.age") {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Scan(bytes.NewReader(b))
		if err == nil && d.Bytes != int64(len(b)) {
			t.Fatalf("size %d of %d", d.Bytes, len(b))
		}
	})
}
