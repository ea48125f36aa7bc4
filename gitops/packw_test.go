package gitops

import (
	"bytes"
	"context"
	"github.com/snapd-ml/snapd/gitops/layout"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommitWritesPack: a generation with more than packMinObjects new
// objects stores them as one pack (no temporary file left, git fsck
// clean, every object git reads back), the same Repo then commits the
// next generation (its pack list re-read: the previous trees are in the
// pack), a reopened Repo reads both, a small generation stays loose, and
// git push sends the generations to a bare remote that is fsck clean.
// Segment blobs in a pack are literal deltas against the root
// .gitattributes blob, and generation 1's stay deltas through the push
// and a shallow clone from the default-configured remote (git reused
// them rather than searching).
func TestCommitWritesPack(t *testing.T) {
	key, _ := testKey(t)
	dir := t.TempDir()
	base := []testArray{{name: "w", data: pseudo(7, 600_000), chunk: 1024}, {name: "b", data: pseudo(8, 64)}}
	chain := genChain(t, dir, 3, base, func(g int, a []testArray) {
		switch g {
		case 2: // dense: every chunk
			for i := 0; i < len(a[0].data); i += 1024 {
				a[0].data[i] ^= 0x5a
			}
		case 3: // one chunk
			a[0].data[5000] ^= 1
		}
	})
	repoDir := filepath.Join(dir, "repo.git")
	cfg := Config{SigningKey: key, Layout: LayoutSegments, SegmentSize: 1024}
	r, err := OpenRepo(repoDir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	packs := func() []string {
		m, _ := filepath.Glob(filepath.Join(repoDir, "objects", "pack", "*"))
		return m
	}
	ctx := context.Background()
	var res []*Result
	for i, p := range chain.paths {
		rs, err := r.Commit(ctx, Generation{WTXT: p})
		if err != nil {
			t.Fatalf("gen %d: %v", i+1, err)
		}
		res = append(res, rs)
		n := 0
		for _, f := range packs() {
			if strings.Contains(filepath.Base(f), "tmp_") {
				t.Fatalf("gen %d left %s", i+1, f)
			}
			if strings.HasSuffix(f, ".pack") {
				n++
			}
		}
		if want := map[int]int{0: 1, 1: 2, 2: 2}[i]; n != want { // gen 3 is small: loose
			t.Fatalf("gen %d: %d packs, want %d (%d new blobs)", i+1, n, want, rs.BlobsWritten)
		}
	}
	if res[0].BlobsWritten < packMinObjects || res[2].BlobsWritten > 10 {
		t.Fatalf("blobs written: %d, %d, %d", res[0].BlobsWritten, res[1].BlobsWritten, res[2].BlobsWritten)
	}
	gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")
	attrs := strings.TrimSpace(gitCmd(t, repoDir, "rev-parse", res[0].Commit.String()+":"+FileAttributes))
	deltas := func(repo string) int {
		t.Helper()
		idx, _ := filepath.Glob(filepath.Join(repo, "objects", "pack", "*.idx"))
		n := 0
		for _, f := range idx {
			for _, l := range strings.Split(gitCmd(t, repo, "verify-pack", "-v", f), "\n") {
				// SHA-1 type size size-in-pack offset depth base
				if x := strings.Fields(l); len(x) == 7 && x[1] == "blob" && x[6] == attrs {
					n++
				}
			}
		}
		return n
	}
	if n := deltas(repoDir); n < packMinObjects {
		t.Fatalf("%d blobs stored as deltas against %s, want the segments of generations 1 and 2", n, attrs)
	}
	r2, err := OpenRepo(repoDir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, rs := range res {
		for _, rr := range []*Repo{r, r2} {
			var out bytes.Buffer
			if err := rr.WriteWTXT(rs.Tag, &out); err != nil || !bytes.Equal(out.Bytes(), chain.data[i]) {
				t.Fatalf("WriteWTXT %s: %v", rs.Tag, err)
			}
		}
	}
	remote := filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "--bare", remote)
	p, err := NewPusher(repoDir, Remote{URL: "file://" + remote})
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range res {
		if err := p.Push(ctx, PushRequest{Branch: DefaultBranch, Commit: rs.Commit, Tag: rs.Tag}); err != nil {
			t.Fatalf("push %s: %v", rs.Tag, err)
		}
	}
	gitCmd(t, remote, "fsck", "--strict", "--no-dangling")
	if got := strings.TrimSpace(gitCmd(t, remote, "rev-parse", "refs/heads/"+DefaultBranch)); got != res[2].Commit.String() {
		t.Fatalf("remote head %s", got)
	}
	// Generation 1's pack reached the remote as it is (its base in the
	// same pack); a shallow clone of it gets the deltas as stored.
	if n := deltas(remote); n < packMinObjects {
		t.Fatalf("the remote has %d blobs as deltas against %s", n, attrs)
	}
	clone := filepath.Join(dir, "clone.git")
	gitCmd(t, dir, "clone", "-q", "--bare", "--depth", "1", "--branch", res[0].Tag, "file://"+remote, clone)
	if n := deltas(clone); n < packMinObjects {
		t.Fatalf("the clone has %d blobs as deltas against %s: the remote did not reuse them", n, attrs)
	}
	gitCmd(t, clone, "fsck", "--strict", "--no-dangling")
}

// TestPieceBasesSurvivePushAndClone: segments stored as pieces carry a
// base blob per piece, and the pieces are literal deltas against it in
// snapd's packs. Generations 2 and 3 change one row in many segments
// (the uniform case: one new piece per changed segment, the others
// moved into the new segment's tree) and reach the remote by thin
// pushes, one each; the remote keeps every new piece as a delta against
// its own base, and a depth-1 clone of the latest generation from that
// default-configured remote gets every piece of its tree as a delta
// against its base: neither git searched for deltas in float bytes.
func TestPieceBasesSurvivePushAndClone(t *testing.T) {
	key, _ := testKey(t)
	dir := t.TempDir()
	base := []testArray{{name: "w", data: pseudo(11, 400_000), chunk: 1024}}
	chain := genChain(t, dir, 3, base, func(g int, a []testArray) {
		for i := 512 * (g - 1); g > 1 && i < len(a[0].data); i += 3 * 1024 {
			a[0].data[i] ^= 0x5a // one row in every third chunk
		}
	})
	repoDir := filepath.Join(dir, "repo.git")
	r, err := OpenRepo(repoDir, Config{SigningKey: key, Layout: LayoutSegments, SegmentSize: 1024, SegmentPiece: 256})
	if err != nil {
		t.Fatal(err)
	}
	remote := filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "--bare", remote)
	p, err := NewPusher(repoDir, Remote{URL: "file://" + remote})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var res []*Result
	for i, path := range chain.paths {
		rs, err := r.Commit(ctx, Generation{WTXT: path})
		if err != nil {
			t.Fatalf("gen %d: %v", i+1, err)
		}
		if err := p.Push(ctx, PushRequest{Branch: DefaultBranch, Commit: rs.Commit, Tag: rs.Tag}); err != nil {
			t.Fatalf("push %s: %v", rs.Tag, err)
		}
		res = append(res, rs)
	}
	// check: every piece of want is stored in repo as a delta against
	// its base.
	check := func(what, repo string, want map[string]string) {
		t.Helper()
		got := deltaBases(t, repo)
		bad := 0
		for piece, base := range want {
			if got[piece] != base {
				bad++
			}
		}
		if bad > 0 || len(want) < 100 {
			t.Fatalf("%s: %d of %d pieces not stored as deltas against their base", what, bad, len(want))
		}
	}
	last := pieceBases(t, repoDir, res[2].Tag)
	newIn := func(g int) map[string]string { // pieces first in generation g
		m := pieceBases(t, repoDir, res[g-1].Tag)
		if g > 1 {
			for p := range pieceBases(t, repoDir, res[g-2].Tag) {
				delete(m, p)
			}
		}
		return m
	}
	check("local generation 3's new pieces", repoDir, newIn(3))
	check("remote generation 2's new pieces (thin push)", remote, newIn(2))
	check("remote generation 3's new pieces (thin push)", remote, newIn(3))
	gitCmd(t, remote, "fsck", "--strict", "--no-dangling")
	clone := filepath.Join(dir, "clone.git")
	gitCmd(t, dir, "clone", "-q", "--bare", "--depth", "1", "--branch", res[2].Tag, "file://"+remote, clone)
	check("depth-1 clone of generation 3", clone, last)
	gitCmd(t, clone, "fsck", "--strict", "--no-dangling")
	var out bytes.Buffer
	r2, err := OpenRepo(clone, Config{Layout: LayoutSegments})
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.WriteWTXT(res[2].Tag, &out); err != nil || !bytes.Equal(out.Bytes(), chain.data[2]) {
		t.Fatalf("WriteWTXT from the clone: %v", err)
	}
}

// pieceBases maps every piece of revision rev's tree in repo to its base
// blob (by ID).
func pieceBases(t *testing.T, repo, rev string) map[string]string {
	t.Helper()
	out := map[string]string{}
	byPath := map[string]string{}
	for _, l := range strings.Split(gitCmd(t, repo, "ls-tree", "-r", rev), "\n") {
		if f := strings.Fields(l); len(f) == 4 {
			byPath[f[3]] = f[2]
		}
	}
	prefix := DefaultPath + "/" + DirWTXTSegs + "/"
	for path, h := range byPath {
		if piece, ok := layout.PieceOfBase(strings.TrimPrefix(path, prefix)); ok {
			out[byPath[prefix+piece]] = h
		}
	}
	return out
}

// deltaBases maps every blob stored as a delta in repo's packs to its
// base (git verify-pack -v).
func deltaBases(t *testing.T, repo string) map[string]string {
	t.Helper()
	out := map[string]string{}
	idx, _ := filepath.Glob(filepath.Join(repo, "objects", "pack", "*.idx"))
	for _, f := range idx {
		for _, l := range strings.Split(gitCmd(t, repo, "verify-pack", "-v", f), "\n") {
			if x := strings.Fields(l); len(x) == 7 && x[1] == "blob" {
				out[x[0]] = x[6]
			}
		}
	}
	return out
}
