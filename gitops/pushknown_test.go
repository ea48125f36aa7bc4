package gitops

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
)

// pushLogged pushes x and returns the git command lines it ran.
func pushLogged(t *testing.T, p *GitPusher, r *Repo, x *Result, argLog string) (string, error) {
	t.Helper()
	if err := os.Remove(argLog); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	err := p.Push(context.Background(), req(r, x))
	data, rerr := os.ReadFile(argLog)
	if rerr != nil && !os.IsNotExist(rerr) {
		t.Fatal(rerr)
	}
	return string(data), err
}

// TestPushWithoutListingAfterOwnPush: a push of the child of what this
// pusher itself pushed last goes without ls-remote (one connection); the
// first push, and one after the remote moved where the pusher cannot see
// it, list the remote; a remote that moved ahead with our own later
// commits is recognised (nothing forced, nothing lost), and one that
// diverged is refused as diverged.
func TestPushWithoutListingAfterOwnPush(t *testing.T) {
	r, res, p, remote, argLog := loggedPushes(t, 6)
	listed := func(log string) bool { return strings.Contains(log, " ls-remote ") }

	log, err := pushLogged(t, p, r, res[0], argLog)
	if err != nil {
		t.Fatal(err)
	}
	if !listed(log) {
		t.Fatalf("first push did not list the remote:\n%s", log)
	}
	log, err = pushLogged(t, p, r, res[1], argLog)
	if err != nil {
		t.Fatal(err)
	}
	if listed(log) {
		t.Fatalf("push of the child of the pusher's own last push listed the remote:\n%s", log)
	}
	if got := remoteHead(t, remote, "refs/heads/snapshots"); got != res[1].Commit.String() {
		t.Fatalf("remote head %s, want %s", got, res[1].Commit)
	}
	if got := remoteHead(t, remote, "refs/tags/"+res[1].Tag); got == "" {
		t.Fatalf("tag %s not pushed", res[1].Tag)
	}

	// Another pusher (a restarted daemon, another host) pushes res[2] and
	// res[3]. This pusher still believes the remote is at res[1]: its push
	// of res[2] is refused as not a fast-forward, and it then lists the
	// remote and finds res[2] already there.
	other, err := NewPusher(r.Dir(), Remote{URL: "file://" + remote})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res[2:4] {
		if err := other.Push(context.Background(), req(r, x)); err != nil {
			t.Fatal(err)
		}
	}
	log, err = pushLogged(t, p, r, res[2], argLog)
	if err != nil {
		t.Fatalf("push behind a remote that is ahead with our own commits: %v\n%s", err, log)
	}
	if !listed(log) {
		t.Fatalf("the refused push was not followed by a listing:\n%s", log)
	}
	if got := remoteHead(t, remote, "refs/heads/snapshots"); got != res[3].Commit.String() {
		t.Fatalf("remote head %s, want %s (nothing forced)", got, res[3].Commit)
	}
	// The listing taught it where the remote is: res[4] goes straight.
	log, err = pushLogged(t, p, r, res[4], argLog)
	if err != nil {
		t.Fatal(err)
	}
	if listed(log) {
		t.Fatalf("push after the listing listed again:\n%s", log)
	}

	// The remote diverges: its branch moves to a commit that is not in the
	// local history. The push of res[5] is refused and reported diverged.
	tree := strings.TrimSpace(gitCmd(t, remote, "rev-parse", res[4].Commit.String()+"^{tree}"))
	foreign := strings.TrimSpace(gitCmd(t, remote, "-c", "user.name=other", "-c", "user.email=other@example.invalid", "commit-tree", tree, "-p", res[4].Commit.String(), "-m", "someone else"))
	gitCmd(t, remote, "update-ref", "refs/heads/snapshots", foreign)
	log, err = pushLogged(t, p, r, res[5], argLog)
	if !errors.Is(err, ErrDiverged) {
		t.Fatalf("push to a diverged remote: %v, want ErrDiverged\n%s", err, log)
	}
	if got := remoteHead(t, remote, "refs/heads/snapshots"); got != foreign {
		t.Fatalf("remote head %s, want the foreign commit %s (nothing forced)", got, foreign)
	}
	if tag := remoteHead(t, remote, "refs/tags/"+res[5].Tag); tag != "" {
		t.Fatalf("tag %s reached a diverged remote", res[5].Tag)
	}
	gitCmd(t, remote, "fsck", "--strict", "--no-dangling")
}

// TestPushRemoteWithoutAtomic: a remote that does not take atomic pushes
// (receive.advertiseAtomic false) still gets every generation, branch and
// tag; the pusher falls back to listing before every push.
func TestPushRemoteWithoutAtomic(t *testing.T) {
	r, res, p, remote, argLog := loggedPushes(t, 3)
	gitCmd(t, remote, "config", "receive.advertiseAtomic", "false")
	for i, x := range res {
		log, err := pushLogged(t, p, r, x, argLog)
		if err != nil {
			t.Fatalf("push %d: %v\n%s", i, err, log)
		}
		if i == 1 && (!strings.Contains(log, "--atomic") || !strings.Contains(log, " ls-remote ")) {
			t.Fatalf("push %d: want an atomic attempt refused, then a listing:\n%s", i, log)
		}
		if i == 2 && (!strings.Contains(log, " ls-remote ") || strings.Contains(log, "--atomic")) {
			t.Fatalf("push %d: after the refusal the pusher should list and push without --atomic:\n%s", i, log)
		}
		if got := remoteHead(t, remote, "refs/tags/"+x.Tag); got == "" {
			t.Fatalf("push %d: tag %s missing", i, x.Tag)
		}
	}
	if got := remoteHead(t, remote, "refs/heads/snapshots"); got != res[2].Commit.String() {
		t.Fatalf("remote head %s, want %s", got, res[2].Commit)
	}
	gitCmd(t, remote, "fsck", "--strict", "--no-dangling")
}

// TestClassifyPorcelain: refused refs in git push --porcelain's status
// lines give the kind, whatever stderr's hints say; a rejection beside a
// remote refusal is diverged; other lines are not refusals.
func TestClassifyPorcelain(t *testing.T) {
	for _, c := range []struct {
		out  string
		want error
	}{
		{"To file:///r.git\n=\trefs/tags/gen-000001:refs/tags/gen-000001\t[up to date]\nDone\n", nil},
		{"To file:///r.git\n*\tabc:refs/heads/snapshots\t[new branch]\nDone\n", nil},
		{"To file:///r.git\n!\tabc:refs/heads/snapshots\t[rejected] (non-fast-forward)\nDone\n", ErrDiverged},
		{"To file:///r.git\n!\tabc:refs/heads/snapshots\t[rejected] (fetch first)\n!\trefs/tags/t:refs/tags/t\t[rejected] (atomic push failed)\nDone\n", ErrDiverged},
		{"To file:///r.git\n!\tabc:refs/heads/snapshots\t[remote rejected] (hook declined)\nDone\n", ErrRejected},
		{"!\tabc:refs/heads/snapshots\t[remote failure] (remote failed to report status)\n", ErrRejected},
		{"!\trefs/tags/t:refs/tags/t\t[remote rejected] (hook declined)\n!\tabc:refs/heads/snapshots\t[rejected] (non-fast-forward)\n", ErrDiverged},
		{"abc123\trefs/heads/snapshots\n", nil}, // ls-remote output
	} {
		if got := classifyPorcelain(c.out); got != c.want {
			t.Errorf("%q: %v, want %v", c.out, got, c.want)
		}
	}
}
