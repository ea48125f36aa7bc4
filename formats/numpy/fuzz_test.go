package numpy

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// seedFiles returns the testdata files (written by NumPy) matching the
// patterns; it fails when there are none.
func seedFiles(f *testing.F, pats ...string) map[string][]byte {
	out := map[string][]byte{}
	for _, pat := range pats {
		m, err := filepath.Glob(filepath.Join("testdata", pat))
		if err != nil {
			f.Fatal(err)
		}
		for _, p := range m {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			out[p] = b
		}
	}
	if len(out) == 0 {
		f.Fatalf("no seed files match %v in testdata", pats)
	}
	return out
}

// FuzzHeader checks that the header parser never panics and that whatever
// it accepts has a canonical text that parses to the same header.
func FuzzHeader(f *testing.F) {
	for _, b := range seedFiles(f, "*.npy") {
		plen := prefixLen(b[6])
		var hlen int
		if b[6] == 1 {
			hlen = int(binary.LittleEndian.Uint16(b[8:]))
		} else {
			hlen = int(binary.LittleEndian.Uint32(b[8:]))
		}
		f.Add(b[plen : plen+hlen])
	}
	f.Add([]byte(`{"shape":(1,2,),"fortran_order":True,"descr":">u8",}`))
	f.Add([]byte(`{'descr': '<f8', 'fortran_order': False, 'shape': (3L, 4L), }`))
	f.Add([]byte(`{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (), }`))
	f.Fuzz(func(t *testing.T, text []byte) {
		h, err := parseHeader(text, 1)
		if err != nil {
			if _, ok := err.(*headerError); !ok {
				t.Fatalf("error of type %T", err)
			}
			return
		}
		for major := byte(1); major <= 3; major++ {
			w := wrapHeader(canonicalText(h), major)
			g, err := parseHeader([]byte(w), major)
			if err != nil {
				t.Fatalf("canonical text does not parse: %v", err)
			}
			if !reflect.DeepEqual(g, h) {
				t.Fatalf("canonical text parses to %+v, want %+v", g, h)
			}
			if (prefixLen(major)+len(w))%arrayAlign != 0 {
				t.Fatal("canonical header not aligned")
			}
		}
	})
}

// FuzzDecode checks that Decode (npy and npz) never panics, that what
// decodes is a valid snapshot whose data reads in full, and that it
// re-encodes, re-decodes to the same arrays and attributes, and re-encodes
// to the same bytes.
func FuzzDecode(f *testing.F) {
	for p, b := range seedFiles(f, "*.npy", "*.npz") {
		f.Add(b, strings.HasSuffix(p, ".npz"))
	}
	f.Fuzz(func(t *testing.T, raw []byte, npz bool) {
		c := Codec{NPZ: npz, Budget: 1 << 20}
		s, err := decodeBytes(t, c, raw)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T: %v", err, err)
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
			if _, err := snapshot.ReadAll(a.Data); err != nil && a.Data != nil {
				t.Fatalf("array %q: %v", a.Name, err)
			}
		}
		out, err := encodeBytes(t, c, s, false)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		s2, err := decodeBytes(t, c, out)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		sameArrays(t, s, s2)
		out2, err := encodeBytes(t, c, s2, false)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatal("encoding is not a fixed point")
		}
	})
}
