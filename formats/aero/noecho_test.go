package aero

import (
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestTypedJSONErrorsNeverEcho: typed JSON comes from attributes of a
// (hostile) source file. Its key and number errors say what is wrong
// without quoting the key or the number.
func TestTypedJSONErrorsNeverEcho(t *testing.T) {
	big := "1" + strings.Repeat("0", 30) // digits only: the length stands for the value
	for _, evil := range []string{testutil.EvilMarker, testutil.EvilMarkerEsc} {
		q := strings.ReplaceAll(evil, "\x1b", `\u001b`)
		for name, in := range map[string]string{
			"special key first":  `{"$` + q + `":1,"b":2}`,
			"special key second": `{"a":1,"$` + q + `":2}`,
			"unknown special":    `{"$` + q + `":1}`,
			"duplicate key":      `{"` + q + `":1,"` + q + `":2}`,
			"float":              `1e99999` + strings.Repeat("9", len(evil)),
			"integer":            big,
			"negative":           "-" + big,
		} {
			_, err := fromTypedJSON(in)
			if err == nil {
				t.Fatalf("%s: accepted", name)
			}
			if p, ok := testutil.EchoesEvil(err.Error()); ok {
				t.Errorf("%s: error quotes the key (%q): %v", name, p, err)
			}
			if strings.Contains(err.Error(), big) || strings.Contains(err.Error(), "99999") {
				t.Errorf("%s: error quotes the number: %v", name, err)
			}
			if !strings.HasPrefix(err.Error(), "typed JSON: ") {
				t.Errorf("%s: %v does not say where", name, err)
			}
		}
	}
}
