package wtxt

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

func readDeltaFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "delta", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReadDeltaStructure: both DELTA v2 forms of testdata/delta (the
// profile form snapd delta make writes, the seed's short form) read to
// their base, header, arrays and carried chunks.
func TestReadDeltaStructure(t *testing.T) {
	full := readDeltaFixture(t, "full.wtxtdelta")
	s, err := ReadDeltaStructure(context.Background(), "full.wtxtdelta", bytes.NewReader(full))
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(s.BaseSHA256All[:]) != "2e92aec04b34f3123eb272b11802b333cc0ee26defee6617e3487866661bf3f0" || s.Short ||
		s.Header == nil || s.Header.Gen != "000008" || s.Header.Meta.Gen != 8 || s.Header.Pending || s.Audit != "" ||
		s.Chunks != 2 || s.ChunkBytes != 512 || s.Size != int64(len(full)) || len(s.Arrays) != 2 {
		t.Fatalf("full: %+v", s)
	}
	b, w := s.Arrays[0], s.Arrays[1]
	if b.Name != "b" || b.DType != snapshot.F32 || len(b.Shape) != 1 || b.Shape[0] != 3 || b.Bytes != 12 || len(b.Carried) != 0 || b.Carried == nil || b.Line != 5 {
		t.Fatalf("array b: %+v", b)
	}
	if w.Name != "w" || w.Bytes != 1024 || len(w.Carried) != 2 || w.Carried[0] != 0 || w.Carried[1] != 3 || w.CarriedBytes != 512 || w.Line != 8 {
		t.Fatalf("array w: %+v", w)
	}
	short := readDeltaFixture(t, "short.wtxtdelta")
	s, err = ReadDeltaStructure(context.Background(), "short.wtxtdelta", bytes.NewReader(short))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Short || s.Header != nil || len(s.Arrays) != 1 || s.Arrays[0].Name != "w" || s.Arrays[0].DType != snapshot.Invalid ||
		len(s.Arrays[0].Carried) != 1 || s.Arrays[0].Carried[0] != 3 || s.Chunks != 1 || s.ChunkBytes != 256 || s.Size != int64(len(short)) {
		t.Fatalf("short: %+v", s)
	}
	// No header and no arrays: the short form, as ApplyDelta applies it.
	empty := "WTXT-DELTA 2 base_sha256_all=" + strings.Repeat("0", 64) + "\nenddelta\n"
	if s, err = ReadDeltaStructure(context.Background(), "empty", strings.NewReader(empty)); err != nil || !s.Short || len(s.Arrays) != 0 || s.Size != int64(len(empty)) {
		t.Fatalf("empty: %v %+v", err, s)
	}
	if !IsDelta(full) || !IsDelta(short) || IsDelta([]byte("WTXT 1\n")) || IsDelta([]byte(DeltaMagic)) {
		t.Fatal("IsDelta")
	}
}

// TestReadDeltaStructureMade: what MakeDelta writes (signed and streamed
// targets) reads back as the chunks it says it carried, with the target's
// header.
func TestReadDeltaStructureMade(t *testing.T) {
	R := randArray(1, "R", snapshot.F64, 4096, 64)
	v := randArray(2, "v", snapshot.F32, 100)
	bdata, bres := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{R, v}}, EncodeOptions{})
	for _, o := range []EncodeOptions{{SignKey: testKey(3)}, {Stream: true}} {
		o.PrevMerkle = bres.MerkleThis
		tdata, _ := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{setRows(R, 1, 5, 700, 701), v}}, o)
		delta, info := makeDelta(t, bdata, tdata)
		s, err := ReadDeltaStructure(context.Background(), "made", bytes.NewReader(delta))
		if err != nil {
			t.Fatal(err)
		}
		th, err := ReadHeader(bytes.NewReader(tdata))
		if err != nil {
			t.Fatal(err)
		}
		if s.Chunks != info.Changed || s.Chunks != 2 || len(s.Arrays) != info.Arrays || s.BaseSHA256All != info.BaseSHA256All || s.Short ||
			s.Header == nil || !bytes.Equal(s.Header.Signed, th.Signed) || s.Header.Root != th.Root || s.Header.Pending != o.Stream ||
			!bytes.Equal(s.Header.Signature, th.Signature) || s.Size != int64(len(delta)) || s.Arrays[0].Name != "R" || len(s.Arrays[1].Carried) != 0 {
			t.Fatalf("structure %+v, made %+v", s, info)
		}
		// A line after the header lines that is none of arr, audit or
		// enddelta: both readers refuse it at its line (ApplyDelta once
		// copied it into the target, for the output's verification to find).
		ls := bytes.SplitAfter(delta, []byte("\n"))
		hl := 1 + th.Lines - 1 // the delta's header lines: no "WTXT 1"
		bad := bytes.Join(append(append(append([][]byte{}, ls[:hl+1]...), []byte("idx rows_per_chunk=1 row_size=4 row_blocking=on\n")), ls[hl+1:]...), nil)
		_, rerr := ReadDeltaStructure(context.Background(), "bad", bytes.NewReader(bad))
		_, _, aerr := applyDelta(bdata, bad)
		for _, err := range []error{rerr, aerr} {
			var e *Error
			if !errors.As(err, &e) || e.Check != CheckDelta || e.Line != hl+2 {
				t.Fatalf("header with an idx line: %v, want a delta error at line %d", err, hl+2)
			}
		}
	}
}

