package review

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// naiveIndex lists "array#ix@line" by reading every line.
func naiveIndex(b []byte) []string {
	var out []string
	cur := ""
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "arr name="):
			cur = strings.Fields(l)[1][len("name="):]
		case strings.HasPrefix(l, "ch ix="):
			var ix int
			fmt.Sscanf(l, "ch ix=%d", &ix)
			out = append(out, fmt.Sprintf("%s#%d@%d", cur, ix, i+1))
		}
	}
	return out
}

func TestReadIndex(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.wtxt")
	if len(files) == 0 {
		t.Fatal("no testdata/*.wtxt")
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		x, err := wtxt.ReadIndex(context.Background(), p, snapshot.Bytes(b), int64(len(b)))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		var got []string
		for _, a := range x.Arrays {
			for _, c := range a.Chunks {
				got = append(got, fmt.Sprintf("%s#%d@%d", a.Name, c.IX, c.Line))
			}
		}
		if want := naiveIndex(b); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s:\n got %v\nwant %v", p, got, want)
		}
		if a := x.Array("layer.0/w"); a == nil || a.RowsPerChunk != 8 || a.RowSize != 32 || len(a.Chunks) != 8 {
			t.Fatalf("%s: layer.0/w entry %+v", p, a)
		}
		// Cut inside a chunk's base64: an error naming the chunk.
		i := bytes.Index(b, []byte("\nch ix=000003 off=000000000768"))
		if _, err := wtxt.ReadIndex(context.Background(), p, snapshot.Bytes(b[:i+200]), int64(i+200)); err == nil || !strings.Contains(err.Error(), "chunk 3") {
			t.Fatalf("truncated: %v", err)
		}
	}
	for name, in := range map[string]string{
		"ch outside":  "WTXT 1\nch ix=000000 off=000000000000 len=3\n",
		"dup":         "arr name=a\nendarr\narr name=a\n",
		"bad ch":      "arr name=a\nch ix=x off=0 len=1\n",
		"long line":   "arr name=" + strings.Repeat("a", 70<<10) + "\n",
		"idx outside": "idx rows_per_chunk=1\n",
	} {
		if _, err := wtxt.ReadIndex(context.Background(), name, snapshot.Bytes(in), int64(len(in))); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func FuzzReadIndex(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.wtxt")
	if len(files) == 0 {
		f.Fatal("no testdata/*.wtxt seeds")
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := wtxt.ReadIndex(context.Background(), "fuzz", snapshot.Bytes(b), int64(len(b)))
		if err != nil {
			return
		}
		for i := range x.Arrays {
			a := &x.Arrays[i]
			if x.Array(a.Name) == nil {
				t.Fatalf("array %q not indexed", a.Name)
			}
			for _, c := range a.Chunks {
				if c.Line <= a.Line {
					t.Fatalf("chunk line %d before its arr line %d", c.Line, a.Line)
				}
			}
		}
	})
}
