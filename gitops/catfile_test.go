package gitops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/internal/testutil"

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
// the skeleton pieces are held open), every segment piece requested
// ahead from ReadSegments' hints, and yields the committed WTXT.
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
	info, err := layout.ReadSegments(context.Background(), fsys, &out)
	if err != nil || !bytes.Equal(out.Bytes(), chain.data[0]) {
		t.Fatalf("ReadSegments: %v", err)
	}
	// MANIFEST, the skeleton pieces and every segment piece (info.Paths
	// also lists each pieced segment's directory, which is no blob).
	if cf.refused != 0 || cf.served < len(info.Paths)/2 || cf.served < 100 {
		t.Fatalf("git served %d blobs, refused %d, of %d paths", cf.served, cf.refused, len(info.Paths))
	}
	// Pipelined: every segment piece was requested before it was opened
	// (the MANIFEST and skeleton pieces were not hinted), none in vain.
	if cf.ahead < cf.served-info.Pieces-1 || cf.skipped != 0 || len(cf.stash) != 0 {
		t.Fatalf("git served %d blobs, %d requested ahead, %d skipped, %d kept; %d skeleton pieces", cf.served, cf.ahead, cf.skipped, len(cf.stash), info.Pieces)
	}

	// Prefetch: a pieced segment's directory stands for its pieces in
	// order, a file for itself; names that do not exist, a directory of
	// no pieces and invalid names are ignored. Opened out of that order,
	// every file is still the one go-git reads.
	var dirs []string
	for p := range info.Paths {
		if strings.HasPrefix(p, "seg/") && !strings.Contains(strings.TrimPrefix(p, "seg/"), ".seg/") && fsys.(treeFS).IsDir(p) {
			dirs = append(dirs, p)
		}
	}
	if len(dirs) < 2 {
		t.Fatalf("%d pieced segments", len(dirs))
	}
	sort.Strings(dirs)
	var want []string
	for k := 0; ; k++ {
		p := fmt.Sprintf("%s/"+layout.SegPieceFmt, dirs[0], k)
		if !info.Paths[p] {
			break
		}
		want = append(want, p)
	}
	want = append(want, layout.ManifestName)
	served := cf.served
	fsys.(layout.Prefetcher).Prefetch("nope", "seg/00/nope.seg", "seg", "../x", dirs[0], layout.ManifestName, "/abs")
	if len(cf.queue) != len(want) || len(want) < 3 {
		t.Fatalf("Prefetch queued %d requests, want %d", len(cf.queue), len(want))
	}
	plain := TreeFS(segs)
	for _, i := range append([]int{2, 0, len(want) - 1}, 1) {
		f, err := fsys.Open(want[i])
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		g, _ := plain.Open(want[i])
		ref, _ := io.ReadAll(g)
		if err != nil || !bytes.Equal(got, ref) || len(ref) == 0 {
			t.Fatalf("%s: %d bytes, go-git %d: %v", want[i], len(got), len(ref), err)
		}
	}
	if cf.served-served != 4 || cf.err != nil {
		t.Fatalf("git served %d of 4 (%v)", cf.served-served, cf.err)
	}
}

// catFixture is a bare repository holding n small distinct blobs, an
// empty one and one bigger than catBuffered, with their ids, and a
// cat-file child on it (closed at the end of the test).
type catFixture struct {
	repo  string
	small [][]byte
	ids   []plumbing.Hash
	big   []byte
	bigID plumbing.Hash
	cf    *catFile
}

func newCatFixture(t *testing.T, ctx context.Context, n int) *catFixture {
	t.Helper()
	dir := t.TempDir()
	gitCmd(t, dir, "init", "-q", "--bare", "r.git")
	fx := &catFixture{repo: filepath.Join(dir, "r.git"), big: pseudo(7, catBuffered+54321)}
	hash := func(name string, data []byte) plumbing.Hash {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return plumbing.NewHash(strings.TrimSpace(gitCmd(t, fx.repo, "hash-object", "-w", p)))
	}
	for i := range n {
		data := pseudo(100+i, 1000+37*i)
		if i == 0 {
			data = nil
		}
		fx.small = append(fx.small, data)
		fx.ids = append(fx.ids, hash(fmt.Sprintf("s%d", i), data))
	}
	fx.bigID = hash("big", fx.big)
	cf, err := startCatFile(ctx, fx.repo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cf.Close() })
	fx.cf = cf
	return fx
}

