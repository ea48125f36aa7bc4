package armor

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestSealErrorsNeverEcho puts a hostile value in each field of a signed
// seal: ParseSeal refuses it naming the field and the grammar check, and
// never quotes the value.
func TestSealErrorsNeverEcho(t *testing.T) {
	b, err := os.ReadFile("testdata/signed.wseal")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSuffix(string(b), "\n")
	f := strings.Split(line, " ")
	for i := 2; i < len(f); i++ {
		key, _, _ := strings.Cut(f[i], "=")
		for _, evil := range []string{testutil.EvilMarker, testutil.EvilMarkerEsc, evilPad(testutil.EvilMarker, 16), evilPad(testutil.EvilMarker, 64)} {
			g := append([]string(nil), f...)
			g[i] = key + "=" + evil
			_, err := ParseSeal([]byte(strings.Join(g, " ") + "\n"))
			var se *SealError
			if err == nil {
				t.Fatalf("%s=%q accepted", key, evil)
			}
			if p, ok := testutil.EchoesEvil(err.Error()); ok {
				t.Errorf("%s: error quotes the value (%q): %v", key, p, err)
			}
			if !errors.As(err, &se) || se.Check != "grammar" {
				t.Errorf("%s: %v, want a grammar SealError", key, err)
				continue
			}
			if !strings.ContainsRune(evil, 0x1b) && !strings.Contains(se.Msg, key) {
				t.Errorf("%s: %v does not name the field", key, err)
			}
		}
		// A field whose key is hostile.
		g := append([]string(nil), f...)
		g[i] = testutil.EvilMarker + "=1"
		if _, err := ParseSeal([]byte(strings.Join(g, " ") + "\n")); err == nil {
			t.Fatalf("field %d with a hostile key accepted", i-1)
		} else if p, ok := testutil.EchoesEvil(err.Error()); ok {
			t.Errorf("field %d key: error quotes it (%q): %v", i-1, p, err)
		}
	}
}

// evilPad repeats s up to n bytes (hex and keyid fields check lengths
// first).
func evilPad(s string, n int) string {
	return strings.Repeat(s, n/len(s)+1)[:n]
}
