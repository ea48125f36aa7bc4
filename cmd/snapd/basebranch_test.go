package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/gittest"
)

// TestRunBaseBranch: `snapd run --base-branch main` against a real HTTP
// remote whose main has history: the daemon fetches main's tip, the
// generations branch starts from it, so on the remote `git merge-base main
// snapshots` is main's tip; verify-repo (stopping at the base) passes.
func TestRunBaseBranch(t *testing.T) {
	t.Parallel()
	remote := newRemote(t)
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	gittest.Git(t, dir, "init", "-q", "-b", "main", work)
	gittest.WriteFile(t, work, "README.md", []byte("# model repo\n"))
	id := []string{"-c", "user.name=dev", "-c", "user.email=dev@example.com"}
	gittest.Git(t, work, "add", ".")
	gittest.Git(t, work, append(id, "commit", "-q", "-m", "start")...)
	gittest.Git(t, work, "push", "-q", remote.Dir, "main")
	mainTip := strings.TrimSpace(gittest.Git(t, remote.Dir, "rev-parse", "refs/heads/main"))

	state := filepath.Join(dir, "state")
	d := startDaemon(t, "--state-dir", state, "--git-remote", remote.URL, "--base-branch", "main", "--metrics-addr", "off")
	for g := uint64(1); g <= 2; g++ {
		requestTiny(t, state, g)
	}
	waitFor(t, "generation 2 on the remote", pushedAll(t, remote, state, 2))
	d.stop(t)
	if mb := strings.TrimSpace(gittest.Git(t, remote.Dir, "merge-base", "refs/heads/main", "refs/heads/snapshots")); mb != mainTip {
		t.Fatalf("merge-base %q, want main's tip %s", mb, mainTip)
	}
	if got := strings.TrimSpace(gittest.Git(t, remote.Dir, "rev-parse", "gen-000001^{commit}^")); got != mainTip {
		t.Fatalf("first generation's parent %s, want %s", got, mainTip)
	}
	gittest.Git(t, remote.Dir, "cat-file", "-e", "refs/heads/snapshots:README.md")
	gittest.Git(t, remote.Dir, "fsck", "--strict", "--no-dangling")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"verify-repo", remote.Dir, "--pubkey", filepath.Join(state, "keys", "allowed_signers"), "--json"}, &out, &errb)
	var rep struct {
		OK          bool
		Generations []struct{ Gen uint64 }
	}
	if code != 0 || json.Unmarshal(out.Bytes(), &rep) != nil || !rep.OK || len(rep.Generations) != 2 || rep.Generations[0].Gen != 1 {
		t.Fatalf("verify-repo: %d %s %s", code, out.String(), errb.String())
	}
}
