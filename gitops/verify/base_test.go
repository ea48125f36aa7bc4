package verify

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
)

// TestBaseBranch starts the generations branch from a remote's main (the
// daemon's git.base_branch): the first generation commit has main's tip as
// its parent and keeps main's files, so a pull request into main has a
// merge base and shows only snapd's files; verify-repo stops at the base.
func TestBaseBranch(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	remote := filepath.Join(tmp, "remote.git")
	verifytest.Git(t, tmp, "init", "-q", "--bare", "-b", "main", remote)
	work := filepath.Join(tmp, "work")
	verifytest.Git(t, tmp, "init", "-q", "-b", "main", work)
	verifytest.WriteFile(t, filepath.Join(work, "README.md"), []byte("# the model\n"))
	verifytest.WriteFile(t, filepath.Join(work, ".gitattributes"), []byte("*.png binary\n"))
	id := []string{"-c", "user.name=dev", "-c", "user.email=dev@example.com"}
	verifytest.Git(t, work, "add", ".")
	verifytest.Git(t, work, append(id, "commit", "-q", "-m", "first")...)
	verifytest.WriteFile(t, filepath.Join(work, "train.py"), []byte("print('train')\n"))
	verifytest.Git(t, work, "add", ".")
	verifytest.Git(t, work, append(id, "commit", "-q", "-m", "second")...)
	verifytest.Git(t, work, "push", "-q", remote, "main")
	mainTip := strings.TrimSpace(verifytest.Git(t, remote, "rev-parse", "main"))

	local := filepath.Join(tmp, "state", "repo")
	if _, err := gitops.OpenRepo(local, gitops.Config{BaseBranch: "snapshots"}); !errors.Is(err, gitops.ErrConfig) {
		t.Fatalf("base branch = branch: %v", err)
	}
	f := &verifytest.Fixture{Dir: local, Work: t.TempDir(), Key: verifytest.NewKey(t)}
	r, err := gitops.OpenRepo(local, gitops.Config{SigningKey: f.Key.Priv, Delta: gitops.DeltaAlways, BaseBranch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := gitops.NewPusher(local, gitops.Remote{URL: remote})
	if err != nil {
		t.Fatal(err)
	}
	// Without a fetch hook and with no local main, the first commit fails
	// and names the base branch; nothing is committed.
	g1 := f.Make(t, 1, nil, false)
	if _, err := r.Commit(ctx, g1.Files); !errors.Is(err, gitops.ErrBase) || !strings.Contains(err.Error(), "main") {
		t.Fatalf("commit without base: %v", err)
	}
	if out, err := verifytest.GitRun(local, nil, "rev-parse", "--verify", "-q", "refs/heads/snapshots"); err == nil {
		t.Fatalf("branch created after a failed commit: %s", out)
	}
	r, err = gitops.OpenRepo(local, gitops.Config{SigningKey: f.Key.Priv, Delta: gitops.DeltaAlways, BaseBranch: "main", FetchBase: p.FetchBase})
	if err != nil {
		t.Fatal(err)
	}
	var prev *verifytest.Gen
	for n := uint64(1); n <= 3; n++ {
		g := f.Make(t, n, prev, false)
		res, err := r.Commit(ctx, g.Files)
		if err != nil {
			t.Fatalf("gen %d: %v", n, err)
		}
		if err := p.Push(ctx, gitops.PushRequest{Branch: "snapshots", Commit: res.Commit, Tag: res.Tag}); err != nil {
			t.Fatalf("push gen %d: %v", n, err)
		}
		g.Commit, g.Tag = res.Commit.String(), res.Tag
		f.Gens = append(f.Gens, g)
		prev = g
	}
	// On the remote: main's tip is the merge base and the first
	// generation's only parent; main itself is untouched.
	if mb := strings.TrimSpace(verifytest.Git(t, remote, "merge-base", "main", "snapshots")); mb != mainTip {
		t.Fatalf("merge-base %s, want main's tip %s", mb, mainTip)
	}
	if got := strings.TrimSpace(verifytest.Git(t, remote, "rev-parse", "gen-000001^{commit}^@")); got != mainTip {
		t.Fatalf("first generation's parents %q, want %s", got, mainTip)
	}
	if got := strings.TrimSpace(verifytest.Git(t, remote, "rev-parse", "main")); got != mainTip {
		t.Fatalf("main moved to %s", got)
	}
	if got := verifytest.Git(t, remote, "log", "-1", "--format=%(trailers:key=Snapd-Base,valueonly)", "gen-000001"); strings.TrimSpace(got) != mainTip {
		t.Fatalf("Snapd-Base trailer %q", got)
	}
	verifytest.Git(t, remote, "fsck", "--strict", "--no-dangling")
	// A pull request snapshots → main changes only snapd's files; main's
	// files and its own attributes are kept (once, after 3 commits).
	changed := strings.Fields(verifytest.Git(t, remote, "diff", "--name-only", "main...snapshots"))
	for _, c := range changed {
		if c != ".gitattributes" && !strings.HasPrefix(c, "snapshots/") {
			t.Fatalf("the PR would change %s (all: %v)", c, changed)
		}
	}
	if len(changed) < 2 {
		t.Fatalf("changed files %v", changed)
	}
	for _, name := range []string{"README.md", "train.py"} {
		verifytest.Git(t, remote, "cat-file", "-e", "snapshots:"+name)
	}
	attrs := verifytest.Git(t, remote, "cat-file", "blob", "snapshots:.gitattributes")
	if !strings.HasPrefix(attrs, "*.png binary\n") || strings.Count(attrs, "*.png binary") != 1 || !strings.HasSuffix(attrs, gitops.Gitattributes) {
		t.Fatalf(".gitattributes:\n%s", attrs)
	}
	// The merge is clean: a clone of main merges the PR without conflict.
	clone := filepath.Join(tmp, "clone")
	verifytest.Git(t, tmp, "clone", "-q", "-b", "main", remote, clone)
	verifytest.Git(t, clone, "fetch", "-q", "origin", "snapshots")
	verifytest.Git(t, clone, append(id, "merge", "-q", "--no-edit", "FETCH_HEAD")...)
	if _, err := os.Stat(filepath.Join(clone, "snapshots", gitops.FileWTXT)); err != nil {
		t.Fatal(err)
	}
	// verify-repo walks the three generations and stops at the base.
	rep := run(t, remote, Options{}, f.Key.Pub)
	if !rep.OK || len(rep.Generations) != 3 {
		t.Fatalf("report:\n%s", dump(rep))
	}
	if rep.Generations[0].Chain != ChainFirst {
		t.Fatalf("first generation chain %s", rep.Generations[0].Chain)
	}
}
