package gitops

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// TestCatFile: blobs read through `git cat-file --batch` are the blobs
// git stores (empty, small, larger than catBuffered), small ones can be
// open together, a big one makes the child busy until closed (early
// close skips the rest), a missing object is errCatMissing and leaves the
// child usable, and a closed child refuses.
func TestCatFile(t *testing.T) {
	dir := t.TempDir()
	gitCmd(t, dir, "init", "-q", "--bare", "r.git")
	repo := filepath.Join(dir, "r.git")
	blobs := map[string][]byte{"empty": {}, "small": []byte("a piece\n"), "big": pseudo(3, catBuffered+12345)}
	ids := map[string]plumbing.Hash{}
	for name, data := range blobs {
		p := filepath.Join(dir, name)
		os.WriteFile(p, data, 0o644)
		ids[name] = plumbing.NewHash(strings.TrimSpace(gitCmd(t, repo, "hash-object", "-w", p)))
	}
	cf, err := startCatFile(context.Background(), repo)
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) io.ReadCloser {
		t.Helper()
		rc, size, busy, err := cf.open(ids[name])
		if err != nil || busy || size != int64(len(blobs[name])) {
			t.Fatalf("open %s: size %d busy %v err %v", name, size, busy, err)
		}
		return rc
	}
	check := func(name string, rc io.ReadCloser) {
		t.Helper()
		got, err := io.ReadAll(rc)
		if err != nil || !bytes.Equal(got, blobs[name]) {
			t.Fatalf("read %s: %d bytes, %v", name, len(got), err)
		}
		if err := rc.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s1, e := read("small"), read("empty")
	s2 := read("small")
	check("empty", e)
	check("small", s2)
	check("small", s1)

	big := read("big")
	if _, _, busy, _ := cf.open(ids["small"]); !busy {
		t.Fatal("a second blob while a big one streams: want busy")
	}
	if _, err := io.ReadFull(big, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	big.Close() // the rest is skipped
	check("small", read("small"))
	check("big", read("big"))

	if _, _, _, err := cf.open(plumbing.NewHash(strings.Repeat("ab", 20))); !errors.Is(err, errCatMissing) {
		t.Fatalf("missing object: %v", err)
	}
	check("small", read("small"))
	if err := cf.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := cf.open(ids["small"]); err == nil {
		t.Fatal("open after Close succeeded")
	}

	// Closing while a big blob is unread (git blocked writing it) ends
	// the child instead of waiting for it.
	cf2, err := startCatFile(context.Background(), repo)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := cf2.open(ids["big"]); err != nil {
		t.Fatal(err)
	}
	cf2.Close()
}

// TestGitTreeFSServesSegments: reading a segments-layout generation
// through GitTreeFS gets every blob from git (none refused as busy while
// the skeleton pieces are held open) and yields the committed WTXT.
func TestGitTreeFSServesSegments(t *testing.T) {
	key, _ := testKey(t)
	dir := t.TempDir()
	chain := genChain(t, dir, 1, []testArray{{name: "w", data: pseudo(11, 200_000), chunk: 1024}}, nil)
	repoDir := filepath.Join(dir, "repo.git")
	r, err := OpenRepo(repoDir, Config{SigningKey: key, Layout: LayoutSegments, SegmentSize: 4096, SegmentPiece: 1024})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Commit(context.Background(), Generation{WTXT: chain.paths[0]})
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.r.CommitObject(res.Commit)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := c.Tree()
	segs, err := root.Tree(DefaultPath + "/" + DirWTXTSegs)
	if err != nil {
		t.Fatal(err)
	}
	fsys, done := GitTreeFS(context.Background(), repoDir, segs)
	defer done()
	cf := fsys.(treeFS).cat
	if cf == nil {
		t.Fatal("git cat-file did not start")
	}
	var out bytes.Buffer
	info, err := ReadSegments(context.Background(), fsys, &out)
	if err != nil || !bytes.Equal(out.Bytes(), chain.data[0]) {
		t.Fatalf("ReadSegments: %v", err)
	}
	// MANIFEST, the skeleton pieces and every segment piece (info.Paths
	// also lists each pieced segment's directory, which is no blob).
	if cf.refused != 0 || cf.served < len(info.Paths)/2 || cf.served < 100 {
		t.Fatalf("git served %d blobs, refused %d, of %d paths", cf.served, cf.refused, len(info.Paths))
	}
}
