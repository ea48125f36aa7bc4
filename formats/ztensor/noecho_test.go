package ztensor

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestManifestVersionNeverEchoed: a hostile manifest version (CBOR text,
// any bytes) is refused naming the check, without quoting it.
func TestManifestVersionNeverEchoed(t *testing.T) {
	b, err := os.ReadFile("testdata/dense_dtypes.zt")
	if err != nil {
		t.Fatal(err)
	}
	blobs, mb := splitFile(t, b)
	old := []byte("\x67version\x631.0")
	if bytes.Count(mb, old) != 1 {
		t.Fatal("fixture manifest has no version 1.0")
	}
	for _, v := range []string{testutil.EvilMarker, testutil.EvilMarkerEsc, "2." + testutil.EvilMarker, "1.0.0.EVIL", "3.0"} {
		if len(v) > 23 {
			t.Fatalf("%q needs a longer CBOR header", v)
		}
		nb := assemble(blobs, bytes.Replace(mb, old, append([]byte{0x67, 'v', 'e', 'r', 's', 'i', 'o', 'n', byte(0x60 + len(v))}, v...), 1))
		_, err := decodeBytes(nb)
		var ze *Error
		if !errors.As(err, &ze) || !strings.Contains(err.Error(), "manifest version") {
			t.Fatalf("version %q: %v, want a *Error about the manifest version", v, err)
		}
		if p, ok := testutil.EchoesEvil(err.Error()); ok {
			t.Errorf("version %q: error quotes it (%q): %v", v, p, err)
		}
		if strings.Contains(v, ".") && strings.Contains(err.Error(), v) {
			t.Errorf("version %q: error quotes it: %v", v, err)
		}
	}
}