// TestReadDeltaStructureHostile: damaged deltas fail with an *Error naming
// the line (and array/chunk where there is one) and never quote the file.
func TestReadDeltaStructureHostile(t *testing.T) {
	full := string(readDeltaFixture(t, "full.wtxtdelta"))
	short := string(readDeltaFixture(t, "short.wtxtdelta"))
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
		check    Check
		array    string
		chunk    int64
	}{
		{"empty", "", 1, CheckTruncated, "", -1},
		{"magic", "WTXT 1\n" + marker + "\n", 1, CheckDelta, "", -1},
		{"bad base", "WTXT-DELTA 2 base_sha256_all=" + marker + "\n", 1, CheckDelta, "", -1},
		{"no LF", strings.TrimSuffix(full, "\n"), len(lines) - 1, CheckText, "", -1},
		{"truncated in header", strings.Join(lines[:3], ""), 4, CheckTruncated, "", -1},
		{"truncated in array", strings.Join(lines[:6], ""), 7, CheckTruncated, "b", -1},
		{"truncated in chunk", strings.Join(lines[:chLine+3], ""), chLine + 4, CheckTruncated, "w", 3},
		{"unknown line", repl(2, marker+" x=1\n"), 3, CheckDelta, "", -1},
		{"non-ascii", repl(2, "meta \x01"+marker+"\n"), 3, CheckText, "", -1},
		{"long line", repl(2, strings.Repeat("m", MaxLineLen+10)+"\n"), 3, CheckText, "", -1},
		{"out of order", repl(chLine, strings.Replace(lines[chLine], "ix=000003", "ix=000000", 1)), chLine + 1, CheckDelta, "w", 0},
		{"geometry", repl(chLine, strings.Replace(lines[chLine], "off=000000000768", "off=000000000512", 1)), chLine + 1, CheckDelta, "w", 3},
		{"beyond the array", repl(chLine, strings.Replace(lines[chLine], "ix=000003", "ix=000004", 1)), chLine + 1, CheckDelta, "w", -1},
		{"too many lines", repl(chLine, strings.Replace(lines[chLine], "lines=5", "lines=999999999999", 1)), chLine + 1, CheckDelta, "w", 3},
		{"missing endch", repl(chLine+6, "endarr\n"), chLine + 7, CheckDelta, "w", 3},
		{"endch early", repl(chLine+5, "endch\n"), chLine + 6, CheckDelta, "w", 3},
		{"after enddelta", full + marker + "\n", len(lines), CheckDelta, "", -1},
		{"duplicate array", strings.Replace(full, "arr name=w ", "arr name=b ", 1), 0, CheckDelta, "b", -1},
		{"bad gen", strings.Replace(full, "gen=000008", "gen=8x", 1), 2, CheckDelta, "", -1},
		{"idx in the header", repl(3, lines[3]+lines[5]), 5, CheckDelta, "", -1},
		{"five header lines", repl(3, lines[3]+lines[3]+lines[3]), 6, CheckDelta, "", -1},
		{"short after header", strings.Replace(full, "enddelta\n", "arr name=q\nendarr\nenddelta\n", 1), len(lines) - 1, CheckDelta, "", -1},
		{"full after short", strings.Replace(short, "enddelta\n", lines[4]+"endarr\nenddelta\n", 1), 0, CheckDelta, "", -1},
		{"short bad name", strings.Replace(short, "arr name=w", "arr name=w\"", 1), 2, CheckDelta, "", -1},
		{"short lines", strings.Replace(short, "lines=5", "lines=4", 1), 3, CheckDelta, "w", 3},
		{"full without header", "WTXT-DELTA 2 base_sha256_all=" + strings.Repeat("0", 64) + "\n" + strings.Join(lines[4:], ""), 2, CheckDelta, "", -1},
		{"short audit", strings.Replace(short, "enddelta\n", "audit x=1\nenddelta\n", 1), 0, CheckDelta, "", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadDeltaStructure(context.Background(), "x.wtxtdelta", strings.NewReader(tc.in))
			var we *Error
			if !errors.As(err, &we) {
				t.Fatalf("error %v (%T), want *Error", err, err)
			}
			if we.Check != tc.check || (tc.line != 0 && we.Line != tc.line) || we.Array != tc.array || we.Chunk != tc.chunk || we.File != "x.wtxtdelta" {
				t.Fatalf("error %+v, want line %d check %s array %q chunk %d", we, tc.line, tc.check, tc.array, tc.chunk)
			}
			if strings.Contains(err.Error(), marker) || strings.Contains(err.Error(), "mmmm") {
				t.Fatalf("error quotes the file: %v", err)
			}
		})
	}
}

// FuzzReadDeltaStructure: any input gives a structure or an *Error, never
// a panic; a structure's totals agree with its arrays, and what it accepts
// it accepts again unchanged.
func FuzzReadDeltaStructure(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "delta", "*.wtxtdelta"))
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seeds: %v", err)
	}
	for _, s := range seeds {
		f.Add(readDeltaFixture(f, filepath.Base(s)))
	}
	fixed := append(fixedTexts(), testutil.SourceTexts(f, ".")...)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ReadDeltaStructure(context.Background(), "f", bytes.NewReader(data))
		if err != nil {
			var we *Error
			if !errors.As(err, &we) {
				t.Fatalf("error %v is not a *Error", err)
			}
			if run, ok := testutil.EchoedRun(err.Error(), data, fixed...); ok {
				t.Fatalf("error echoes the input run %q: %v", run, err)
			}
			return
		}
		var n, sum int64
		for _, a := range s.Arrays {
			n += int64(len(a.Carried))
			sum += a.CarriedBytes
		}
		if n != s.Chunks || sum != s.ChunkBytes || s.Size != int64(len(data)) || (s.Short && s.Header != nil) {
			t.Fatalf("totals disagree: %+v", s)
		}
	})
}
