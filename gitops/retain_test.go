package gitops

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/snapd-ml/snapd/internal/gittest"
)

// retainChain writes n generations of one array whose every chunk
// changes each generation (dense: every generation adds its full size to
// the repository).
func retainChain(t *testing.T, dir string, n int) genFiles {
	t.Helper()
	return genChain(t, dir, n, []testArray{{name: "w", data: pseudo(5, 60_000), chunk: 1024}}, func(g int, a []testArray) {
		if g > 1 {
			copy(a[0].data, pseudo(100+g, len(a[0].data)))
		}
	})
}

// objectBytes is the size of the repository's object store.
func objectBytes(t *testing.T, repoDir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(filepath.Join(repoDir, "objects"), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRetainShallowWithRealGit: after each push (to a file and an HTTP
// remote) Retain keeps the newest K pushed generations plus everything
// not pushed: the boundary is in the shallow file, older tags are gone,
// the object store stays bounded, git fsck is clean, commits and pushes
// (branch and tags) go on, and what snapd reads from the local
// repository (Log, ResolveGen, LiveGeneration, WriteWTXT, the chain head)
// works on the kept history; an older generation is ErrPruned. A
// generation whose push is pending is never cut.
func TestRetainShallowWithRealGit(t *testing.T) {
	const keep, n = 2, 9
	dir := t.TempDir()
	chain := retainChain(t, dir, n)
	repoDir := filepath.Join(dir, "local.git")
	key, _ := testKey(t)
	r, err := OpenRepo(repoDir, Config{SigningKey: key})
	if err != nil {
		t.Fatal(err)
	}
	fileRemote := filepath.Join(t.TempDir(), "r.git")
	gitCmd(t, filepath.Dir(fileRemote), "init", "-q", "--bare", fileRemote)
	httpRemote := gittest.NewHTTPRemote(t)
	var pushers []Pusher
	for _, u := range []string{"file://" + fileRemote, httpRemote.URL} {
		p, err := NewPusher(repoDir, Remote{URL: u})
		if err != nil {
			t.Fatal(err)
		}
		pushers = append(pushers, p)
	}
	ctx := context.Background()
	var res []*Result
	commit := func(g int) {
		t.Helper()
		x, err := r.Commit(ctx, Generation{WTXT: chain.paths[g-1]})
		if err != nil {
			t.Fatalf("commit gen %d: %v", g, err)
		}
		res = append(res, x)
	}
	push := func(g int) {
		t.Helper()
		for _, p := range pushers {
			if err := p.Push(ctx, req(r, res[g-1])); err != nil {
				t.Fatalf("push gen %d: %v", g, err)
			}
		}
	}
	var perGen int64
	for g := 1; g <= 6; g++ {
		commit(g)
		push(g)
		if g == 1 {
			gitCmd(t, repoDir, "repack", "-a", "-d", "-q")
			perGen = objectBytes(t, repoDir)
		}
		m, err := r.Retain(ctx, res[g-1].Commit, keep, []Pending{{Commit: res[g-1].Commit, Tag: res[g-1].Tag}})
		if err != nil {
			t.Fatalf("retain after gen %d: %v", g, err)
		}
		if g > keep && (!m.Cut || m.BoundaryGen != uint64(g-keep+1) || m.Boundary != res[g-keep].Commit || !m.Repacked) {
			t.Fatalf("gen %d: %+v, want the boundary at gen %d", g, m, g-keep+1)
		}
		if g <= keep && m.Cut {
			t.Fatalf("gen %d: cut with only %d generations: %+v", g, g, m)
		}
		gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")
	}
	if b := objectBytes(t, repoDir); b > int64(keep+1)*perGen {
		t.Fatalf("object store %d bytes after 6 generations, one generation is %d, keep %d", b, perGen, keep)
	}
	if got := strings.TrimSpace(gitCmd(t, repoDir, "rev-list", "--count", "snapshots")); got != fmt.Sprint(keep) {
		t.Fatalf("rev-list --count: %s commits, want %d", got, keep)
	}
	tags := strings.Fields(gitCmd(t, repoDir, "tag", "-l"))
	if len(tags) != keep || tags[0] != res[4].Tag || tags[1] != res[5].Tag {
		t.Fatalf("tags left %q, want %s %s", tags, res[4].Tag, res[5].Tag)
	}

	// Remote down: gens 7, 8 committed, not pushed. A Retain for gen 6
	// keeps them (and cuts nothing new); a pending push below the
	// boundary a Retain would set stops the cut.
	commit(7)
	commit(8)
	pending := []Pending{{Commit: res[6].Commit, Tag: res[6].Tag}, {Commit: res[7].Commit, Tag: res[7].Tag}}
	if m, err := r.Retain(ctx, res[5].Commit, keep, pending); err != nil || m.Cut {
		t.Fatalf("retain with pending pushes: %+v, %v", m, err)
	}
	if m, err := r.Retain(ctx, res[7].Commit, 1, append(pending, Pending{Commit: res[5].Commit})); err != nil || m.Cut || m.Skipped == "" {
		t.Fatalf("retain with a pending push below the boundary: %+v, %v", m, err)
	}
	for g := 7; g <= 8; g++ {
		if _, err := r.ResolveGen(uint64(g)); err != nil {
			t.Fatalf("pending gen %d: %v", g, err)
		}
	}
	push(7)
	push(8)
	commit(9)
	push(9)
	if _, err := r.Retain(ctx, res[8].Commit, keep, nil); err != nil {
		t.Fatal(err)
	}
	gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")

	// The remotes have all of it.
	for _, rd := range []string{fileRemote, httpRemote.Dir} {
		gitCmd(t, rd, "fsck", "--strict", "--no-dangling")
		if got := strings.TrimSpace(gitCmd(t, rd, "rev-list", "--count", "snapshots")); got != fmt.Sprint(n) {
			t.Fatalf("remote %s: %s commits, want %d", rd, got, n)
		}
		for _, x := range res {
			if got := remoteHead(t, rd, "refs/tags/"+x.Tag+"^{commit}"); got != x.Commit.String() {
				t.Fatalf("remote %s: tag %s → %q", rd, x.Tag, got)
			}
		}
	}
	// What snapd reads from the local repository.
	for _, rr := range []*Repo{r, reopen(t, repoDir, key)} {
		log, err := rr.Log(ctx, 0)
		if err != nil || len(log) != keep || log[0].Gen != n || log[1].Gen != n-1 {
			t.Fatalf("Log: %+v, %v", log, err)
		}
		if _, err := rr.ResolveGen(2); !errors.Is(err, ErrPruned) {
			t.Fatalf("ResolveGen of a pruned generation: %v", err)
		}
		for g := n - keep + 1; g <= n; g++ {
			c, err := rr.ResolveGen(uint64(g))
			if err != nil || c != res[g-1].Commit.String() {
				t.Fatalf("ResolveGen %d: %s, %v", g, c, err)
			}
			var out bytes.Buffer
			if err := rr.WriteWTXT(res[g-1].Tag, &out); err != nil || !bytes.Equal(out.Bytes(), chain.data[g-1]) {
				t.Fatalf("WriteWTXT gen %d: %v", g, err)
			}
		}
		if h, err := rr.LiveGeneration(context.Background(), n-1); err != nil || h.Gen != n-1 {
			t.Fatalf("LiveGeneration: %+v, %v", h, err)
		}
	}
}

func reopen(t *testing.T, dir string, key ed25519.PrivateKey) *Repo {
	t.Helper()
	r, err := OpenRepo(dir, Config{SigningKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRetainCrashBetweenSteps: Retain stopped before any of its steps (as
// kill -9 there would) leaves a repository that git fsck finds clean and
// that a fresh Repo reads, commits to and pushes from; the next Retain
// finishes the cleanup (the pending mark is gone, the old tags and
// objects too).
func TestRetainCrashBetweenSteps(t *testing.T) {
	const keep = 2
	dir := t.TempDir()
	chain := retainChain(t, dir, 6)
	key, _ := testKey(t)
	ctx := context.Background()
	for _, step := range []string{"pending", "shallow", "tags", "repack", "done"} {
		t.Run(step, func(t *testing.T) {
			repoDir := filepath.Join(t.TempDir(), "local.git")
			r := reopen(t, repoDir, key)
			remote := filepath.Join(t.TempDir(), "r.git")
			gitCmd(t, filepath.Dir(remote), "init", "-q", "--bare", remote)
			p, err := NewPusher(repoDir, Remote{URL: remote})
			if err != nil {
				t.Fatal(err)
			}
			var last *Result
			for _, path := range chain.paths[:5] {
				if last, err = r.Commit(ctx, Generation{WTXT: path}); err != nil {
					t.Fatal(err)
				}
				if err := p.Push(ctx, req(r, last)); err != nil {
					t.Fatal(err)
				}
			}
			crash := errors.New("injected crash")
			r.retainHook = func(s string) error {
				if s == step {
					return crash
				}
				return nil
			}
			if _, err := r.Retain(ctx, last.Commit, keep, nil); !errors.Is(err, crash) {
				t.Fatalf("Retain with a crash before %s: %v", step, err)
			}
			gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")
			r2 := reopen(t, repoDir, key)
			if log, err := r2.Log(ctx, 0); err != nil || len(log) < keep || log[0].Gen != 5 {
				t.Fatalf("Log after the crash: %d entries, %v", len(log), err)
			}
			next, err := r2.Commit(ctx, Generation{WTXT: chain.paths[5]})
			if err != nil {
				t.Fatalf("commit after the crash: %v", err)
			}
			if err := p.Push(ctx, req(r2, next)); err != nil {
				t.Fatalf("push after the crash: %v", err)
			}
			m, err := r2.Retain(ctx, next.Commit, keep, nil)
			if err != nil || m.BoundaryGen != 5 {
				t.Fatalf("Retain after the crash: %+v, %v", m, err)
			}
			// The cleanup ran: no unreachable loose object is left (packed
			// ones wait for more garbage than a generation, repackAll).
			if left := strings.TrimSpace(gitCmd(t, repoDir, "prune", "--dry-run", "--expire=now")); left != "" {
				t.Fatalf("unreachable loose objects left after the crash's Retain:\n%s", left)
			}
			if _, err := os.Stat(filepath.Join(repoDir, retainPendingName)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("pending mark left: %v", err)
			}
			gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")
			if got := strings.TrimSpace(gitCmd(t, repoDir, "rev-list", "--count", "snapshots")); got != fmt.Sprint(keep) {
				t.Fatalf("%s commits kept, want %d", got, keep)
			}
			if tags := strings.Fields(gitCmd(t, repoDir, "tag", "-l")); len(tags) != keep {
				t.Fatalf("tags left %q", tags)
			}
			if got := strings.TrimSpace(gitCmd(t, remote, "rev-list", "--count", "snapshots")); got != "6" {
				t.Fatalf("remote has %s commits", got)
			}
		})
	}
}

// TestRetainKeepsBaseBranchShallow: with a base branch fetched with
// --depth 1 (already a shallow entry), Retain adds its boundary beside it
// and the repository stays sound (git fsck) and pushes on.
func TestRetainKeepsBaseBranchShallow(t *testing.T) {
	const keep = 2
	dir := t.TempDir()
	chain := retainChain(t, dir, 5)
	remote := filepath.Join(t.TempDir(), "r.git")
	gitCmd(t, filepath.Dir(remote), "init", "-q", "--bare", remote)
	// main: three commits on the remote.
	work := t.TempDir()
	gitCmd(t, work, "init", "-q", "-b", "main")
	for i := 1; i <= 3; i++ {
		writeFile(t, work, "README", []byte(fmt.Sprintf("v%d\n", i)))
		gitCmd(t, work, "add", "README")
		gitCmd(t, work, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q", "-m", fmt.Sprintf("main %d", i))
	}
	gitCmd(t, work, "push", "-q", remote, "main")
	parent := strings.TrimSpace(gitCmd(t, work, "rev-parse", "HEAD"))
	repoDir := filepath.Join(dir, "local.git")
	p, err := NewPusher(repoDir, Remote{URL: "file://" + remote})
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenRepo(repoDir, Config{BaseBranch: "main", FetchBase: p.FetchBase})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for g, path := range chain.paths {
		res, err := r.Commit(ctx, Generation{WTXT: path})
		if err != nil {
			t.Fatalf("gen %d: %v", g+1, err)
		}
		if err := p.Push(ctx, req(r, res)); err != nil {
			t.Fatalf("push gen %d: %v", g+1, err)
		}
		if _, err := r.Retain(ctx, res.Commit, keep, nil); err != nil {
			t.Fatalf("retain gen %d: %v", g+1, err)
		}
		gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")
	}
	sh, err := readShallow(repoDir)
	if err != nil || !sh[plumbing.NewHash(parent)] || len(sh) != 2 {
		t.Fatalf("shallow file %v (%v), want the base tip %s and the boundary", sh, err, parent)
	}
	if got := strings.TrimSpace(gitCmd(t, remote, "rev-list", "--count", "snapshots")); got != "8" {
		t.Fatalf("remote: %s commits on snapshots, want 5 generations on main's 3", got)
	}
	gitCmd(t, remote, "fsck", "--strict", "--no-dangling")
}

// TestRetainRepackRule: Retain's cleanup prunes unreachable loose
// objects however many bytes they hold, and repacks only once the packs
// hold more unreachable object bytes than one kept generation's average
// (the reachable bytes / keep). The pack index files and the blocks loose
// objects occupy are not garbage: packed garbage just below the rule,
// whose pack with its index is above it, is left in place.
func TestRetainRepackRule(t *testing.T) {
	const keep = 3
	dir := t.TempDir()
	chain := retainChain(t, dir, keep)
	repoDir := filepath.Join(dir, "local.git")
	key, _ := testKey(t)
	r := reopen(t, repoDir, key)
	ctx := context.Background()
	var last *Result
	for g, path := range chain.paths {
		var err error
		if last, err = r.Commit(ctx, Generation{WTXT: path}); err != nil {
			t.Fatalf("commit gen %d: %v", g+1, err)
		}
	}
	// keep generations of keep: nothing to cut, so Retain does only the
	// cleanup a crashed Retain left due (its pending mark).
	retain := func() RetainResult {
		t.Helper()
		writeFile(t, repoDir, retainPendingName, []byte(last.Commit.String()+"\n"))
		m, err := r.Retain(ctx, last.Commit, keep, nil)
		if err != nil || m.Cut {
			t.Fatalf("Retain: %+v, %v", m, err)
		}
		if _, err := os.Stat(filepath.Join(repoDir, retainPendingName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("pending mark left: %v", err)
		}
		gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")
		return m
	}
	packs := func() []string {
		t.Helper()
		m, err := filepath.Glob(filepath.Join(repoDir, "objects", "pack", "pack-*.pack"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	present := func(oid string) bool {
		_, err := gitRun(repoDir, "cat-file", "-e", oid)
		return err == nil
	}
	blob := func(seed, n int) string {
		t.Helper()
		p := writeFile(t, t.TempDir(), "blob", pseudo(seed, n))
		return strings.TrimSpace(gitCmd(t, repoDir, "hash-object", "-w", p))
	}
	// packBlob writes an unreachable blob of n pseudo-random bytes into
	// a pack of its own and returns its id and its bytes in the pack.
	packBlob := func(seed, n int) (string, int64) {
		t.Helper()
		oid := blob(seed, n)
		cmd := exec.Command("git", "pack-objects", "-q", filepath.Join("objects", "pack", "pack"))
		cmd.Dir = repoDir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C")
		cmd.Stdin = strings.NewReader(oid + "\n")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git pack-objects: %v\n%s", err, out)
		}
		fi, err := os.Stat(filepath.Join(repoDir, "objects", "pack", "pack-"+strings.TrimSpace(string(out))+".pack"))
		if err != nil {
			t.Fatal(err)
		}
		gitCmd(t, repoDir, "prune-packed")
		return oid, fi.Size() - packFraming
	}

	diskUsage := func() int64 {
		t.Helper()
		out := strings.TrimSpace(gitCmd(t, repoDir, "rev-list", "--objects", "--all", "--indexed-objects", "--disk-usage"))
		n, err := strconv.ParseInt(out, 10, 64)
		if err != nil {
			t.Fatalf("git rev-list --disk-usage: %q: %v", out, err)
		}
		return n
	}

	if m := retain(); m.Repacked {
		t.Fatalf("repacked a repository without garbage: %+v", m)
	}
	reachable := diskUsage()
	rule := reachable / keep
	before := packs()

	// Loose garbage of many generations and packed garbage just below
	// one generation: pruned, not repacked.
	var loose []string
	for i := 0; i < 4; i++ {
		loose = append(loose, blob(1000+i, int(rule)))
	}
	packed1, n1 := packBlob(2000, int(rule)-300)
	if n1 >= rule || n1 < rule-400 {
		t.Fatalf("setup: the garbage pack holds %d object bytes, want a little below %d", n1, rule)
	}
	withGarbage := packs()
	if m := retain(); m.Repacked {
		t.Fatalf("repacked with %d bytes of packed garbage, the rule is %d (reachable %d / keep %d): %+v", n1, rule, reachable, keep, m)
	}
	for _, oid := range loose {
		if present(oid) {
			t.Fatalf("unreachable loose object %s left after Retain", oid)
		}
	}
	if got := packs(); len(got) != len(before)+1 || !present(packed1) || fmt.Sprint(got) != fmt.Sprint(withGarbage) {
		t.Fatalf("packs after Retain below the rule: %q, want %q", got, withGarbage)
	}

	// More packed garbage, past the rule, in packs that hold nothing
	// reachable (as a dense generation's pack once the boundary passes
	// it): those packs are deleted, nothing is rewritten.
	packed2, n2 := packBlob(3000, 500)
	if n1+n2 <= rule {
		t.Fatalf("setup: %d + %d bytes of packed garbage are not past %d", n1, n2, rule)
	}
	if m := retain(); m.Repacked || m.PacksDropped != 2 {
		t.Fatalf("with %d bytes of garbage in packs of nothing else (the rule is %d): %+v, want 2 packs dropped and no repack", n1+n2, rule, m)
	}
	if got := packs(); fmt.Sprint(got) != fmt.Sprint(before) || present(packed1) || present(packed2) {
		t.Fatalf("packs after dropping the garbage packs: %q, want %q (garbage present: %v %v)", got, before, present(packed1), present(packed2))
	}

	// Garbage past the rule in a pack that also holds a reachable object
	// (the branch head's commit, so the pack is newest holder of it):
	// the pack is needed, so the repack runs: one pack of the reachable
	// objects, the garbage gone.
	garbage3 := blob(4000, int(rule)+500)
	head := strings.TrimSpace(gitCmd(t, repoDir, "rev-parse", "refs/heads/"+r.Config().Branch))
	cmd := exec.Command("git", "pack-objects", "-q", filepath.Join("objects", "pack", "pack"))
	cmd.Dir = repoDir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C")
	cmd.Stdin = strings.NewReader(garbage3 + "\n" + head + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git pack-objects: %v\n%s", err, out)
	}
	gitCmd(t, repoDir, "prune-packed")
	if m := retain(); !m.Repacked || m.PacksDropped != 0 {
		t.Fatalf("not repacked with garbage beside a reachable object, the rule is %d: %+v", rule, m)
	}
	if got := packs(); len(got) != 1 || present(garbage3) {
		t.Fatalf("packs after the repack: %q (garbage present: %v)", got, present(garbage3))
	}
	// One pack of reachable objects: the store's object bytes are what
	// git rev-list --disk-usage counts, no garbage.
	after := diskUsage()
	if stored, err := objectStoreBytes(filepath.Join(repoDir, "objects")); err != nil || stored != after {
		t.Fatalf("object bytes after the repack %d (%v), reachable %d", stored, err, after)
	}
	if log, err := r.Log(ctx, 0); err != nil || len(log) != keep {
		t.Fatalf("Log after the repack: %d entries, %v", len(log), err)
	}
}

// TestRetainDropsDensePacks: generations that change every chunk, in the
// segments layout, each write a pack of their own (packw.go); once the
// boundary passes a generation its pack holds nothing the kept history
// needs, and Retain deletes it whole instead of repacking the kept
// generations. The kept history stays complete (git fsck) and the store
// stays within keep + 2 generations.
func TestRetainDropsDensePacks(t *testing.T) {
	const keep, gens = 2, 6
	dir := t.TempDir()
	chain := genChain(t, dir, gens, []testArray{{name: "w", data: pseudo(7, 400_000), chunk: 1024}}, func(g int, a []testArray) {
		copy(a[0].data, pseudo(200+g, len(a[0].data)))
	})
	repoDir := filepath.Join(dir, "local.git")
	key, _ := testKey(t)
	r, err := OpenRepo(repoDir, Config{SigningKey: key, Layout: LayoutSegments, SegmentSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	packs := func() int {
		m, err := filepath.Glob(filepath.Join(repoDir, "objects", "pack", "pack-*.pack"))
		if err != nil {
			t.Fatal(err)
		}
		return len(m)
	}
	dropped, repacked := 0, 0
	var one int64
	for g, path := range chain.paths {
		before := packs()
		res, err := r.Commit(ctx, Generation{WTXT: path})
		if err != nil {
			t.Fatalf("commit gen %d: %v", g+1, err)
		}
		if packs() != before+1 {
			t.Fatalf("gen %d: %d packs after the commit, %d before: the generation did not write a pack of its own", g+1, packs(), before)
		}
		if g == 0 {
			one = objectBytes(t, repoDir)
		}
		m, err := r.Retain(ctx, res.Commit, keep, nil)
		if err != nil {
			t.Fatalf("retain after gen %d: %v", g+1, err)
		}
		dropped += m.PacksDropped
		if m.Repacked {
			repacked++
		}
		gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")
		if got := objectBytes(t, repoDir); got > (keep+2)*one {
			t.Fatalf("after gen %d the store holds %d bytes, more than (keep + 2) × %d", g+1, got, one)
		}
	}
	if dropped == 0 || repacked != 0 {
		t.Fatalf("%d packs dropped and %d repacks over %d dense generations; want packs dropped, no repack", dropped, repacked, gens)
	}
	if n := packs(); n > keep+1 {
		t.Fatalf("%d packs left, want at most keep + 1 = %d", n, keep+1)
	}
	if log, err := r.Log(ctx, 0); err != nil || len(log) != keep {
		t.Fatalf("Log: %d entries, %v; want %d", len(log), err, keep)
	}
}
