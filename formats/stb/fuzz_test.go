package stb

import (
	"bytes"
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// FuzzDecode checks that Decode never panics and that whatever decodes
// re-encodes, re-decodes to the same snapshot and re-encodes to the same
// bytes (the writer is canonical).
func FuzzDecode(f *testing.F) {
	for _, b := range formatstest.Seeds(f, "testdata/*.stb") {
		f.Add(b)
	}
	f.Add(tricky())
	f.Fuzz(func(t *testing.T, raw []byte) {
		testutil.NoEcho(t, func(b []byte) error { _, err := decode(t, snapshot.Bytes(b), int64(len(b))); return err }, raw, len(Magic))
		s, err := decode(t, snapshot.Bytes(raw), int64(len(raw)))
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("decoded snapshot invalid: %v", err)
		}
		out, err := encode(t, s, false)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		s2, err := decode(t, snapshot.Bytes(out), int64(len(out)))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		formatstest.Equal(t, s, s2)
		out2, err := encode(t, formatstest.SimulateWTXT(t, s2), false)
		if err != nil {
			t.Fatalf("re-encode after WTXT: %v", err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatal("encoding not canonical")
		}
	})
}
