package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

func readDeltaFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "delta", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInspectDelta: inspect reads both DELTA v2 forms (made by snapd
// delta make / by hand, and applied by snapd delta apply) and says what
// they carry, in text and JSON.
func TestInspectDelta(t *testing.T) {
	full := filepath.Join("testdata", "delta", "full.wtxtdelta")
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
	code, out, _ = snapd(t, nil, "inspect", filepath.Join("testdata", "delta", "short.wtxtdelta"))
	if code != 0 || !strings.Contains(out, "(short form), 1 arrays, 1 chunks carried (256 raw bytes)") || !strings.Contains(out, "1: 3") {
		t.Fatalf("short: %d\n%s", code, out)
	}
}

// TestDeltaInfoHostile: damaged deltas fail with a *wtxt.Error naming the
// line (and array/chunk where there is one) and never quote the file.
func TestDeltaInfoHostile(t *testing.T) {
	full := string(readDeltaFixture(t, "full.wtxtdelta"))
	const marker = "SECRET-CONTENT-7f3a"
	lines := strings.SplitAfter(full, "\n")
	chLine := 0
	for i, l := range lines {
		if strings.HasPrefix(l, "ch ix=000003") {
			chLine = i
		}
	}
	repl := func(i int, s string) string {
		c := append([]string(nil), lines...)
		c[i] = s
		return strings.Join(c, "")
	}
	for _, tc := range []struct {
		name, in string
		line     int
		check    wtxt.Check
		array    string
		chunk    int64
	}{
		{"empty", "", 1, wtxt.CheckTruncated, "", -1},
		{"magic", "WTXT 1\n" + marker + "\n", 1, wtxt.CheckDelta, "", -1},
		{"bad base", "WTXT-DELTA 2 base_sha256_all=" + marker + "\n", 1, wtxt.CheckDelta, "", -1},
		{"no LF", strings.TrimSuffix(full, "\n"), len(lines) - 1, wtxt.CheckTruncated, "", -1},
		{"truncated in chunk", strings.Join(lines[:chLine+3], ""), chLine + 4, wtxt.CheckTruncated, "w", 3},
		{"unknown line", repl(2, marker+" x=1\n"), 3, wtxt.CheckDelta, "", -1},
		{"non-ascii", repl(2, "meta \x01"+marker+"\n"), 3, wtxt.CheckText, "", -1},
		{"long line", repl(2, strings.Repeat("m", deltaMaxLine+10)+"\n"), 3, wtxt.CheckDelta, "", -1},
		{"out of order", repl(chLine, strings.Replace(lines[chLine], "ix=000003", "ix=000000", 1)), chLine + 1, wtxt.CheckDelta, "w", 0},
		{"too many lines", repl(chLine, strings.Replace(lines[chLine], "lines=5", "lines=999999999999", 1)), chLine + 1, wtxt.CheckDelta, "w", 3},
		{"missing endch", repl(chLine+6, "endarr\n"), chLine + 7, wtxt.CheckDelta, "w", 3},
		{"after enddelta", full + marker + "\n", len(lines), wtxt.CheckDelta, "", -1},
		{"duplicate array", strings.Replace(full, "arr name=w ", "arr name=b ", 1), 0, wtxt.CheckDelta, "b", -1},
		{"bad gen", strings.Replace(full, "gen=000008", "gen=8x", 1), 2, wtxt.CheckDelta, "", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readDeltaInfo(context.Background(), "x.wtxtdelta", strings.NewReader(tc.in))
			var we *wtxt.Error
			if !errors.As(err, &we) {
				t.Fatalf("error %v (%T), want *wtxt.Error", err, err)
			}
			if we.Check != tc.check || (tc.line != 0 && we.Line != tc.line) || we.Array != tc.array || we.Chunk != tc.chunk || we.File != "x.wtxtdelta" {
				t.Fatalf("error %+v, want line %d check %s array %q chunk %d", we, tc.line, tc.check, tc.array, tc.chunk)
			}
			if strings.Contains(err.Error(), marker) || strings.Contains(err.Error(), "mmmm") {
				t.Fatalf("error quotes the file: %v", err)
			}
		})
	}
	// A file that is not a delta is not read as one by inspect.
	if isDelta([]byte("WTXT 1\n")) || !isDelta([]byte(full)) {
		t.Fatal("isDelta")
	}
}

// FuzzDeltaInfo: any input gives a result or a *wtxt.Error, never a
// panic; a result's totals agree with its arrays.
func FuzzDeltaInfo(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "delta", "*.wtxtdelta"))
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seeds: %v", err)
	}
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := readDeltaInfo(context.Background(), "f", bytes.NewReader(data))
		if err != nil {
			var we *wtxt.Error
			if !errors.As(err, &we) {
				t.Fatalf("error %v is not a *wtxt.Error", err)
			}
			return
		}
		var n, sum int64
		for _, a := range info.Arrays {
			n += int64(len(a.Carried))
			sum += a.CarriedBytes
		}
		if n != info.Chunks || sum != info.ChunkBytes || info.Bytes != int64(len(data)) {
			t.Fatalf("totals disagree: %+v", info)
		}
	})
}
