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
