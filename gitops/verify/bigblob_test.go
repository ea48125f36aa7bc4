package verify

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
)

// zeroBlobCommits adds to a copy of f's repository two commits on top of
// the last generation whose current.wtxt is a blob of n zero bytes
// (packed: it compresses to about n/1000): on branch snapshots signed
// with signKey, on branch unsigned unsigned.
func zeroBlobCommits(t *testing.T, f *verifytest.Fixture, n int64, signKey string) string {
	t.Helper()
	repo := f.Copy(t)
	git := func(env []string, args ...string) string {
		out, err := verifytest.GitRun(repo, env, args...)
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(out)
	}
	cmd := exec.Command("sh", "-c", "head -c "+strconv.FormatInt(n, 10)+" /dev/zero | git hash-object -w --stdin")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	blob := strings.TrimSpace(string(out))
	idx := []string{"GIT_INDEX_FILE=" + filepath.Join(t.TempDir(), "index")}
	last := f.Gens[len(f.Gens)-1].Commit
	git(idx, "read-tree", last)
	git(idx, "update-index", "--cacheinfo", "100644,"+blob+",snapshots/current.wtxt")
	tree := git(idx, "write-tree")
	msg := git(nil, "log", "-1", "--format=%B", last)
	args := []string{"commit-tree", tree, "-p", last, "-m", msg}
	git(nil, "update-ref", "refs/heads/unsigned", git(nil, args...))
	args = append([]string{"-c", "gpg.format=ssh", "-c", "user.signingkey=" + signKey}, append(args, "-S")...)
	git(nil, "update-ref", "refs/heads/snapshots", git(nil, args...))
	git(nil, "repack", "-adq", "--window=0")
	return repo
}

// allocated runs fn and returns the bytes it allocated on the heap.
func allocated(fn func()) int64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return int64(b.TotalAlloc - a.TotalAlloc)
}

// A small pack holding a huge zero
// blob is refused by size before it is read, never read at all when the
// commit is not trusted, and otherwise streamed (never held in memory).
// Heap allocation beyond verifying the two small generations before it is
// compared with the blob's size (go-git's default decoding allocated over
// five times the blob).
func TestHugeBlobBudgetAndStreaming(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	const n = 64 << 20
	f := verifytest.Build(t, verifytest.Options{Gens: []uint64{1, 2}})
	repo := zeroBlobCommits(t, f, n, f.Key.PrivFile)
	last := func(rep *Report) *Generation { return rep.Generations[len(rep.Generations)-1] }

	// Baseline: verifying the two small generations alone.
	var rep *Report
	base := allocated(func() { rep = run(t, repo, Options{Branch: f.Gens[1].Commit}, f.Key.Pub) })
	t.Logf("baseline: %d bytes allocated", base)

	// Over the budget: refused from the object header, nothing read.
	a := allocated(func() { rep = run(t, repo, Options{MaxObjectBytes: 16 << 20}, f.Key.Pub) }) - base
	g := last(rep)
	if rep.OK || !slices.ContainsFunc(g.Failures, func(x Failure) bool { return x.Check == CheckSize }) {
		t.Fatalf("no size failure: %+v", g.Failures)
	}
	t.Logf("over budget: %d bytes allocated", a)
	if a > n/4 {
		t.Fatalf("over-budget blob: %d bytes allocated", a)
	}

	// Untrusted commit: its content is not read.
	a = allocated(func() { rep = run(t, repo, Options{Branch: "unsigned"}, f.Key.Pub) }) - base
	g = last(rep)
	if rep.OK || !slices.Contains(g.Notes, "content not read: the commit is not signed by a trusted key") {
		t.Fatalf("unsigned: %+v %q", g.Failures, g.Notes)
	}
	t.Logf("untrusted: %d bytes allocated", a)
	if a > n/4 {
		t.Fatalf("unsigned commit's blob: %d bytes allocated", a)
	}

	// Within the budget and trusted: read, streamed (not a WTXT, so it
	// fails its first line), far less memory than the blob's size.
	a = allocated(func() { rep = run(t, repo, Options{}, f.Key.Pub) }) - base
	g = last(rep)
	if rep.OK || !slices.ContainsFunc(g.Failures, func(x Failure) bool { return strings.HasPrefix(x.Check, "wtxt/") }) {
		t.Fatalf("streamed blob: %+v", g.Failures)
	}
	if g.WTXTBytes != n {
		t.Fatalf("read %d bytes of the blob, want %d", g.WTXTBytes, n)
	}
	t.Logf("streamed: %d bytes allocated", a)
	if a > n/2 {
		t.Fatalf("streaming a %d-byte blob allocated %d bytes", n, a)
	}
}
