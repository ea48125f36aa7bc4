package fold

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestNPYHeaderErrorsNeverEcho: a .npy member's header dict is hostile
// input; an unknown key or a bad dimension is refused without quoting it.
func TestNPYHeaderErrorsNeverEcho(t *testing.T) {
	npy := func(dict string) []byte {
		b := append([]byte("\x93NUMPY\x01\x00"), 0, 0)
		binary.LittleEndian.PutUint16(b[8:], uint16(len(dict)))
		return append(b, dict...)
	}
	for _, evil := range []string{testutil.EvilMarker, testutil.EvilMarkerEsc} {
		for name, dict := range map[string]string{
			"key":       "{'" + evil + "': 1, 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
			"dimension": "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999" + strings.Repeat("9", 3) + ",)}",
		} {
			_, err := parseNPYHeader(npy(dict))
			if err == nil {
				t.Fatalf("%s: accepted", name)
			}
			if p, ok := testutil.EchoesEvil(err.Error()); ok {
				t.Errorf("%s: error quotes the header (%q): %v", name, p, err)
			}
			if strings.Contains(err.Error(), "99999") {
				t.Errorf("%s: error quotes the dimension: %v", name, err)
			}
			if !strings.HasPrefix(err.Error(), ".npy header: ") {
				t.Errorf("%s: %v does not say where", name, err)
			}
		}
	}
	// The length field is not printed either.
	b := npy("{}")
	b[6] = 2
	b = append(b, 0, 0)
	copy(b[8:12], "EVIL")
	if _, err := parseNPYHeader(b); err == nil || strings.Contains(err.Error(), fmt.Sprint(binary.LittleEndian.Uint32([]byte("EVIL")))) {
		t.Errorf("length field: %v", err)
	}
}
