package gitops

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
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
	hb, err := writeLooseAs(objects, plumbing.BlobObject, int64(len(big)), bytes.NewReader(big), nil)
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

// growingFile is a ReaderAt whose content is longer than the size the
// writer is told.
type growingFile struct{ data []byte }

func (g growingFile) ReadAt(p []byte, off int64) (int, error) {
	return bytes.NewReader(g.data).ReadAt(p, off)
}

// countingReaderAt counts the bytes read through it.
type countingReaderAt struct {
	r io.ReaderAt
	n int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n += int64(n)
	return n, err
}

// TestWriteFromOnePass: a file is read once, hashed while written to a
// temporary object; the blob is the one git names for those bytes, a
// blob the repository already has is not written again, a file longer
// than announced is refused, and no temporary object is left in any case.
func TestWriteFromOnePass(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r.git")
	gitCmd(t, filepath.Dir(dir), "init", "-q", "--bare", dir)
	objects := objectsDir(dir)
	r, err := OpenRepo(dir, Config{})
	if err != nil {
		t.Fatal(err)
	}
	data := pseudo(3, 300_000)
	want := strings.TrimSpace(gitCmd(t, dir, "hash-object", writeFile(t, t.TempDir(), "f", data)))
	write := func(src io.ReaderAt, size int64) (*builder, *genTree, error) {
		b := &builder{st: r.r.Storer, objects: objects}
		tr := b.genTree(newTreeBuilder(nil), nil, "gen.wtxt")
		return b, tr, tr.WriteFrom(context.Background(), "gen.wtxt", src, size)
	}
	tmpLeft := func() []string {
		m, _ := filepath.Glob(filepath.Join(objects, "tmp_obj_*"))
		return m
	}
	src := &countingReaderAt{r: bytes.NewReader(data)}
	b, tr, err := write(src, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if b.blobs != 1 || b.bytes != int64(len(data)) {
		t.Fatalf("first write: %d blobs, %d bytes", b.blobs, b.bytes)
	}
	if src.n != int64(len(data)) {
		t.Fatalf("the file was read for %d bytes, want its %d bytes once", src.n, len(data))
	}
	if e, ok := tr.dir.entries["gen.wtxt"]; !ok || e.Hash.String() != want {
		t.Fatalf("blob %v, git names it %s", e.Hash, want)
	}
	if got := gitCmd(t, dir, "cat-file", "-p", want); got != string(data) {
		t.Fatal("stored blob differs from the file")
	}
	b, _, err = write(bytes.NewReader(data), int64(len(data)))
	if err != nil || b.blobs != 0 {
		t.Fatalf("second write of the same bytes: %d blobs, %v", b.blobs, err)
	}
	grown := growingFile{append(append([]byte{}, data...), 'x')}
	if _, _, err = write(grown, int64(len(data))); err == nil || !strings.Contains(err.Error(), "changed size") {
		t.Fatalf("a file longer than announced: %v", err)
	}
	if _, _, err = write(bytes.NewReader(data[:1000]), int64(len(data))); err == nil || !strings.Contains(err.Error(), "short read") {
		t.Fatalf("a file shorter than announced: %v", err)
	}
	if left := tmpLeft(); len(left) != 0 {
		t.Fatalf("temporary objects left: %v", left)
	}
	gitCmd(t, dir, "fsck", "--strict")
}
