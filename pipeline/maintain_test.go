package pipeline

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/wal"
)

// TestPushRepacksLocalRepository: with more packs in the local repository
// than gitops.Config.MaxPacks, the push observer runs gitops Repo.Maintain
// after a successful push (in the queue's goroutine, so no push reads the
// packs while git repack replaces them): the pack count falls, the log
// says so, nothing is logged as a warning, and the repository stays fsck
// clean and keeps committing and pushing. Without a remote (no queue) the
// daemon runs it after each commit instead.
func TestPushRepacksLocalRepository(t *testing.T) {
	t.Parallel()
	for _, withQueue := range []bool{true, false} {
		t.Run(map[bool]string{true: "after-push", false: "no-remote"}[withQueue], func(t *testing.T) { testRepack(t, withQueue) })
	}
}

func testRepack(t *testing.T, withQueue bool) {
	f := newFixture(t)
	repoDir := filepath.Join(f.dir, RepoDir)
	var err error
	if f.repo, err = gitops.OpenRepo(repoDir, gitops.Config{SigningKey: f.keys.sign, MaxPacks: 1}); err != nil {
		t.Fatal(err)
	}
	remote := gittest.NewHTTPRemote(t)
	withRemote := func(c *Config, d *Deps) {
		if !withQueue {
			return
		}
		f.pushTo(t, d, remote.URL)
	}
	git := func(args ...string) string { t.Helper(); return gittest.Git(t, repoDir, args...) }
	packs := func() int {
		m, _ := filepath.Glob(filepath.Join(repoDir, "objects", "pack", "pack-*.pack"))
		return len(m)
	}
	// Two generations, each packed on its own while the daemon is
	// stopped (a small generation's objects are loose): two packs.
	for g := uint64(1); g <= 2; g++ {
		f.start(t, withRemote)
		request(t, f.dir, g, publish(t, f.dir, g))
		if r := f.wait(t, g); r.State != wal.Done {
			t.Fatalf("gen %d: %+v", g, r)
		}
		if withQueue {
			waitPushed(t, f)
		}
		f.stop(t)
		git("repack", "-q")
	}
	if n := packs(); n != 2 {
		t.Fatalf("%d packs before the test's push, want 2", n)
	}
	before := f.logs.String()
	f.start(t, withRemote)
	request(t, f.dir, 3, publish(t, f.dir, 3))
	if r := f.wait(t, 3); r.State != wal.Done {
		t.Fatalf("gen 3: %+v", r)
	}
	if withQueue {
		waitPushed(t, f)
	}
	f.stop(t)
	logs := strings.TrimPrefix(f.logs.String(), before)
	if !strings.Contains(logs, `msg="git repack of the local repository" branch=snapshots packs_before=2 packs_after=1`) {
		t.Fatalf("no repack logged after the push:\n%s", logs)
	}
	for _, bad := range []string{"level=WARN", "level=ERROR"} {
		if strings.Contains(logs, bad) {
			t.Fatalf("logged %q:\n%s", bad, logs)
		}
	}
	if n := packs(); n != 1 {
		t.Fatalf("%d packs after the repack", n)
	}
	git("fsck", "--strict", "--no-dangling")
	if !withQueue {
		return
	}
	if got, want := strings.TrimSpace(git("rev-parse", "refs/heads/snapshots")), strings.TrimSpace(gittest.Git(t, remote.Dir, "rev-parse", "refs/heads/snapshots")); got != want {
		t.Fatalf("local head %s, remote %s", got, want)
	}
}
