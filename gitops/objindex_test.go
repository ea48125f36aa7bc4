package gitops

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// TestObjIndexAgreesWithGit: the object index answers as go-git does for
// every object of a repository (packed by git, and loose), and for
// objects it does not have; it follows git replacing the packs, and
// steps aside for a repository with alternates.
func TestObjIndexAgreesWithGit(t *testing.T) {
	r, _ := chainRepo(t, 3)
	dir := r.Dir()
	gitCmd(t, dir, "repack", "-a", "-d", "-q")
	objects := objectsDir(dir)
	x := newObjIndex(objects)
	check := func(when string) {
		t.Helper()
		if err := x.refresh(); err != nil {
			t.Fatal(err)
		}
		r.reindex()
		all := strings.Fields(gitCmd(t, dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"))
		if len(all) < 10 {
			t.Fatalf("%s: only %d objects", when, len(all))
		}
		absent := []string{strings.Repeat("0", 40), strings.Repeat("ab", 20)}
		for _, s := range append(all, absent...) {
			h := plumbing.NewHash(s)
			found, ok := x.has(h)
			if !ok {
				t.Fatalf("%s: %s: the index cannot say", when, s)
			}
			if want := r.r.Storer.HasEncodedObject(h) == nil; found != want {
				t.Errorf("%s: %s: index says %v, go-git %v", when, s, found, want)
			}
		}
		if n := len(x.packs); n != countPackFiles(t, objects) {
			t.Errorf("%s: %d pack indexes held, %d packs", when, n, countPackFiles(t, objects))
		}
	}
	check("packed")
	// git writes a loose object (the empty blob, reachable from no
	// commit: repack leaves it loose), then replaces the pack.
	gitCmd(t, dir, "hash-object", "-w", "--stdin")
	if n := gitCmd(t, dir, "count-objects"); strings.HasPrefix(n, "0 objects") {
		t.Fatalf("no loose object: %s", n)
	}
	check("loose")
	gitCmd(t, dir, "repack", "-a", "-d", "-q")
	check("repacked")
	if err := os.MkdirAll(filepath.Join(objects, "info"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(objects, "info", "alternates"), []byte(objects+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := x.refresh(); err != nil {
		t.Fatal(err)
	}
	if _, ok := x.has(plumbing.ZeroHash); ok {
		t.Error("with alternates the index answered")
	}
}

func countPackFiles(t *testing.T, objects string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(objects, "pack", "pack-*.pack"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}
