package review

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

func TestParsePatch(t *testing.T) {
	patch := strings.Join([]string{
		"diff --git a/x b/x",
		"index 1..2 100644",
		"--- a/x",
		"+++ b/x",
		"@@ -1,3 +1,3 @@ header",
		" one",                        // pos 1, new 1
		"-two",                        // pos 2
		"+TWO",                        // pos 3, new 2
		" three",                      // pos 4, new 3
		"@@ -10,2 +10,3 @@",           // pos 5
		" ten",                        // pos 6, new 10
		"+ten.5",                      // pos 7, new 11
		" eleven",                     // pos 8, new 12
		"@@ -20 +21,0 @@",             // pos 9
		"-twenty",                     // pos 10
		"@@ -30,1 +30,1 @@",           // pos 11
		"-x",                          // pos 12
		"+y",                          // pos 13, new 30
		`\ No newline at end of file`, // pos 14
	}, "\n")
	p, err := ParsePatch(patch)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]int{1: 1, 2: 3, 3: 4, 10: 6, 11: 7, 12: 8, 30: 13}
	for line, pos := range want {
		if got, ok := p.Position(line); !ok || got != pos {
			t.Errorf("line %d: position %d %v, want %d", line, got, ok, pos)
		}
	}
	for _, line := range []int{0, 4, 9, 13, 21, 29, 31} {
		if pos, ok := p.Position(line); ok {
			t.Errorf("line %d is not in the diff but got position %d", line, pos)
		}
	}
	if p.Hunks != 4 {
		t.Errorf("hunks %d, want 4", p.Hunks)
	}
	// GitHub's patch field (no headers, no trailing newline) parses the same.
	q, err := ParsePatch(patch[strings.Index(patch, "@@"):])
	if err != nil {
		t.Fatal(err)
	}
	for line, pos := range want {
		if got, _ := q.Position(line); got != pos {
			t.Errorf("headerless: line %d: position %d, want %d", line, got, pos)
		}
	}
	var nilPatch *Patch
	if _, ok := nilPatch.Position(1); ok {
		t.Error("nil patch anchors a line")
	}
}

func TestParsePatchErrors(t *testing.T) {
	for name, patch := range map[string]string{
		"bad header":      "@@ -1,2 @@\n a\n",
		"bad count":       "@@ -1,x +1,2 @@\n a\n",
		"too many added":  "@@ -1,1 +1,1 @@\n+a\n+b\n",
		"too many ctx":    "@@ -1,1 +1,2 @@\n a\n b\n",
		"too many del":    "@@ -1,1 +1,1 @@\n-a\n-b\n",
		"truncated":       "@@ -1,3 +1,3 @@\n a\n",
		"early next hunk": "@@ -1,3 +1,3 @@\n a\n@@ -5,1 +5,1 @@\n a\n",
		"garbage in hunk": "@@ -1,2 +1,2 @@\n a\n*b\n",
	} {
		if _, err := ParsePatch(patch); err == nil {
			t.Errorf("%s: no error", name)
		} else if !strings.Contains(err.Error(), "patch") {
			t.Errorf("%s: error %q does not say where", name, err)
		}
	}
}

// FuzzParsePatch: seeds in testdata/fuzz/FuzzParsePatch.
func FuzzParsePatch(f *testing.F) {
	if m, _ := filepath.Glob("testdata/fuzz/FuzzParsePatch/*"); len(m) == 0 {
		f.Fatal("no seeds in testdata/fuzz/FuzzParsePatch")
	}
	fixed := testutil.SourceTexts(f, ".")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePatch(s)
		if err != nil {
			if run, ok := testutil.EchoedRun(err.Error(), []byte(s), fixed...); ok {
				t.Fatalf("error echoes the patch run %q: %v", run, err)
			}
			return
		}
		last := 0
		for _, r := range p.runs {
			if r.n <= 0 || r.pos <= last {
				t.Fatalf("runs not increasing: %+v", p.runs)
			}
			last = r.pos + r.n - 1
		}
	})
}
