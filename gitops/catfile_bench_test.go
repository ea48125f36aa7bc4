package gitops

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/internal/testutil"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// BenchmarkSegmentsRead measures reading a segments-layout generation back
// (ReadSegments to io.Discard, what `snapd checkout` and verify-repo do)
// through GitTreeFS (git cat-file --batch) and through go-git's TreeFS, in
// the same run, in MB/s of WTXT written, with the CPU seconds per read
// of this process (self-cpu-s/op) and of the git children
// (git-cpu-s/op, 0 for go-git), and for cat-file the blobs git served
// per read (git-blobs/op) and how many of them had been requested ahead
// of their open (ahead-blobs/op).
//
// The repository holds SNAPD_BENCH_CAT_GENS generations (default 6) of
// one u8 model of SNAPD_BENCH_CAT_SIZE raw bytes (default 64 MiB) in
// 64 KiB chunks, 64 KiB segments of 16 KiB pieces (the defaults), each
// generation after the first rewriting every 4 KiB "row" with
// probability 2% (uniform change): every generation's new pieces go into
// a pack of their own, so the latest generation's pieces are spread over
// all of them, as in a long-running repository. Building it takes a while
// (about 15 s at 64 MiB on a loaded 2-core machine; 3 min and 8.5 GB RSS
// at 1 GiB, as each WTXT is generated in memory); the read is what is
// timed, SNAPD_BENCH_CAT_ROUNDS times (default 3) for each reader,
// interleaved, in one invocation (the repository is built once):
//
//	go test -run XXX -bench SegmentsRead -benchtime 2x ./gitops/
//
// With SNAPD_BENCH_CAT_DIR (an existing directory) the repository is
// built there and kept, and a later run with the same directory reads it
// again instead of building one (e.g. to compare two versions of the
// reader on the same repository; remove the directory afterwards).
func BenchmarkSegmentsRead(b *testing.B) {
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("git not installed")
	}
	size := catBenchEnv(b, "SNAPD_BENCH_CAT_SIZE", 64<<20)
	gens := int(catBenchEnv(b, "SNAPD_BENCH_CAT_GENS", 6))
	dir, segsHash, wtxtBytes := segsBenchRepo(b, size, gens)
	rounds := int(catBenchEnv(b, "SNAPD_BENCH_CAT_ROUNDS", 3))
	for i := 0; i < 2*rounds; i++ {
		// Interleaved, so both see the same load.
		v := []struct {
			name string
			git  bool
		}{{"cat-file", true}, {"go-git", false}}[i%2]
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(wtxtBytes)
			b.ReportAllocs()
			s0, c0 := testutil.CPUTime(b)
			served, ahead := 0, 0
			for range b.N {
				// A fresh go-git repository and tree each time, as
				// `snapd checkout` has (go-git caches subtrees and
				// objects).
				segs := segsBenchTree(b, dir, segsHash)
				ctx := context.Background()
				fsys, done := TreeFS(segs), func() {}
				if v.git {
					fsys, done = GitTreeFS(ctx, dir, segs)
				}
				info, err := layout.ReadSegments(ctx, fsys, io.Discard)
				if cf := fsys.(treeFS).cat; cf != nil {
					served += cf.served
					ahead += cf.ahead
				}
				done()
				if err != nil {
					b.Fatal(err)
				}
				if info.Written != wtxtBytes {
					b.Fatalf("wrote %d bytes, want %d", info.Written, wtxtBytes)
				}
			}
			s1, c1 := testutil.CPUTime(b)
			b.ReportMetric((s1-s0).Seconds()/float64(b.N), "self-cpu-s/op")
			b.ReportMetric((c1-c0).Seconds()/float64(b.N), "git-cpu-s/op")
			if v.git {
				b.ReportMetric(float64(served)/float64(b.N), "git-blobs/op")
				b.ReportMetric(float64(ahead)/float64(b.N), "ahead-blobs/op")
			}
		})
	}
}

// segsBenchTree opens the repository at dir afresh and returns tree h.
func segsBenchTree(b *testing.B, dir string, h plumbing.Hash) *object.Tree {
	r, err := git.PlainOpen(dir)
	if err != nil {
		b.Fatal(err)
	}
	t, err := r.TreeObject(h)
	if err != nil {
		b.Fatal(err)
	}
	return t
}

// segsBenchRepo builds the benchmark's repository (see
// BenchmarkSegmentsRead) and returns its directory, the latest
// generation's segments tree and that generation's WTXT size.
func segsBenchRepo(b *testing.B, size int64, gens int) (string, plumbing.Hash, int64) {
	b.Helper()
	dir := os.Getenv("SNAPD_BENCH_CAT_DIR")
	if dir == "" {
		dir = b.TempDir()
	} else if s, err := os.ReadFile(filepath.Join(dir, "bench.txt")); err == nil {
		// Kept from an earlier run (with its own size and gens).
		var h string
		var n int64
		if _, err := fmt.Sscan(string(s), &h, &n); err != nil || !plumbing.IsHash(h) {
			b.Fatalf("%s/bench.txt: want <tree> <wtxt bytes>", dir)
		}
		b.Logf("reusing %s", dir)
		return filepath.Join(dir, "repo.git"), plumbing.NewHash(h), n
	}
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	repoDir := filepath.Join(dir, "repo.git")
	r, err := OpenRepo(repoDir, Config{SigningKey: key, Layout: LayoutSegments})
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, size)
	testutil.Fill(data, 1)
	prev := ""
	var last *Result
	var wtxtBytes int64
	for g := 1; g <= gens; g++ {
		if g > 1 {
			for row := int64(0); row+4096 <= size; row += 4096 {
				if testutil.SplitMix(uint64(g)<<40^uint64(row))%100 < 2 {
					testutil.Fill(data[row:row+4096], uint64(g)<<40^uint64(row))
				}
			}
		}
		text, mt := genWTXT(uint64(g), prev, []testArray{{name: "w", data: data, chunk: 64 << 10}})
		prev = mt
		p := filepath.Join(dir, "g.wtxt")
		if err := os.WriteFile(p, text, 0o644); err != nil {
			b.Fatal(err)
		}
		wtxtBytes = int64(len(text))
		if last, err = r.Commit(context.Background(), Generation{WTXT: p}); err != nil {
			b.Fatalf("gen %d: %v", g, err)
		}
	}
	packs, _ := filepath.Glob(filepath.Join(repoDir, "objects", "pack", "*.pack"))
	if len(packs) < gens {
		b.Fatalf("%d packs for %d generations: the pieces are not spread over packs", len(packs), gens)
	}
	b.Logf("repository: %d generations of %d raw bytes, WTXT %d bytes, %d packs", gens, size, wtxtBytes, len(packs))
	c, err := r.r.CommitObject(last.Commit)
	if err != nil {
		b.Fatal(err)
	}
	root, err := c.Tree()
	if err != nil {
		b.Fatal(err)
	}
	segs, err := root.Tree(DefaultPath + "/" + DirWTXTSegs)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.txt"), fmt.Appendf(nil, "%s %d\n", segs.Hash, wtxtBytes), 0o644); err != nil {
		b.Fatal(err)
	}
	return repoDir, segs.Hash, wtxtBytes
}

func catBenchEnv(b *testing.B, k string, def int64) int64 {
	v := os.Getenv(k)
	if v == "" {
		return def
	}
	var n int64
	if _, err := fmt.Sscan(strings.TrimSpace(v), &n); err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", k, v)
	}
	return n
}
