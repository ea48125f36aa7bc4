package layout

import (
	"bytes"
	"context"
	"path"
	"regexp"
	"slices"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// segScanSkeleton returns a real skeleton (wtxt.Split of a generated
// WTXT) and its segments' paths in order.
func segScanSkeleton(t testing.TB) ([]byte, []string) {
	t.Helper()
	text, _ := genWTXT(1, "", []testArray{{name: "a", data: pseudo(1, 40_000), chunk: 1024}, {name: "b", data: pseudo(2, 3000), chunk: 512}})
	var skel bytes.Buffer
	segs, err := wtxt.Split(context.Background(), bytes.NewReader(text), &skel, nil, wtxt.SplitOptions{SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, s := range segs {
		dir, name := SegName(s.Digest)
		want = append(want, path.Join(dir, name))
	}
	return skel.Bytes(), want
}

// TestSegScan: fed a skeleton in pieces of any size, segScan names every
// segment of its seg lines, in order, and nothing else.
func TestSegScan(t *testing.T) {
	skel, want := segScanSkeleton(t)
	if len(want) < 10 {
		t.Fatalf("only %d segments", len(want))
	}
	for _, step := range []int{1, 7, 100, 4096, len(skel)} {
		var s segScan
		var got []string
		for i := 0; i < len(skel); i += step {
			got = s.feed(skel[i:min(i+step, len(skel))], got)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: %d names, want %d", step, len(got), len(want))
		}
	}
	// Not seg lines: too long, not lowercase-hex, another keyword, no LF.
	hex := "ab" + string(bytes.Repeat([]byte("0"), 62))
	var s segScan
	got := s.feed([]byte("seg chunks=1 len=1"+string(bytes.Repeat([]byte(" "), 200))+"sha256="+hex+"\n"+
		"seg chunks=1 len=1 sha256="+hex[:63]+"g\nsegx chunks=1 sha256="+hex+"\nseg chunks=1 len=1 sha256="+hex), nil)
	if len(got) != 0 {
		t.Fatalf("named %q", got)
	}
	if got = s.feed([]byte("\n"), nil); len(got) != 1 || got[0] != "seg/ab/"+hex+".seg" {
		t.Fatalf("the line completed: %q", got)
	}
}

var segScanName = regexp.MustCompile(`^seg/[0-9a-f]{2}/[0-9a-f]{64}\.seg$`)

// FuzzSegScan: whatever the text (hostile skeletons included) and however
// it is cut, segScan names the same segments, each a well-formed path
// inside seg/, at most one per complete line, and never panics.
func FuzzSegScan(f *testing.F) {
	skel, _ := segScanSkeleton(f)
	f.Add(skel, uint16(1), uint16(0))
	f.Add(skel[:len(skel)/3], uint16(13), uint16(100))
	f.Add([]byte("seg chunks=1 len=5 sha256="+string(bytes.Repeat([]byte("f"), 64))+"\n"), uint16(3), uint16(5))
	f.Fuzz(func(t *testing.T, text []byte, step, first uint16) {
		var whole segScan
		want := whole.feed(text, nil)
		if n := bytes.Count(text, []byte("\n")); len(want) > n {
			t.Fatalf("%d names from %d lines", len(want), n)
		}
		for _, n := range want {
			if !segScanName.MatchString(n) {
				t.Fatalf("bad name %q", n)
			}
		}
		var cut segScan
		var got []string
		i := min(int(first), len(text))
		got = cut.feed(text[:i], got)
		for st := max(int(step), 1); i < len(text); i += st {
			got = cut.feed(text[i:min(i+st, len(text))], got)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("cut: %d names, whole: %d", len(got), len(want))
		}
	})
}
