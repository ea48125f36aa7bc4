package gitops

import (
	"bytes"
	"context"
	"errors"
	"github.com/snapd-ml/snapd/gitops/layout"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/go-git/go-git/v5/plumbing"
)

// TestSegmentPieces: with Config.SegmentPiece a segment larger than the
// piece size is a tree of pieces; a change inside one chunk then stores
// only the piece holding it, every generation reassembles byte for byte
// (from the repository, a MapFS of its tree and a directory on disk), a
// repository mixing both forms (SegmentPiece changed between
// generations) reads back, and damaged piece lists are refused with an
// error naming the piece.
func TestSegmentPieces(t *testing.T) {
	key, _ := testKey(t)
	dir := t.TempDir()
	base := []testArray{
		{name: "emb", data: pseudo(1, 200_000), chunk: 8192},
		{name: "b", data: pseudo(2, 100)},
	}
	chain := genChain(t, dir, 3, base, func(g int, a []testArray) {
		if g > 1 {
			a[0].data[8192*(5*g)+4000] ^= byte(g) // the second 3000-byte piece of one chunk
		}
	})
	ctx := context.Background()
	commitAll := func(name string, piece func(gen int) int64) (string, []*Result) {
		repoDir := filepath.Join(dir, name)
		var rs []*Result
		for i, p := range chain.paths {
			r, err := OpenRepo(repoDir, Config{SigningKey: key, Layout: LayoutSegments, SegmentSize: 8192, SegmentPiece: piece(i + 1)})
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.Commit(ctx, Generation{WTXT: p})
			if err != nil {
				t.Fatalf("%s gen %d: %v", name, i+1, err)
			}
			var out bytes.Buffer
			if err := r.WriteWTXT(res.Tag, &out); err != nil || !bytes.Equal(out.Bytes(), chain.data[i]) {
				t.Fatalf("%s: WriteWTXT %s: %v (equal %v)", name, res.Tag, err, bytes.Equal(out.Bytes(), chain.data[i]))
			}
			rs = append(rs, res)
		}
		gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")
		return repoDir, rs
	}
	pieced, withPieces := commitAll("pieces.git", func(int) int64 { return 3000 })
	_, whole := commitAll("whole.git", func(int) int64 { return -1 })
	// Every later generation stores one 3000-byte piece and its base blob
	// instead of the 8192-byte segment; the text (skeleton pieces,
	// MANIFEST, summary) is the same.
	baseLen := int64(len(layout.PieceBase(plumbing.ZeroHash)))
	for g := 1; g < 3; g++ {
		if d := whole[g].BytesWritten - withPieces[g].BytesWritten; d != 8192-3000-baseLen || withPieces[g].BlobsWritten != whole[g].BlobsWritten+1 {
			t.Fatalf("gen %d: pieces wrote %d blobs, %d bytes; whole segments %d blobs, %d bytes", g+1,
				withPieces[g].BlobsWritten, withPieces[g].BytesWritten, whole[g].BlobsWritten, whole[g].BytesWritten)
		}
	}
	// Mixed forms in one history, both ways round.
	commitAll("mixed.git", func(g int) int64 { return map[int]int64{1: -1, 2: 3000, 3: -1}[g] })
	commitAll("mixed2.git", func(g int) int64 { return map[int]int64{1: 3000, 2: -1, 3: 3000}[g] })

	// The stored form: emb's 8192-byte segments are trees of p000000..2,
	// each piece with its base blob b000000..2.
	tree := gitCmd(t, pieced, "ls-tree", "-r", "-t", "gen-000003:snapshots/"+DirWTXTSegs+"/seg")
	if n := strings.Count(tree, " tree "); n < 24 || !strings.Contains(tree, ".seg/p000002") || strings.Contains(tree, ".seg/p000003") ||
		strings.Count(tree, ".seg/b0000") != strings.Count(tree, ".seg/p0000") {
		t.Fatalf("%d trees in seg/:\n%s", n, tree)
	}

	// Read from a MapFS of the tree and from a directory on disk.
	fsys := treeMapFS(t, pieced, "gen-000003", "snapshots/"+DirWTXTSegs)
	var out bytes.Buffer
	if err := layout.AssembleSkeletonFS(ctx, fsys, ".", &out); err != nil || !bytes.Equal(out.Bytes(), chain.data[2]) {
		t.Fatalf("AssembleSkeletonFS(MapFS): %v", err)
	}
	disk := filepath.Join(dir, "checkout")
	for name, f := range fsys {
		p := filepath.Join(disk, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	if err := layout.AssembleSkeletonFS(ctx, os.DirFS(disk), ".", &out); err != nil || !bytes.Equal(out.Bytes(), chain.data[2]) {
		t.Fatalf("AssembleSkeletonFS(os.DirFS): %v", err)
	}

	// Damaged piece lists.
	var seg string // a pieced segment's directory
	for name := range fsys {
		if strings.HasSuffix(name, ".seg/p000002") {
			seg = strings.TrimSuffix(name, "/p000002")
			break
		}
	}
	if seg == "" {
		t.Fatal("no pieced segment in the MapFS")
	}
	for _, c := range []struct {
		name string
		edit func(m fstest.MapFS)
		want string
	}{
		{"missing middle piece", func(m fstest.MapFS) { delete(m, seg+"/p000001") }, "piece 1 missing"},
		{"missing last piece", func(m fstest.MapFS) { delete(m, seg+"/p000002") }, "piece 2 missing"},
		{"no pieces", func(m fstest.MapFS) {
			for k := range m {
				if strings.HasPrefix(k, seg+"/") {
					delete(m, k)
				}
			}
		}, "not found"},
		{"extra piece", func(m fstest.MapFS) { m[seg+"/p000003"] = &fstest.MapFile{Data: []byte("x")} }, "piece past the segment's size"},
		{"empty piece", func(m fstest.MapFS) {
			m[seg+"/p000001"] = &fstest.MapFile{}
		}, "piece 1: empty"},
		{"longer last piece", func(m fstest.MapFS) {
			m[seg+"/p000002"] = &fstest.MapFile{Data: append(bytes.Clone(m[seg+"/p000002"].Data), 0)}
		}, "longer than the segment's size"},
		{"changed byte", func(m fstest.MapFS) {
			d := bytes.Clone(m[seg+"/p000001"].Data)
			d[7] ^= 1
			m[seg+"/p000001"] = &fstest.MapFile{Data: d}
		}, ""},
	} {
		bad := fstest.MapFS{}
		for k, v := range fsys {
			bad[k] = v
		}
		c.edit(bad)
		out.Reset()
		err := layout.AssembleSkeletonFS(ctx, bad, ".", &out)
		if !errors.Is(err, layout.ErrSkeleton) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

// TestWritePiecesFuzzSeed writes the FuzzReadSegments seed of a segments
// directory whose segments are stored as pieces, when
// SNAPD_WRITE_FUZZ_SEEDS=1 (the seed is committed; this documents how).
func TestWritePiecesFuzzSeed(t *testing.T) {
	if os.Getenv("SNAPD_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set SNAPD_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz/FuzzReadSegments/pieces")
	}
	key, _ := testKey(t)
	dir := t.TempDir()
	chain := genChain(t, dir, 1, []testArray{{name: "p", data: pseudo(5, 2000), chunk: 700}}, nil)
	repoDir := filepath.Join(dir, "r.git")
	r, err := OpenRepo(repoDir, Config{SigningKey: key, Layout: LayoutSegments, SegmentSize: 700, SegmentPiece: 300})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Commit(context.Background(), Generation{WTXT: chain.paths[0]}); err != nil {
		t.Fatal(err)
	}
	fsys := treeMapFS(t, repoDir, "gen-000001", "snapshots/"+DirWTXTSegs)
	var out bytes.Buffer
	if _, err := layout.ReadSegments(context.Background(), fsys, &out); err != nil || !bytes.Equal(out.Bytes(), chain.data[0]) {
		t.Fatalf("ReadSegments: %v", err)
	}
	b := archive(fsys)
	p := filepath.Join("testdata", "fuzz", "FuzzReadSegments", "pieces")
	if err := os.WriteFile(p, []byte("go test fuzz v1\n[]byte("+strconv.Quote(string(b))+")\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPieceOfBase: only seg/<hh>/<hex64>.seg/bNNNNNN (six digits) names
// a piece's base blob, and its piece is pNNNNNN beside it.
func TestPieceOfBase(t *testing.T) {
	const dir = "seg/ab/" + "ab00000000000000000000000000000000000000000000000000000000000000.seg/"
	for name, want := range map[string]string{
		dir + "b000003":    dir + "p000003",
		dir + "b123456":    dir + "p123456",
		dir + "b00003":     "",
		dir + "b0000003":   "",
		dir + "b00000x":    "",
		dir + "p000003":    "",
		dir + "b-00003":    "",
		"seg/ab/x/b000003": "",
		"b000003":          "",
		"other/ab/" + "ab00000000000000000000000000000000000000000000000000000000000000.seg/b000003": "",
	} {
		got, ok := layout.PieceOfBase(name)
		if got != want || ok != (want != "") {
			t.Errorf("PieceOfBase(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}
