package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiffPictureCLI: `snapd diff --svg/--html` writes a well-formed,
// deterministic picture naming the changed rows, beside the usual output
// and exit status; a bad --scale is a usage error that writes nothing.
func TestDiffPictureCLI(t *testing.T) {
	dir := t.TempDir()
	va, vb := make([]float64, 100), make([]float64, 100)
	for i := range va {
		va[i], vb[i] = float64(i), float64(i)
	}
	vb[10], vb[50] = 1e6, -3
	a, b := writeF64(t, dir, "a.safetensors", va), writeF64(t, dir, "b.safetensors", vb)
	svg, page := filepath.Join(dir, "d.svg"), filepath.Join(dir, "d.html")
	var first []byte
	for range 2 {
		code, out, errs := snapd(t, nil, "diff", "--svg", svg, "--html", page, "--scale", "rel", a, b)
		if code != 1 || !strings.Contains(out, "w: 2 of 100 elements in rows 10,50") {
			t.Fatalf("exit %d\n%s\n%s", code, out, errs)
		}
		got, err := os.ReadFile(svg)
		if err != nil {
			t.Fatal(err)
		}
		if first != nil && !bytes.Equal(first, got) {
			t.Fatal("two runs drew different pictures")
		}
		first = got
	}
	text := xmlText(t, first)
	for _, want := range []string{"a.safetensors → ", "changed 2 of 100 rows", "rows 10: 1 changed", "rows 50: 1 changed", "1 of 1 arrays changed"} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in the picture's text:\n%s", want, text)
		}
	}
	h, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(h, first[:len(first)-1]) || !bytes.Contains(h, []byte("<td>w</td><td>modified</td>")) {
		t.Fatalf("HTML page lacks the picture or the table:\n%s", h)
	}
	bad := filepath.Join(dir, "bad.svg")
	if code, _, errs := snapd(t, nil, "diff", "--svg", bad, "--scale", "log", a, b); code != 2 || !strings.Contains(errs, `--scale "log"`) {
		t.Fatalf("bad scale: exit %d %s", code, errs)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Fatal("a usage error wrote the picture")
	}
}

func xmlText(t *testing.T, doc []byte) string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	var b strings.Builder
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return b.String()
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		if c, ok := tok.(xml.CharData); ok {
			b.Write(c)
			b.WriteByte('\n')
		}
	}
}
