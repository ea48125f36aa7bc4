package gitops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/snapd-ml/snapd/gitops/layout"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// segmentsDir commits one small WTXT in the segments layout (1 KiB
// segments) and returns its directory as a MapFS and the WTXT.
func segmentsDir(t testing.TB, seed int) (fstest.MapFS, []byte) {
	t.Helper()
	dir := t.TempDir()
	repoDir := filepath.Join(dir, "repo.git")
	r, err := OpenRepo(repoDir, Config{Layout: LayoutSegments, SegmentSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := genWTXT(1, "", []testArray{
		{name: "emb", data: pseudo(seed, 6000), chunk: 512},
		{name: "w.x", data: pseudo(seed+1, 700), chunk: 256},
		{name: "empty", data: nil},
	})
	p := writeFile(t, dir, "g.wtxt", data)
	res, err := r.Commit(context.Background(), Generation{WTXT: p})
	if err != nil {
		t.Fatal(err)
	}
	if res.Layout != LayoutSegments {
		t.Fatalf("layout %s", res.Layout)
	}
	return treeMapFS(t, repoDir, res.Tag, DefaultPath+"/"+DirWTXTSegs), data
}

func cloneFS(m fstest.MapFS) fstest.MapFS {
	out := fstest.MapFS{}
	for n, f := range m {
		out[n] = &fstest.MapFile{Data: bytes.Clone(f.Data), Mode: f.Mode}
	}
	return out
}

// TestReadSegmentsLocated: ReadSegments rebuilds the WTXT byte for byte and
// names the file (and check) at fault for each kind of damage.
func TestReadSegmentsLocated(t *testing.T) {
	ctx := context.Background()
	fsys, want := segmentsDir(t, 1)
	var out bytes.Buffer
	info, err := layout.ReadSegments(ctx, fsys, &out)
	if err != nil || !bytes.Equal(out.Bytes(), want) || info.Written != int64(len(want)) {
		t.Fatalf("ReadSegments: %v (%d bytes, want %d)", err, out.Len(), len(want))
	}
	var segs, pieces []string
	for n := range fsys {
		if !info.Paths[n] && !strings.HasSuffix(n, ".seg") {
			t.Errorf("%s not read", n)
		}
		switch {
		case strings.HasSuffix(n, ".seg"):
			segs = append(segs, n)
		case strings.HasSuffix(n, ".part"):
			pieces = append(pieces, n)
		}
	}
	slices.Sort(segs)
	slices.Sort(pieces)
	if len(segs) < 5 || info.Segments < 5 || info.Pieces != len(pieces) {
		t.Fatalf("%d segments in the tree, %d read, %d pieces (%d read)", len(segs), info.Segments, len(pieces), info.Pieces)
	}
	var embPiece string
	for _, p := range pieces {
		if strings.HasPrefix(p, "emb.") && strings.HasSuffix(p, ".s000000.part") {
			embPiece = p
		}
	}
	seg := segs[2]
	for _, tc := range []struct {
		name   string
		edit   func(m fstest.MapFS)
		path   string
		layout bool
		check  wtxt.Check // "" when the failure is not the assembler's
		msg    string
	}{
		{"flipped segment byte", func(m fstest.MapFS) { m[seg].Data[len(m[seg].Data)/2] ^= 1 }, seg, false, wtxt.CheckChunkSHA, "skeleton piece"},
		{"missing segment", func(m fstest.MapFS) { delete(m, seg) }, seg, false, wtxt.CheckBlob, "missing"},
		{"long segment", func(m fstest.MapFS) { m[seg].Data = append(m[seg].Data, 0) }, seg, false, wtxt.CheckBlob, "the seg line says"},
		{"segment is a directory", func(m fstest.MapFS) { delete(m, seg); m[seg+"/x"] = &fstest.MapFile{Data: []byte("x")} }, seg, true, wtxt.CheckBlob, "not a regular file"},
		{"flipped piece byte", func(m fstest.MapFS) { d := m[embPiece].Data; d[bytes.Index(d, []byte("ch ix="))+6] ^= 1 }, embPiece, false, "", "sha256"},
		{"flipped last piece byte", func(m fstest.MapFS) { d := m[embPiece].Data; d[len(d)-2] ^= 1 }, embPiece, false, "", "sha256"},
		{"short piece", func(m fstest.MapFS) { d := m[embPiece].Data; m[embPiece].Data = d[:len(d)-1] }, embPiece, false, "", "MANIFEST says"},
		{"missing piece", func(m fstest.MapFS) { delete(m, embPiece) }, embPiece, false, "", "missing"},
		{"MANIFEST naming a path outside", func(m fstest.MapFS) {
			m[layout.ManifestName].Data = bytes.Replace(m[layout.ManifestName].Data, []byte(embPiece), []byte("../"+embPiece), 1)
		}, layout.ManifestName, true, "", "bad part name"},
		{"MANIFEST missing", func(m fstest.MapFS) { delete(m, layout.ManifestName) }, layout.ManifestName, true, "", "missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := cloneFS(fsys)
			tc.edit(m)
			var out bytes.Buffer
			_, err := layout.ReadSegments(ctx, m, &out)
			var se *layout.SegmentsError
			if !errors.As(err, &se) || !errors.Is(err, layout.ErrSkeleton) {
				t.Fatalf("err %v, want a *layout.SegmentsError", err)
			}
			if se.Path != tc.path || se.Layout != tc.layout || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("%v: path %q layout %v, want %q %v ...%s...", err, se.Path, se.Layout, tc.path, tc.layout, tc.msg)
			}
			var we *wtxt.Error
			if tc.check != "" && (!errors.As(err, &we) || we.Check != tc.check) {
				t.Fatalf("%v: want wtxt check %s", err, tc.check)
			}
			if tc.check == "" && errors.As(err, &we) {
				t.Fatalf("%v: the piece's own failure should be named, not the assembler's %s", err, we.Check)
			}
			t.Log(err)
		})
	}

	// A cancelled context stops the read.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := layout.ReadSegments(cctx, fsys, &out); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// archive encodes a MapFS as fuzz input: for each file (sorted) a line
// "<name> <len>\n" and the bytes.
func archive(m fstest.MapFS) []byte {
	var b bytes.Buffer
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "%s %d\n", n, len(m[n].Data))
		b.Write(m[n].Data)
	}
	return b.Bytes()
}

