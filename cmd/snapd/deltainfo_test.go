package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// deltaTestdata holds the DELTA v2 fixtures formats/wtxt reads in its
// tests.
var deltaTestdata = filepath.Join("..", "..", "formats", "wtxt", "testdata", "delta")

func readDeltaFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deltaTestdata, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInspectDelta: inspect reads both DELTA v2 forms (made by snapd
// delta make / by hand, and applied by snapd delta apply) and says what
// they carry, in text and JSON.
func TestInspectDelta(t *testing.T) {
	full := filepath.Join(deltaTestdata, "full.wtxtdelta")
	code, out, errs := snapd(t, nil, "inspect", full)
	if code != 0 {
		t.Fatalf("inspect: %d %s", code, errs)
	}
	for _, want := range []string{"DELTA v2 (full form), 2 arrays, 2 chunks carried (512 raw bytes), 2092 bytes",
		"base:        sha256_all 2e92aec04b34f3123eb272b11802b333cc0ee26defee6617e3487866661bf3f0", "gen:         000008",
		"b     f32    (3)     12     none (unchanged)", "w     f32    (64×4)  1024   2: 0,3"} {
		if !strings.Contains(out, want) {
			t.Fatalf("inspect lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = snapd(t, nil, "inspect", "--json", full)
	var j struct {
		Format, Form  string
		BaseSHA256All string         `json:"base_sha256_all"`
		Meta          map[string]any `json:"meta"`
		Arrays        []struct {
			Name         string
			Carried      []int64 `json:"carried"`
			CarriedBytes int64   `json:"carried_bytes"`
		}
		Chunks int64 `json:"chunks_carried"`
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil || code != 0 {
		t.Fatalf("%v: %s", err, out)
	}
	if j.Format != "wtxt-delta" || j.Form != "full" || j.Meta["gen"] != float64(8) || j.Meta["gen_text"] != "000008" || j.Chunks != 2 ||
		len(j.Arrays) != 2 || len(j.Arrays[0].Carried) != 0 || j.Arrays[1].Name != "w" || j.Arrays[1].CarriedBytes != 512 {
		t.Fatalf("json %+v", j)
	}
	code, out, _ = snapd(t, nil, "inspect", filepath.Join(deltaTestdata, "short.wtxtdelta"))
	if code != 0 || !strings.Contains(out, "(short form), 1 arrays, 1 chunks carried (256 raw bytes)") || !strings.Contains(out, "1: 3") {
		t.Fatalf("short: %d\n%s", code, out)
	}
}

// TestInspectDeltaErrors: inspect reports a damaged delta with the
// *wtxt.Error wtxt.ReadDeltaStructure gives (the grammar's cases are its
// tests, formats/wtxt/deltainfo_test.go), without quoting the file.
func TestInspectDeltaErrors(t *testing.T) {
	const marker = "SECRET-CONTENT-7f3a"
	full := string(readDeltaFixture(t, "full.wtxtdelta"))
	p := filepath.Join(t.TempDir(), "bad.wtxtdelta")
	if err := os.WriteFile(p, []byte(strings.Replace(full, "ix=000003", "ix=000000", 1)+marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := snapd(t, nil, "inspect", p)
	if code != 1 || !strings.Contains(errs, "bad.wtxtdelta:17: array w: chunk 0: delta: chunks out of order or repeated") || strings.Contains(errs+out, marker) {
		t.Fatalf("inspect: %d\n%s%s", code, out, errs)
	}
	if isDelta([]byte("WTXT 1\n")) || !isDelta([]byte(full)) {
		t.Fatal("isDelta")
	}
}
