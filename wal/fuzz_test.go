package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// readSealedSegment reads data as a sealed segment 1 and returns the
// records, the corruptions and the total bytes the reader accounted for.
func readSealedSegment(t *testing.T, data []byte) ([]Record, []*CorruptError) {
	t.Helper()
	dir := t.TempDir()
	p := segPath(dir, 1)
	if err := os.WriteFile(p, data, modeSealed); err != nil {
		t.Fatal(err)
	}
	var corrupt []*CorruptError
	r := NewReader(dir, Pos{}, ReaderOptions{OnCorrupt: func(ce *CorruptError) { corrupt = append(corrupt, ce) }})
	defer r.Close()
	var recs []Record
	for r.Next() {
		recs = append(recs, r.Record())
	}
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	return recs, corrupt
}

// The checked-in vector: 2 good records, a bad CRC, garbage, a torn
// fragment glued to a good record, an empty line, a torn tail.
func TestSegmentVectors(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "mixed.wal"))
	if err != nil {
		t.Fatal(err)
	}
	recs, corrupt := readSealedSegment(t, data)
	if fmt.Sprint(gensOf(recs)) != "[1 2 5]" || len(corrupt) != 4 {
		t.Fatalf("records %v corrupt %v", gensOf(recs), corrupt)
	}
	if recs[1].Source != "/data/with space/gen-000002.zt" || recs[2].Source != "/p%q" {
		t.Fatalf("sources %q %q", recs[1].Source, recs[2].Source)
	}
	reasons := []string{"crc32c mismatch", "", "torn or garbage bytes before record", "torn last line of sealed segment"}
	for i, want := range reasons {
		if !contains(corrupt[i].Reason, want) {
			t.Errorf("corruption %d: %q, want %q", i, corrupt[i].Reason, want)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}

// FuzzReader: any segment content reads without panic or error; every
// record is exactly its canonical encoding at its position, and records,
// skipped runs and empty lines account for every byte.
func FuzzReader(f *testing.F) {
	for _, b := range testutil.Seeds(f, filepath.Join("testdata", "*.wal")) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		recs, corrupt := readSealedSegment(t, data)
		covered := make([]bool, len(data))
		mark := func(off, n int64, what string) {
			if off < 0 || n <= 0 || off+n > int64(len(data)) {
				t.Fatalf("%s: range %d+%d outside %d bytes", what, off, n, len(data))
			}
			for i := off; i < off+n; i++ {
				if covered[i] {
					t.Fatalf("%s: byte %d accounted twice", what, i)
				}
				covered[i] = true
			}
		}
		for _, r := range recs {
			line, err := r.AppendLine(nil)
			if err != nil {
				t.Fatalf("record %+v does not re-encode: %v", r.Request, err)
			}
			n := r.End.Offset - r.Pos.Offset
			if int64(len(line)) != n || string(data[r.Pos.Offset:r.End.Offset]) != string(line) {
				t.Fatalf("record at %v is not its canonical line", r.Pos)
			}
			mark(r.Pos.Offset, n, "record")
		}
		for _, c := range corrupt {
			mark(c.Offset, c.Length, "corrupt")
		}
		for i, ok := range covered {
			if !ok && data[i] != '\n' {
				t.Fatalf("byte %d (%q) neither record nor skipped", i, data[i])
			}
		}
	})
}
