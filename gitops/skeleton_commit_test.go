package gitops

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/gittest"
)

func hex64(c byte) string { return strings.Repeat(string(c), 64) }

// hash32 is the hash whose hex form is hex64(c).
func hash32(c byte) (h [32]byte) {
	hex.Decode(h[:], []byte(hex64(c)))
	return h
}

// TestCommitSkeletonLayout: a generation with Generation.Skeleton commits
// the skeleton file as current.wtxt.skel (no WTXT, no delta), records the
// layout and the registry side; a later whole-WTXT generation removes the
// skeleton again. A skeleton needs Header. Checked with the git CLI.
func TestCommitSkeletonLayout(t *testing.T) {
	dir := t.TempDir()
	key, _ := testKey(t)
	r, err := OpenRepo(filepath.Join(dir, "repo.git"), Config{SigningKey: key})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	h := func(gen uint64, prev, this byte) *Header {
		return &Header{Gen: gen, Root: wtxt.Root{TS: "2026-01-01T00:00:0" + string(rune('0'+gen)) + "Z", Build: "b", SHA256All: hash32(this), MerklePrev: hash32(prev), MerkleThis: hash32(this)}}
	}
	ctx := context.Background()
	if _, err := r.Commit(ctx, Generation{WTXT: write("1.wtxt", "whole one\n"), Header: h(1, '0', '1')}); err != nil {
		t.Fatal(err)
	}
	skel := write("2.skel", "WTXT-SKELETON 1\nskeleton two\n")
	if _, err := r.Commit(ctx, Generation{Skeleton: skel}); !errors.Is(err, ErrHeader) {
		t.Fatalf("skeleton without header: %v", err)
	}
	if _, err := r.Commit(ctx, Generation{Skeleton: skel, Header: h(2, '1', '2'), OCI: &OCIRef{Repository: "r/x", Manifest: "a\nb"}}); !errors.Is(err, ErrHeader) {
		t.Fatalf("OCI ref with a newline: %v", err)
	}
	res, err := r.Commit(ctx, Generation{Skeleton: skel, Delta: write("2.delta", "delta\n"), Header: h(2, '1', '2'),
		OCI: &OCIRef{Repository: "127.0.0.1:5000/m", Manifest: "sha256:" + hex64('c')}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Layout != LayoutSkeleton {
		t.Fatalf("layout %s", res.Layout)
	}
	git := func(args ...string) string { return gittest.Git(t, filepath.Join(dir, "repo.git"), args...) }
	if ls := git("ls-tree", "--name-only", "gen-000002", "snapshots/"); ls != "snapshots/current.wtxt.skel\nsnapshots/generation.txt\n" {
		t.Fatalf("gen 2 tree:\n%s", ls)
	}
	if s := git("show", "gen-000002:snapshots/current.wtxt.skel"); s != "WTXT-SKELETON 1\nskeleton two\n" {
		t.Fatalf("skeleton %q", s)
	}
	sum := git("show", "gen-000002:snapshots/generation.txt")
	for _, want := range []string{"layout=skeleton\n", "skel_bytes=29\n", "oci_repository=127.0.0.1:5000/m\n", "oci_manifest=sha256:" + hex64('c') + "\n"} {
		if !strings.Contains(sum, want) {
			t.Fatalf("generation.txt lacks %q:\n%s", want, sum)
		}
	}
	if tr := git("log", "-1", "--format=%(trailers:key=Snapd-Layout,valueonly)", "gen-000002"); strings.TrimSpace(tr) != "skeleton" {
		t.Fatalf("layout trailer %q", tr)
	}
	// Repeated after a crash: the existing commit.
	again, err := r.Commit(ctx, Generation{Skeleton: skel, Header: h(2, '1', '2')})
	if err != nil || !again.Existing || again.Commit != res.Commit {
		t.Fatalf("repeat: %+v %v", again, err)
	}
	if _, err := r.Commit(ctx, Generation{WTXT: write("3.wtxt", "whole three\n"), Header: h(3, '2', '3')}); err != nil {
		t.Fatal(err)
	}
	if ls := git("ls-tree", "--name-only", "gen-000003", "snapshots/"); ls != "snapshots/current.wtxt\nsnapshots/generation.txt\n" {
		t.Fatalf("gen 3 tree:\n%s", ls)
	}
	git("fsck", "--strict")
}
