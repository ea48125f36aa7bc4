package gitops

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// TestPackZeroSizeTensorManyArraysPushes: a checkpoint with a zero-size
// tensor among 120 arrays, in the segments layout, goes into a pack
// (enough new objects) whose empty blob git can read: the commit passes
// git index-pack --strict (TestMain's EnvCheckPacks) and git fsck
// --strict, the real pusher sends it and a second generation to a bare
// remote, which is fsck --strict clean too and holds the same branch
// head. With the old writer the empty blob was a 2-3 byte literal delta
// ("failed to apply delta") and every push failed.
func TestPackZeroSizeTensorManyArraysPushes(t *testing.T) {
	key, _ := testKey(t)
	dir := t.TempDir()
	base := []testArray{{name: "empty", data: nil}}
	for i := 0; i < 120; i++ {
		base = append(base, testArray{name: fmt.Sprintf("layer%03d.w", i), data: pseudo(i+1, 300+i), chunk: 256})
	}
	chain := genChain(t, dir, 2, base, func(g int, a []testArray) {
		if g == 2 {
			a[5].data[7] ^= 1
		}
	})
	repoDir := filepath.Join(dir, "repo.git")
	r, err := OpenRepo(repoDir, Config{SigningKey: key, Layout: LayoutSegments})
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
	var last *Result
	for i, path := range chain.paths {
		res, err := r.Commit(ctx, Generation{WTXT: path})
		if err != nil {
			t.Fatalf("gen %d: %v", i+1, err)
		}
		if err := p.Push(ctx, PushRequest{Branch: DefaultBranch, Commit: res.Commit, Tag: res.Tag}); err != nil {
			t.Fatalf("push gen %d: %v", i+1, err)
		}
		last = res
	}
	packs, _ := filepath.Glob(filepath.Join(repoDir, "objects", "pack", "*.pack"))
	if len(packs) == 0 {
		t.Fatal("generation 1 was not packed: the test does not reach the pack writer")
	}
	gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")
	gitCmd(t, remote, "fsck", "--strict", "--no-dangling")
	if got := strings.TrimSpace(gitCmd(t, remote, "rev-parse", "refs/heads/"+DefaultBranch)); got != last.Commit.String() {
		t.Fatalf("remote head %s, want %s", got, last.Commit)
	}
	// The empty blob is in the local pack, whole.
	empty := plumbing.ComputeHash(plumbing.BlobObject, nil).String()
	found := false
	for _, idx := range globIdx(repoDir) {
		for _, l := range strings.Split(gitCmd(t, repoDir, "verify-pack", "-v", idx), "\n") {
			if f := strings.Fields(l); len(f) >= 5 && f[0] == empty {
				found = true
				if len(f) != 5 {
					t.Fatalf("the empty blob is stored as a delta: %s", l)
				}
			}
		}
	}
	if !found {
		t.Fatal("the empty blob is not in a pack: the test does not reach the pack writer")
	}
	var out bytes.Buffer
	if err := r.WriteWTXT(last.Tag, &out); err != nil || !bytes.Equal(out.Bytes(), chain.data[1]) {
		t.Fatalf("WriteWTXT %s: %v", last.Tag, err)
	}
}

