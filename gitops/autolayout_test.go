package gitops

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestAutoLayout: the default layout (auto) stores a WTXT up to
// SplitThreshold as one file and a larger one in the segments layout (no
// delta beside it), going back and forth as the size changes; a larger
// age-armored WTXT, which cannot be cut into raw segments, is split into
// parts. Every generation reads back byte for byte.
func TestAutoLayout(t *testing.T) {
	dir := t.TempDir()
	r, err := OpenRepo(filepath.Join(dir, "repo.git"), Config{PartLimit: MinPartLimit, SplitThreshold: 200_000})
	if err != nil {
		t.Fatal(err)
	}
	if r.Config().Layout != LayoutAuto {
		t.Fatalf("default layout %s", r.Config().Layout)
	}
	base := []testArray{{name: "emb", data: pseudo(1, 50_000), chunk: 4096}, {name: "b", data: pseudo(2, 100)}}
	chain := genChain(t, dir, 3, base, func(g int, a []testArray) {
		if g == 2 {
			a[0].data = pseudo(1, 400_000)
		}
		if g == 3 {
			a[0].data = a[0].data[:40_000]
		}
	})
	delta := writeFile(t, dir, "d.wtxtdelta", []byte("a delta\n"))
	ctx := context.Background()
	want := []struct {
		layout Layout
		tree   string
	}{
		{LayoutSingle, "current.wtxt\ncurrent.wtxtdelta\ngeneration.txt\n"},
		{LayoutSegments, "current.wtxt.segs\ngeneration.txt\n"},
		{LayoutSingle, "current.wtxt\ncurrent.wtxtdelta\ngeneration.txt\n"},
	}
	for i, p := range chain.paths {
		res, err := r.Commit(ctx, Generation{WTXT: p, Delta: delta})
		if err != nil || res.Layout != want[i].layout {
			t.Fatalf("gen %d: %+v %v, want %s", i+1, res, err, want[i].layout)
		}
		if got := gitCmd(t, r.Dir(), "ls-tree", "--name-only", res.Tag+":snapshots"); got != want[i].tree {
			t.Fatalf("gen %d tree %q, want %q", i+1, got, want[i].tree)
		}
		if got := ParseTrailers(gitCmd(t, r.Dir(), "log", "-1", "--format=%B", res.Tag))[TrailerLayout]; got != string(want[i].layout) {
			t.Fatalf("gen %d trailer layout %s", i+1, got)
		}
		var out bytes.Buffer
		if err := r.WriteWTXT(res.Tag, &out); err != nil || !bytes.Equal(out.Bytes(), chain.data[i]) {
			t.Fatalf("gen %d WriteWTXT: %v", i+1, err)
		}
	}
	if attrs := gitCmd(t, r.Dir(), "show", "snapshots:.gitattributes"); !strings.Contains(attrs, "*.seg -text -diff -delta\n") {
		t.Fatalf(".gitattributes: %q", attrs)
	}
	// In a clone with a work tree git applies them: segments and their
	// pieces are binary and never delta-searched.
	wt := filepath.Join(dir, "wt")
	gitCmd(t, dir, "clone", "-q", "--no-checkout", "-b", "snapshots", r.Dir(), wt)
	gitCmd(t, wt, "checkout", "HEAD", "--", ".gitattributes")
	kinds := map[string]bool{}
	for _, p := range strings.Fields(gitCmd(t, wt, "ls-tree", "-r", "--name-only", "HEAD~1")) { // gen 2: segments
		kind := ""
		switch {
		case strings.Contains(p, ".seg/p"):
			kind = "piece"
		case strings.HasSuffix(p, ".seg"):
			kind = "segment"
		default:
			continue
		}
		if kinds[kind] {
			continue
		}
		kinds[kind] = true
		if got := gitCmd(t, wt, "check-attr", "delta", "diff", "text", "--", p); strings.Count(got, ": unset\n") != 3 {
			t.Fatalf("%s: %q", p, got)
		}
	}
	if !kinds["piece"] { // 64 KiB segments of 16 KiB pieces
		t.Fatalf("no segment pieces in the tree: %v", kinds)
	}
	gitCmd(t, r.Dir(), "fsck", "--strict")

	// An armored WTXT above the threshold: split parts.
	ra, err := OpenRepo(filepath.Join(dir, "armored.git"), Config{PartLimit: MinPartLimit, SplitThreshold: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := genWTXT(1, "", []testArray{{name: "x", data: pseudo(1, 100)}})
	h, _ := ParseHeader(bytes.NewReader(w))
	var armored bytes.Buffer
	armored.WriteString("-----BEGIN AGE ENCRYPTED FILE-----\n")
	for i := 0; armored.Len() < 200_000; i++ {
		armored.WriteString(strings.Repeat(string(rune('A'+i%26)), 64) + "\n")
	}
	armored.WriteString("-----END AGE ENCRYPTED FILE-----\n")
	res, err := ra.Commit(ctx, Generation{WTXT: writeFile(t, dir, "a.wtxt", armored.Bytes()), Header: h})
	if err != nil || res.Layout != LayoutSplit {
		t.Fatalf("armored: %+v %v", res, err)
	}
	var out bytes.Buffer
	if err := ra.WriteWTXT(res.Tag, &out); err != nil || !bytes.Equal(out.Bytes(), armored.Bytes()) {
		t.Fatalf("armored WriteWTXT: %v", err)
	}
}
