package gitops

import (
	"bytes"
	"context"
	"errors"
	"github.com/snapd-ml/snapd/gitops/layout"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// TestCommitSkeletonLayout: the skeleton layout stores text pieces and raw
// segments, reassembles every generation byte for byte, writes only the
// changed segment and pieces, and shows the change as ch lines in git diff.
func TestCommitSegmentsLayout(t *testing.T) {
	key, allowed := testKey(t)
	dir := t.TempDir()
	repoDir := filepath.Join(dir, "repo.git")
	r, err := OpenRepo(repoDir, Config{SigningKey: key, Layout: LayoutSegments, SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	base := []testArray{
		{name: "emb", data: pseudo(1, 400_000), chunk: 4096},
		{name: "head.w", data: pseudo(2, 30_000), chunk: 1024},
		{name: "tiny", data: pseudo(3, 10)},
		{name: "empty", data: nil},
	}
	chain := genChain(t, dir, 3, base, func(g int, a []testArray) {
		if g > 1 {
			a[0].data[4096*(20*g)+1] ^= byte(g) // one chunk of emb
		}
	})
	ctx := context.Background()
	var results []*Result
	for i, p := range chain.paths {
		res, err := r.Commit(ctx, Generation{WTXT: p})
		if err != nil {
			t.Fatalf("gen %d: %v", i+1, err)
		}
		if res.Layout != LayoutSegments {
			t.Fatalf("gen %d: layout %s", i+1, res.Layout)
		}
		results = append(results, res)
	}
	// A Repo reopened for every commit has no segment keys (it decodes
	// every segment); the commits are the same.
	fresh := filepath.Join(dir, "fresh.git")
	for i, p := range chain.paths {
		rf, err := OpenRepo(fresh, Config{SigningKey: key, Layout: LayoutSegments, SegmentSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		res, err := rf.Commit(ctx, Generation{WTXT: p})
		if err != nil {
			t.Fatalf("fresh gen %d: %v", i+1, err)
		}
		if res.Commit != results[i].Commit {
			t.Fatalf("gen %d: commit %s with segment keys, %s without", i+1, results[i].Commit, res.Commit)
		}
	}
	for i, res := range results {
		var out bytes.Buffer
		if err := r.WriteWTXT(res.Tag, &out); err != nil {
			t.Fatalf("WriteWTXT %s: %v", res.Tag, err)
		}
		if !bytes.Equal(out.Bytes(), chain.data[i]) {
			t.Fatalf("%s: reassembled WTXT differs", res.Tag)
		}
	}
	// gen 3 vs 2: one new segment (emb chunk 60), the emb piece holding it,
	// the emb head (arr sha256), the header (root), MANIFEST, generation.txt.
	if res := results[2]; res.BlobsWritten != 6 || res.BytesWritten > int64(len(chain.data[2]))/20 {
		t.Fatalf("gen 3 wrote %d blobs, %d bytes", res.BlobsWritten, res.BytesWritten)
	}
	git := func(args ...string) string {
		return gitCmd(t, repoDir, append([]string{"-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile=" + allowed}, args...)...)
	}
	git("fsck", "--strict", "--no-dangling")
	git("verify-commit", "gen-000003^{commit}")
	names := strings.Fields(git("diff", "--no-renames", "--name-only", "gen-000002", "gen-000003"))
	var segs, pieces int
	for _, n := range names {
		switch {
		case strings.HasSuffix(n, ".seg"):
			segs++
		case strings.HasSuffix(n, ".part"):
			pieces++
		}
	}
	if segs != 2 || pieces != 3 { // one segment replaced; header, emb head, emb piece
		t.Fatalf("changed files %v\n%s", names, git("diff", "--name-status", "gen-000002", "gen-000003"))
	}
	diff := git("diff", "gen-000002", "gen-000003", "--", "snapshots/"+DirWTXTSegs+"/*.part")
	var chMinus, chPlus int
	for _, l := range strings.Split(diff, "\n") {
		switch {
		case strings.HasPrefix(l, "-ch ix=000060 "):
			chMinus++
		case strings.HasPrefix(l, "+ch ix=000060 "):
			chPlus++
		case strings.HasPrefix(l, "+ch ") || strings.HasPrefix(l, "-ch "):
			t.Errorf("unexpected changed ch line %q", l)
		}
	}
	if chMinus != 1 || chPlus != 1 {
		t.Fatalf("git diff does not show chunk 60's ch line once:\n%s", diff)
	}

	// A damaged segment or piece is refused on reading.
	fsys := treeMapFS(t, repoDir, "gen-000003", "snapshots/"+DirWTXTSegs)
	var out bytes.Buffer
	if err := layout.AssembleSkeletonFS(ctx, fsys, ".", &out); err != nil || !bytes.Equal(out.Bytes(), chain.data[2]) {
		t.Fatalf("AssembleSkeletonFS: %v", err)
	}
	for name, f := range fsys {
		if len(f.Data) == 0 || name == layout.ManifestName {
			continue
		}
		bad := fstest.MapFS{}
		for n, g := range fsys {
			bad[n] = g
		}
		d := bytes.Clone(f.Data)
		d[len(d)/2] ^= 1
		bad[name] = &fstest.MapFile{Data: d}
		if err := layout.AssembleSkeletonFS(ctx, bad, ".", &out); !errors.Is(err, layout.ErrSkeleton) {
			t.Fatalf("damaged %s: err = %v", name, err)
		}
	}
}

// treeMapFS copies the files under dir of rev into a MapFS.
func treeMapFS(t testing.TB, repo, rev, dir string) fstest.MapFS {
	t.Helper()
	fsys := fstest.MapFS{}
	for _, l := range strings.Split(strings.TrimSpace(gitCmd(t, repo, "ls-tree", "-r", "--name-only", rev+":"+dir)), "\n") {
		data := gitCmd(t, repo, "cat-file", "blob", rev+":"+dir+"/"+l)
		fsys[l] = &fstest.MapFile{Data: []byte(data)}
	}
	return fsys
}

// TestCutSkeletonPieces: the pieces concatenate to the skeleton and are
// cut where the doc says: the header, each array's arr line, every
// segsPerPiece-th seg line of an array (named by its segment's first
// chunk) and the trailer; a skeleton that does not match the WTXT's index
// or segments is refused.
func TestCutSkeletonPieces(t *testing.T) {
	ctx := context.Background()
	w, _ := genWTXT(1, "", []testArray{{name: "emb", data: pseudo(1, 300_000), chunk: 1024}, {name: "b/x", data: pseudo(2, 10)}, {name: "empty"}})
	x, err := wtxt.ReadIndex(ctx, "", bytes.NewReader(w), int64(len(w)))
	if err != nil {
		t.Fatal(err)
	}
	var skel bytes.Buffer
	segs, err := wtxt.Split(ctx, bytes.NewReader(w), &skel, func(context.Context, wtxt.Segment, []byte) error { return nil }, wtxt.SplitOptions{SegmentSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var joined []byte
	m, err := layout.CutSkeleton(skel.Bytes(), x, segs, func(p layout.Part, d []byte) error {
		names = append(names, p.Name)
		joined = append(joined, d...)
		first, _, _ := strings.Cut(string(d), " ")
		if want := map[bool]string{true: "arr", false: "seg"}[strings.HasSuffix(p.Name, ".head.part")]; strings.HasPrefix(p.Name, "0000") {
			want = wtxt.SkeletonMagic[:len("WTXT-SKELETON")]
			if first != want {
				t.Errorf("%s starts with %q", p.Name, first)
			}
		} else if !strings.HasPrefix(p.Name, "9999") && first != want {
			t.Errorf("%s starts with %q, want %q", p.Name, first, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(joined, skel.Bytes()) || m.Bytes != int64(skel.Len()) {
		t.Fatalf("pieces are not the skeleton (%d of %d bytes)", len(joined), skel.Len())
	}
	// emb: 293 chunks in segments of 2 chunks, 64 segments a piece; an
	// empty array has one (empty) chunk.
	var want []string
	for _, p := range []string{"0000-header", "emb.head", "emb.s000000", "emb.s000128", "emb.s000256", "b/x.head", "b/x.s000000", "empty.head", "empty.s000000", "9999-trailer"} {
		if a, rest, ok := strings.Cut(p, "."); ok {
			p = layout.ArrayPartPrefix(a) + "." + rest
		}
		want = append(want, p+".part")
	}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("pieces\n%s\nwant\n%s", strings.Join(names, " "), strings.Join(want, " "))
	}
	emit := func(layout.Part, []byte) error { return nil }
	if _, err := layout.CutSkeleton(skel.Bytes(), x, segs[1:], emit); !errors.Is(err, layout.ErrSkeleton) {
		t.Errorf("one segment fewer: %v", err)
	}
	other := append([]wtxt.Segment(nil), segs...)
	other[3].FirstChunk++
	if _, err := layout.CutSkeleton(skel.Bytes(), x, other, emit); !errors.Is(err, layout.ErrSkeleton) {
		t.Errorf("a segment's first chunk moved: %v", err)
	}
	if _, err := layout.CutSkeleton(skel.Bytes()[:skel.Len()-3], x, segs, emit); !errors.Is(err, layout.ErrSkeleton) {
		t.Errorf("truncated: %v", err)
	}
}
