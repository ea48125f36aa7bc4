package oci

import (
	"os"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestParseConfigNeverEchoes: a config blob comes from the registry
// (hostile). An unknown field, a stray character or a wrong type is
// refused naming where, never quoting the blob.
func TestParseConfigNeverEchoes(t *testing.T) {
	good, err := os.ReadFile("testdata/config-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	s := string(good)
	for _, evil := range []string{testutil.EvilMarker, strings.ReplaceAll(testutil.EvilMarkerEsc, "\x1b", `\u001b`)} {
		for name, b := range map[string]string{
			"unknown field": strings.Replace(s, `{"schema"`, `{"`+evil+`":1,"schema"`, 1),
			"syntax":        strings.Replace(s, `{"schema"`, `{`+evil+`"schema"`, 1),
			"type":          strings.Replace(s, `"gen":"000042"`, `"gen":["`+evil+`"]`, 1),
			"schema":        strings.Replace(s, `"schema":"snapd.wtxt.segments/v1"`, `"schema":"`+evil+`"`, 1),
			"digest":        strings.Replace(s, `"digest":"sha256:01`, `"digest":"`+evil+`:01`, 1),
		} {
			if b == s {
				t.Fatalf("%s: fixture changed, nothing replaced", name)
			}
			_, err := ParseConfig([]byte(b))
			if err == nil {
				t.Fatalf("%s: accepted", name)
			}
			if !strings.HasPrefix(err.Error(), "config blob: ") {
				t.Errorf("%s: %v does not say where", name, err)
			}
			if p, ok := testutil.EchoesEvil(err.Error()); ok {
				t.Errorf("%s: error quotes the blob (%q): %v", name, p, err)
			}
		}
	}
}
