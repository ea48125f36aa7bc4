package safetensors

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// shrink returns a small valid file with the header structure of raw
// (names, dtypes, ranks, metadata): every dimension is capped at 2 and the
// data cut accordingly. Coverage-guided fuzzing stalls on the 160-240 KB
// conformance vectors; TestVectors covers them whole.
func shrink(f *testing.F, raw []byte) []byte {
	s, err := decode(f, snapshot.Bytes(raw), int64(len(raw)))
	if err != nil {
		f.Fatal(err)
	}
	for _, a := range s.Arrays {
		for i, d := range a.Shape {
			a.Shape[i] = min(d, 2)
		}
		n, err := a.NumBytes()
		if err != nil {
			f.Fatal(err)
		}
		b, err := snapshot.ReadAll(a.Data)
		if err != nil {
			f.Fatal(err)
		}
		a.Data = snapshot.Bytes(b[:n])
	}
	out, err := encode(f, s, false)
	if err != nil {
		f.Fatal(err)
	}
	return out
}

// FuzzDecode checks that Decode never panics and that whatever decodes
// re-encodes, re-decodes to the same snapshot, and re-encodes to the same
// bytes (the writer is canonical).
func FuzzDecode(f *testing.F) {
	for _, b := range formatstest.Seeds(f, "testdata/*.safetensors") {
		f.Add(shrink(f, b))
	}
	f.Add(richFile())
	f.Add(mk(`{"__metadata__":{"a":"b"}}`, nil))
	f.Add(mk(`{"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}`, []byte{7}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		testutil.NoEcho(t, func(b []byte) error { _, err := decode(t, snapshot.Bytes(b), int64(len(b))); return err }, raw, 8)
		s, err := decode(t, snapshot.Bytes(raw), int64(len(raw)))
		if err != nil {
			// encoding/json's own messages quote the header (a character,
			// a key, a number): none may reach the error undescribed.
			for _, m := range []string{"json: ", "invalid character", "cannot unmarshal", "looking for beginning"} {
				if strings.Contains(err.Error(), m) {
					t.Fatalf("encoding/json's message (%q) in the error: %v", m, err)
				}
			}
			// Offsets are the file's (jsonerr rescans encoding/json's).
			if e := (*Error)(nil); errors.As(err, &e) && e.Offset > int64(len(raw)) {
				t.Fatalf("offset %d beyond the %d-byte file: %v", e.Offset, len(raw), err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("decoded snapshot invalid: %v", err)
		}
		for _, a := range s.Arrays {
			if !snapshot.PortableName(a.Name) {
				t.Fatalf("illegal array name %q", a.Name)
			}
		}
		out, err := encode(t, s, false)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		s2, err := decode(t, snapshot.Bytes(out), int64(len(out)))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		formatstest.EqualSorted(t, s, s2)
		out2, err := encode(t, s2, false)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatal("encoding not canonical")
		}
	})
}
