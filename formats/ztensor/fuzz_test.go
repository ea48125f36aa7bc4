package ztensor

import (
	"bytes"
	"errors"
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/internal/testutil"
)

// FuzzDecode: no input panics; every error is a *Error; whatever decodes
// re-encodes (through the WTXT simulation), the re-encoded file decodes to
// the same snapshot, and encoding that again gives the same bytes.
func FuzzDecode(f *testing.F) {
	for _, b := range formatstest.Seeds(f, "testdata/*.zt") {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		testutil.NoEcho(t, func(b []byte) error { _, err := decodeBytes(b); return err }, b, len(Magic))
		s1, err := decodeBytes(b)
		if err != nil {
			var ze *Error
			if !errors.As(err, &ze) {
				t.Fatalf("error %q is not a *Error", err)
			}
			return
		}
		if err := s1.Validate(); err != nil {
			t.Fatalf("decoded snapshot invalid: %v", err)
		}
		out := encodeBytes(t, formatstest.SimulateWTXT(t, s1))
		s2, err := decodeBytes(out)
		if err != nil {
			t.Fatalf("re-encoded file does not decode: %v", err)
		}
		formatstest.Equal(t, s2, s1)
		if again := encodeBytes(t, formatstest.SimulateWTXT(t, s2)); !bytes.Equal(again, out) {
			t.Fatalf("encoding is not canonical: second encode differs")
		}
	})
}

// FuzzManifest fuzzes only the manifest of each fixture, keeping its blob
// region, so that mutations reach the schema and layout checks instead of
// mostly breaking the footer. Same properties as FuzzDecode.
func FuzzManifest(f *testing.F) {
	var regions [][]byte
	for i, b := range formatstest.Seeds(f, "testdata/*.zt") {
		blobs, mb := splitFile(f, b)
		regions = append(regions, blobs)
		f.Add(uint8(i), mb)
	}
	f.Fuzz(func(t *testing.T, which uint8, mb []byte) {
		b := assemble(regions[int(which)%len(regions)], mb)
		s1, err := decodeBytes(b)
		if err != nil {
			var ze *Error
			if !errors.As(err, &ze) {
				t.Fatalf("error %q is not a *Error", err)
			}
			return
		}
		out := encodeBytes(t, formatstest.SimulateWTXT(t, s1))
		s2, err := decodeBytes(out)
		if err != nil {
			t.Fatalf("re-encoded file does not decode: %v", err)
		}
		formatstest.Equal(t, s2, s1)
		if again := encodeBytes(t, formatstest.SimulateWTXT(t, s2)); !bytes.Equal(again, out) {
			t.Fatalf("encoding is not canonical: second encode differs")
		}
	})
}