// read opens h through the child and checks it holds want.
func (fx *catFixture) read(t *testing.T, h plumbing.Hash, want []byte) {
	t.Helper()
	rc, size, busy, err := fx.cf.open(h)
	if err != nil || busy || size != int64(len(want)) {
		t.Fatalf("open %s: size %d (want %d) busy %v err %v", h, size, len(want), busy, err)
	}
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %s: %d bytes, want %d: %v", h, len(got), len(want), err)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCatFilePipelined: hinted blobs are requested ahead (at most
// catWindow outstanding) and served from the answers already asked for,
// in hint order; an open out of hint order is still the right blob (the
// answers before it kept for later or skipped), as is one never hinted;
// a hint naming a blob git lacks costs nothing but its answer; a big blob
// streams while requests are queued behind it.
func TestCatFilePipelined(t *testing.T) {
	fx := newCatFixture(t, context.Background(), 150)
	cf := fx.cf

	// In order, more hints than the window.
	cf.hint(fx.ids...)
	if len(cf.queue) != catWindow || len(cf.hints) != len(fx.ids)-catWindow {
		t.Fatalf("after hinting %d: %d requested, %d held; want %d requested", len(fx.ids), len(cf.queue), len(cf.hints), catWindow)
	}
	for i, h := range fx.ids {
		fx.read(t, h, fx.small[i])
		if len(cf.queue) > catWindow {
			t.Fatalf("%d requests outstanding", len(cf.queue))
		}
	}
	if cf.ahead != len(fx.ids) || cf.skipped != 0 || cf.served != len(fx.ids) || len(cf.queue) != 0 || len(cf.hints) != 0 {
		t.Fatalf("in order: served %d, ahead %d, skipped %d, %d queued, %d held", cf.served, cf.ahead, cf.skipped, len(cf.queue), len(cf.hints))
	}

	// Out of order: 3 first (1 and 2 are kept), then 1, 2, 4, 5 and one
	// never hinted (7, requested behind the queue; 6 is passed over).
	cf.hint(fx.ids[1:7]...)
	served, ahead := cf.served, cf.ahead
	for _, i := range []int{3, 1, 2, 4, 5, 7, 6} {
		fx.read(t, fx.ids[i], fx.small[i])
	}
	if cf.served-served != 7 || cf.ahead-ahead < 5 || len(cf.stash) != 0 || cf.stashBytes != 0 {
		t.Fatalf("out of order: served %d, ahead %d, %d kept (%d bytes)", cf.served-served, cf.ahead-ahead, len(cf.stash), cf.stashBytes)
	}

	// A hint naming a missing blob: its "missing" answer is passed over,
	// and opening it is errCatMissing with the child still usable.
	missing := plumbing.NewHash(strings.Repeat("cd", 20))
	cf.hint(fx.ids[10], missing, fx.ids[11], missing)
	fx.read(t, fx.ids[11], fx.small[11])
	fx.read(t, fx.ids[10], fx.small[10])
	if _, _, _, err := cf.open(missing); !errors.Is(err, errCatMissing) {
		t.Fatalf("missing hinted blob: %v", err)
	}
	fx.read(t, fx.ids[12], fx.small[12])

	// A big blob with requests queued behind it: it streams, the child
	// is busy (opens refused, nothing more requested) until it is closed,
	// and the answers behind it are then served as requested.
	cf.hint(fx.ids[20], fx.bigID, fx.ids[21], fx.ids[22])
	fx.read(t, fx.ids[20], fx.small[20])
	rc, size, busy, err := cf.open(fx.bigID)
	if err != nil || busy || size != int64(len(fx.big)) {
		t.Fatalf("open big: %d %v %v", size, busy, err)
	}
	if _, _, busy, _ := cf.open(fx.ids[21]); !busy {
		t.Fatal("open while the big blob streams: want busy")
	}
	cf.hint(fx.ids[23])
	if len(cf.queue) != 2 || len(cf.hints) != 1 {
		t.Fatalf("while busy: %d requested, %d held; want 2 and 1", len(cf.queue), len(cf.hints))
	}
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, fx.big) {
		t.Fatalf("big blob: %d bytes, %v", len(got), err)
	}
	rc.Close()
	ahead = cf.ahead
	for _, i := range []int{21, 22, 23} {
		fx.read(t, fx.ids[i], fx.small[i])
	}
	if cf.ahead-ahead != 3 {
		t.Fatalf("after the big blob: %d of 3 served ahead", cf.ahead-ahead)
	}
	// Closed early, with requests behind it: the rest is skipped.
	cf.hint(fx.bigID, fx.ids[30], fx.ids[31])
	rc, _, _, err = cf.open(fx.bigID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rc, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	fx.read(t, fx.ids[30], fx.small[30])
	fx.read(t, fx.bigID, fx.big) // not hinted: after 31's answer
	fx.read(t, fx.ids[31], fx.small[31])
	// A blob read whole hands its buffer back on Close: no reads after.
	rc, _, _, err = cf.open(fx.ids[40])
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if n, err := rc.Read(make([]byte, 10)); n != 0 || !errors.Is(err, os.ErrClosed) {
		t.Fatalf("read after Close: %d, %v", n, err)
	}
	fx.read(t, fx.ids[41], fx.small[41])
	if cf.err != nil {
		t.Fatalf("child unusable: %v", cf.err)
	}
}

// TestCatFileHintThenClose: Close with requests outstanding (git blocked
// writing answers nobody reads, big ones among them) ends the child at
// once and leaves no goroutine behind; the child is then refused.
func TestCatFileHintThenClose(t *testing.T) {
	before := runtime.NumGoroutine()
	fx := newCatFixture(t, context.Background(), 20)
	hs := append([]plumbing.Hash{}, fx.ids...)
	for range 10 {
		hs = append(hs, fx.bigID) // ~10 MiB of answers: more than the pipe holds
	}
	fx.cf.hint(hs...)
	if len(fx.cf.queue) != len(hs) {
		t.Fatalf("%d requested of %d", len(fx.cf.queue), len(hs))
	}
	if err := fx.cf.Close(); err != nil {
		t.Fatal(err)
	}
	if st := fx.cf.cmd.ProcessState(); st == nil || st.Success() {
		t.Fatalf("child after Close: %v", st)
	}
	if _, _, _, err := fx.cf.open(fx.ids[1]); err == nil {
		t.Fatal("open after Close succeeded")
	}
	fx.cf.hint(fx.ids[2]) // ignored
	// exec's context watcher may still be returning (on a loaded
	// machine, for longer than a thousand yields): wait for it, up to the
	// failure guard.
	guard := time.Now().Add(testutil.Guard)
	for runtime.NumGoroutine() > before {
		if time.Now().After(guard) {
			t.Fatalf("%d goroutines after Close, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCatFileCancel: cancelling the context kills the child; the answers
// that reached us before are still right, then every open fails (none
// hangs).
func TestCatFileCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	fx := newCatFixture(t, ctx, 40)
	fx.cf.hint(fx.ids...)
	fx.read(t, fx.ids[0], fx.small[0])
	cancel()
	for i := 1; ; i++ {
		if i == 10*len(fx.ids) {
			t.Fatal("opens still succeed after cancel")
		}
		rc, _, _, err := fx.cf.open(fx.ids[i%len(fx.ids)])
		if err != nil {
			break
		}
		got, err := io.ReadAll(rc)
		if err != nil || !bytes.Equal(got, fx.small[i%len(fx.ids)]) {
			t.Fatalf("blob %d after cancel: %d bytes, %v", i, len(got), err)
		}
	}
	if _, _, _, err := fx.cf.open(fx.ids[1]); err == nil {
		t.Fatal("open after a failure succeeded")
	}
}