// TestPackWriterSmallBlobsWhole: literal deltas are written only for
// blobs of literalMinSize bytes and more, against a default base and
// against a large piece base (whose size takes more header bytes); every
// delta git finds in the pack is at least deltaSizeMin bytes long, and
// the pack passes git index-pack --verify --strict.
func TestPackWriterSmallBlobsWhole(t *testing.T) {
	for _, baseSize := range []int{10, 200, 20_000} {
		t.Run(strconv.Itoa(baseSize), func(t *testing.T) {
			repoDir := filepath.Join(t.TempDir(), "repo.git")
			gitCmd(t, filepath.Dir(repoDir), "init", "-q", "--bare", repoDir)
			p := newPackWriter(filepath.Join(repoDir, "objects"))
			checked := 0
			check := indexPackCheck(context.Background(), repoDir)
			p.check = func(pack, idx string, sum plumbing.Hash) error {
				checked++
				return check(pack, idx, sum)
			}
			defer p.abort()
			attrs := pseudo(1, baseSize)
			p.setDeltaBase(plumbing.ComputeHash(plumbing.BlobObject, attrs), attrs)
			pieceBase := pseudo(2, baseSize)
			pbh := plumbing.ComputeHash(plumbing.BlobObject, pieceBase)
			add := func(data []byte, r repr) plumbing.Hash {
				t.Helper()
				h := plumbing.ComputeHash(plumbing.BlobObject, data)
				if _, err := p.add(plumbing.BlobObject, h, data, r); err != nil {
					t.Fatal(err)
				}
				return h
			}
			add(pieceBase, repr{asBase: true})
			sizes := map[plumbing.Hash]int{}
			for n := 0; n < 2*literalMinSize; n++ {
				sizes[add(pseudo(100+n, n), repr{literal: true})] = n
			}
			// One piece against its own base, one empty against it.
			sizes[add(nil, repr{literal: true, base: pbh})] = 0
			// Enough filler to start the pack.
			for i := 0; i < packMinObjects; i++ {
				sizes[add(pseudo(1000+i, 64+i), repr{literal: true})] = 64 + i
			}
			added, err := p.finish()
			if err != nil || !added {
				t.Fatalf("finish: %v, %v", added, err)
			}
			if checked != 1 {
				t.Fatalf("check ran %d times, want 1", checked)
			}
			idx := globIdx(repoDir)
			if len(idx) != 1 {
				t.Fatalf("packs: %v", idx)
			}
			deltas := 0
			for _, l := range strings.Split(gitCmd(t, repoDir, "verify-pack", "-v", idx[0]), "\n") {
				// SHA-1 type size size-in-pack offset [depth base]
				f := strings.Fields(l)
				if len(f) < 5 || f[1] != "blob" {
					continue
				}
				n, ok := sizes[plumbing.NewHash(f[0])]
				if !ok {
					continue
				}
				isDelta := len(f) == 7
				if isDelta != (n >= literalMinSize) {
					t.Errorf("blob of %d bytes: delta %v (%s)", n, isDelta, l)
				}
				if isDelta {
					deltas++
					if sz, _ := strconv.Atoi(f[2]); sz < deltaSizeMin {
						t.Errorf("delta of %d bytes: %s", sz, l)
					}
				}
			}
			if deltas < packMinObjects {
				t.Fatalf("%d deltas", deltas)
			}
			gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling", "--unreachable")
		})
	}
}

// TestIndexPackCheckRefusesShortDelta: the pack check (EnvCheckPacks)
// refuses a pack holding a delta shorter than git's minimum (what the
// old writer made of an empty blob), and finish then installs nothing.
func TestIndexPackCheckRefusesShortDelta(t *testing.T) {
	repoDir := filepath.Join(t.TempDir(), "repo.git")
	gitCmd(t, filepath.Dir(repoDir), "init", "-q", "--bare", repoDir)
	objs := filepath.Join(repoDir, "objects")
	p := newPackWriter(objs)
	p.check = indexPackCheck(context.Background(), repoDir)
	defer p.abort()
	base := pseudo(1, 300)
	p.setDeltaBase(plumbing.ComputeHash(plumbing.BlobObject, base), base)
	for i := 0; i < packMinObjects+1; i++ {
		data := pseudo(10+i, 64)
		if _, err := p.add(plumbing.BlobObject, plumbing.ComputeHash(plumbing.BlobObject, data), data, repr{literal: true}); err != nil {
			t.Fatal(err)
		}
	}
	// The old writer's entry for an empty blob against a 300-byte base:
	// the two sizes and no instruction, 3 bytes.
	d := []byte{0xac, 0x02, 0x00}
	hdr := ofsDeltaHeader(len(d), p.off-p.baseOff)
	if err := p.write(plumbing.BlobObject, plumbing.ComputeHash(plumbing.BlobObject, nil), nil, hdr, d); err != nil {
		t.Fatal(err)
	}
	_, err := p.finish()
	if err == nil || !strings.Contains(err.Error(), "failed to apply delta") {
		t.Fatalf("finish: %v, want the check's error", err)
	}
	if left := globIdx(repoDir); len(left) != 0 {
		t.Fatalf("installed: %v", left)
	}
	ents, _ := os.ReadDir(filepath.Join(objs, "pack"))
	for _, e := range ents {
		t.Errorf("left in objects/pack: %s", e.Name())
	}
}

func globIdx(repo string) []string {
	m, _ := filepath.Glob(filepath.Join(repo, "objects", "pack", "*.idx"))
	return m
}
