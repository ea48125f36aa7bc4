package dcp

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParseMetadata: any .metadata bytes parse without panicking, within
// bounds; what parses re-encodes (encodeMetadata) to a pickle that parses
// to the same Metadata. Seeds: torch 2.6's own .metadata files (one
// process, two ranks) and one snapd writes.
func FuzzParseMetadata(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/metadata/*.metadata")
	if len(seeds) == 0 {
		f.Fatal("no seeds in testdata/metadata")
	}
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	dir := f.TempDir()
	writeLayout(f, filepath.Join(dir, "w"), stateDict(f), mesh(2, 2), 3)
	b, err := os.ReadFile(filepath.Join(dir, "w", metadataName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	lim := Limits{MaxItems: 1000, MaxChunks: 10000, MaxRank: 8, MaxCells: 1 << 16}
	f.Fuzz(func(t *testing.T, b []byte) {
		md, err := ParseMetadata(context.Background(), b, "fuzz/.metadata", lim)
		if err != nil {
			return
		}
		again, err := ParseMetadata(context.Background(), encodeMetadata(md, "fuzz"), "fuzz/.metadata", lim)
		if err != nil {
			t.Fatalf("re-encoded metadata does not parse: %v", err)
		}
		normalise(md)
		normalise(again)
		if !reflect.DeepEqual(md, again) {
			t.Fatalf("re-encoded metadata parses differently")
		}
	})
}

// normalise makes planner data explicit (the writer fills the trivial
// path of an FQN the file's planner data leaves out).
func normalise(md *Metadata) {
	if md.PlannerData == nil {
		md.PlannerData = map[string][]PathElem{}
	}
	for _, it := range md.Items {
		if _, ok := md.PlannerData[it.FQN]; !ok {
			md.PlannerData[it.FQN] = []PathElem{{Str: it.FQN}}
		}
	}
}
