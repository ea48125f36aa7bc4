package wtxt

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestSkeletonKeys: the keys read back from a skeleton are the ones
// SplitIndexed computed while writing it, for every fixture; a skeleton
// whose seg lines do not cover its chunks fails with a located error.
func TestSkeletonKeys(t *testing.T) {
	seeds, _ := filepath.Glob("testdata/golden-*.wtxt")
	if len(seeds) == 0 {
		t.Fatal("no fixtures")
	}
	ctx := context.Background()
	for _, p := range seeds {
		in, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var skel bytes.Buffer
		segs, keys, err := SplitIndexed(ctx, bytes.NewReader(in), int64(len(in)), &skel, nil, nil, SplitOptions{SegmentSize: 200})
		if err != nil {
			t.Fatal(err)
		}
		got, err := SkeletonKeys(ctx, skel.Bytes(), filepath.Base(p))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(segs) {
			t.Fatalf("%s: %d keys for %d segments", p, len(got), len(segs))
		}
		for i, k := range keys {
			if got[k] != segs[i] {
				t.Fatalf("%s: segment %d: %+v, want %+v", p, i, got[k], segs[i])
			}
		}
		// One chunk's sha256 changed: its segment's key changes.
		x, _ := ReadSkeletonIndex(ctx, "s", bytes.NewReader(skel.Bytes()), IndexOptions{})
		c := x.Arrays[len(x.Arrays)-1].Chunks[0]
		b := bytes.Clone(skel.Bytes())
		at := bytes.Index(b[c.Start:], []byte("sha256=")) + int(c.Start) + len("sha256=")
		b[at] = map[bool]byte{true: '1', false: '0'}[b[at] == '0']
		got2, err := SkeletonKeys(ctx, b, "s")
		if err != nil {
			t.Fatal(err)
		}
		same := 0
		for k := range got2 {
			if _, ok := got[k]; ok {
				same++
			}
		}
		if same != len(got)-1 {
			t.Fatalf("%s: one ch line changed, %d of %d keys kept", p, same, len(got))
		}
	}
	in, _ := os.ReadFile(seeds[0])
	var skel bytes.Buffer
	if _, _, err := SplitIndexed(ctx, bytes.NewReader(in), int64(len(in)), &skel, nil, nil, SplitOptions{SegmentSize: 200}); err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(skel.Bytes(), []byte("\nseg chunks=1 "), []byte("\nseg chunks=2 "), 1)
	if bytes.Equal(bad, skel.Bytes()) {
		t.Fatal("no single-chunk segment")
	}
	_, err := SkeletonKeys(ctx, bad, "bad.skel")
	var we *Error
	if !errors.As(err, &we) || we.File != "bad.skel" || we.Check != CheckSkeleton {
		t.Fatalf("bad skeleton: %v", err)
	}
}

// FuzzSkeletonKeys: any input gives keys or an error, never a panic; keys
// come only from skeletons that index.
func FuzzSkeletonKeys(f *testing.F) {
	for _, b := range testutil.Seeds(f, "testdata/golden-*.wtxt") {
		if len(b) < 16<<10 {
			skel, _, _ := splitBytes(f, b, 64)
			f.Add(skel)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := SkeletonKeys(context.Background(), b, "fuzz")
		if err != nil {
			return
		}
		if _, err := ReadSkeletonIndex(context.Background(), "fuzz", bytes.NewReader(b), IndexOptions{}); err != nil {
			t.Fatalf("keys from a skeleton that does not index: %v", err)
		}
		for _, s := range keys {
			if s.Chunks < 1 || s.Size < 0 {
				t.Fatalf("segment %+v", s)
			}
		}
	})
}
