package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestFixedPointThroughWTXT: for every fixture of every container format
// (the shared reference fixtures and each codec's testdata), X -> WTXT ->
// X -> WTXT gives the same WTXT byte for byte. A reader that stores a
// diagnostic (e.g. an ECC report) as data breaks this.
func TestFixedPointThroughWTXT(t *testing.T) {
	var files []string
	for _, pat := range []string{
		filepath.Join(fixtures, "ztensor/*.zt"), filepath.Join(fixtures, "fold/*.fold"), filepath.Join(fixtures, "fold/*.mind"),
		filepath.Join(fixtures, "aero/*.aero"), filepath.Join(fixtures, "stb/*.stb"),
		"../../formats/*/testdata/*.zt", "../../formats/*/testdata/*.fold", "../../formats/*/testdata/*.mind",
		"../../formats/*/testdata/*.aero", "../../formats/*/testdata/*.stb", "../../formats/*/testdata/*.safetensors",
	} {
		m, _ := filepath.Glob(pat)
		files = append(files, m...)
	}
	if len(files) < 15 {
		t.Fatalf("found only %d fixtures", len(files))
	}
	seen := map[string]bool{}
	for _, in := range files {
		b, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		if seen[string(b)] {
			continue // the same bytes under another directory
		}
		seen[string(b)] = true
		t.Run(filepath.Base(filepath.Dir(in))+"/"+filepath.Base(in), func(t *testing.T) {
			d := t.TempDir()
			w1 := filepath.Join(d, "1.wtxt")
			x2 := filepath.Join(d, "2"+filepath.Ext(in))
			w2 := filepath.Join(d, "2.wtxt")
			mustRun(t, "convert", in, w1, "--ts", "2026-01-01T00:00:00Z")
			mustRun(t, "convert", w1, x2)
			mustRun(t, "convert", x2, w2, "--ts", "2026-01-01T00:00:00Z")
			a, _ := os.ReadFile(w1)
			c, _ := os.ReadFile(w2)
			if !bytes.Equal(a, c) {
				t.Fatalf("X -> WTXT -> X -> WTXT is not a fixed point: the two WTXT files differ (%d vs %d bytes)", len(a), len(c))
			}
		})
	}
}
