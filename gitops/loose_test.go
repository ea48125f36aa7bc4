package gitops

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// TestStoredZlib: the hand-written stored-block stream inflates to its
// input with compress/zlib (which checks the Adler-32) at block
// boundaries and around them, and refuses more or fewer bytes than
// announced.
func TestStoredZlib(t *testing.T) {
	for _, n := range []int{0, 1, 7, maxStoredBlock - 1, maxStoredBlock, maxStoredBlock + 1, 3*maxStoredBlock + 17} {
		data := pseudo(n+1, n)
		var buf bytes.Buffer
		bw := bufio.NewWriter(&buf)
		z, err := newStoredZlib(bw, int64(n))
		if err != nil {
			t.Fatal(err)
		}
		// In uneven pieces, so writes straddle blocks.
		for p := data; len(p) > 0; {
			k := min(len(p), 40000)
			if _, err := z.Write(p[:k]); err != nil {
				t.Fatal(err)
			}
			p = p[k:]
		}
		if err := z.Close(); err != nil {
			t.Fatal(err)
		}
		zr, err := zlib.NewReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		got, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("n=%d: inflate: %v (equal %v)", n, err, bytes.Equal(got, data))
		}
		if want := 2 + n + 5*max(1, (n+maxStoredBlock-1)/maxStoredBlock) + 4; buf.Len() != want {
			t.Fatalf("n=%d: %d bytes, want %d", n, buf.Len(), want)
		}
	}
	z, _ := newStoredZlib(bufio.NewWriter(io.Discard), 3)
	if _, err := z.Write([]byte("abcd")); err == nil {
		t.Fatal("4 bytes into a 3-byte stream accepted")
	}
	z, _ = newStoredZlib(bufio.NewWriter(io.Discard), 3)
	z.Write([]byte("ab"))
	if err := z.Close(); err == nil {
		t.Fatal("a short stream closed without error")
	}
}

// TestWriteLooseGit: blobs and trees written as loose objects read back
// with git (cat-file, fsck --strict), large ones over several blocks.
func TestWriteLooseGit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r.git")
	gitCmd(t, filepath.Dir(dir), "init", "-q", "--bare", dir)
	objects := objectsDir(dir)
	big := pseudo(9, 200_000)
	hb, err := writeLoose(objects, int64(len(big)), bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	if want := plumbing.ComputeHash(plumbing.BlobObject, big); hb != want {
		t.Fatalf("blob %s, want %s", hb, want)
	}
	empty := plumbing.ComputeHash(plumbing.BlobObject, nil)
	if err := writeLooseBytes(objects, plumbing.BlobObject, nil, empty); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRepo(dir, Config{})
	if err != nil {
		t.Fatal(err)
	}
	b := &builder{st: r.r.Storer, objects: objects}
	tb := newTreeBuilder(nil)
	tb.set("big", 0o100644, hb)
	tb.set("empty", 0o100644, empty)
	th, err := b.writeTree(tb)
	if err != nil {
		t.Fatal(err)
	}
	if got := gitCmd(t, dir, "cat-file", "blob", hb.String()); got != string(big) {
		t.Fatal("git reads the blob differently")
	}
	if got := gitCmd(t, dir, "ls-tree", th.String()); !strings.Contains(got, hb.String()+"\tbig") || !strings.Contains(got, empty.String()+"\tempty") {
		t.Fatalf("ls-tree: %s", got)
	}
	// The same tree again: nothing written (the object file is untouched).
	p := filepath.Join(objects, th.String()[:2], th.String()[2:])
	before, _ := os.Stat(p)
	if err := os.Chmod(p, 0o400); err != nil {
		t.Fatal(err)
	}
	if th2, err := b.writeTree(tb); err != nil || th2 != th {
		t.Fatalf("rewrite: %s %v", th2, err)
	}
	if after, _ := os.Stat(p); after.Mode() != 0o400 || !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("an existing tree was written again")
	}
	gitCmd(t, dir, "fsck", "--strict")
}