// unarchive decodes archive's form, leniently: it stops at the first
// malformed entry.
func unarchive(b []byte) fstest.MapFS {
	m := fstest.MapFS{}
	for len(b) > 0 && len(m) < 1000 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		name, size, ok := strings.Cut(string(b[:i]), " ")
		n, err := strconv.Atoi(size)
		if !ok || err != nil || n < 0 || n > len(b)-i-1 {
			break
		}
		if fs.ValidPath(name) && name != "." {
			m[name] = &fstest.MapFile{Data: b[i+1 : i+1+n]}
		}
		b = b[i+1+n:]
	}
	return m
}

// FuzzReadSegments: any segments directory gives the WTXT or a located
// *SegmentsError, never a panic; what it accepts is framed as a WTXT
// ("WTXT 1" ... "endwtxt"), every byte counted, and read again gives the
// same bytes. Seeds: testdata/fuzz/FuzzReadSegments (written by
// TestWriteFuzzSeeds from real commits).
func FuzzReadSegments(f *testing.F) {
	requireSeeds(f, "FuzzReadSegments")
	f.Fuzz(func(t *testing.T, b []byte) {
		fsys := unarchive(b)
		var out bytes.Buffer
		info, err := layout.ReadSegments(context.Background(), fsys, &out)
		if err != nil {
			var se *layout.SegmentsError
			if !errors.As(err, &se) || !errors.Is(err, layout.ErrSkeleton) {
				t.Fatalf("error is not a *SegmentsError: %v", err)
			}
			return
		}
		w := out.Bytes()
		if !bytes.HasPrefix(w, []byte("WTXT 1\n")) || !bytes.HasSuffix(w, []byte("endwtxt\n")) || info.Written != int64(len(w)) {
			t.Fatalf("accepted output is not a framed WTXT (%d bytes, %d counted)", len(w), info.Written)
		}
		var again bytes.Buffer
		if _, err := layout.ReadSegments(context.Background(), fsys, &again); err != nil || !bytes.Equal(again.Bytes(), w) {
			t.Fatalf("second read differs: %v", err)
		}
	})
}

// requireSeeds fails a fuzz target whose seed corpus in testdata is empty.
func requireSeeds(f *testing.F, target string) {
	f.Helper()
	if m, _ := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*")); len(m) == 0 {
		f.Fatalf("no seeds in testdata/fuzz/%s (SNAPD_WRITE_FUZZ_SEEDS=1 go test -run TestWriteFuzzSeeds ./gitops writes them)", target)
	}
}

// TestWriteFuzzSeeds writes the seed corpora of FuzzSplit and
// FuzzReadSegments into testdata/fuzz when SNAPD_WRITE_FUZZ_SEEDS=1
// (FuzzSplit's in layout/testdata/fuzz; they are committed; this documents
// how they were made).
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("SNAPD_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set SNAPD_WRITE_FUZZ_SEEDS=1 to rewrite layout/testdata/fuzz/FuzzSplit and testdata/fuzz/FuzzReadSegments")
	}
	write := func(target, name string, b []byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if target == "FuzzSplit" { // the parts splitter's, in gitops/layout
			dir = filepath.Join("layout", dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte("go test fuzz v1\n[]byte("+strconv.Quote(string(b))+")\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	small, _ := genWTXT(3, "", []testArray{{name: "a", data: pseudo(1, 700), chunk: 128}, {name: "b.c", data: nil}, {name: "d", data: pseudo(2, 60)}})
	w, _ := genWTXT(1, "", []testArray{{name: "x", data: pseudo(1, 5000), chunk: 100}})
	for name, b := range map[string][]byte{
		"small-wtxt":       small,
		"empty-wtxt":       []byte("WTXT 1\nendwtxt\n"),
		"array-no-chunks":  []byte("WTXT 1\nmeta gen=000001\narr name=x\nendarr\naudit a=\"b\"\nendwtxt\n"),
		"not-wtxt":         []byte("hello\nworld"),
		"many-small-chunk": w,
	} {
		write("FuzzSplit", name, b)
	}
	for i := 1; i <= 2; i++ {
		fsys, _ := segmentsDir(t, i)
		write("FuzzReadSegments", fmt.Sprintf("commit-%d", i), archive(fsys))
	}
	fsys, _ := segmentsDir(t, 3)
	for n, f := range fsys {
		if strings.HasSuffix(n, ".seg") {
			f.Data[0] ^= 1
			break
		}
	}
	write("FuzzReadSegments", "damaged-segment", archive(fsys))
}
