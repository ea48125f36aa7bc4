package gitops

import (
	"compress/zlib"
	"context"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// loggedPushes returns a repository of n generations, a Pusher to a new
// bare file:// remote whose git (the local receive-pack too) logs its
// arguments, one line per run, to argLog.
func loggedPushes(t *testing.T, n int) (r *Repo, res []*Result, p *GitPusher, remote, argLog string) {
	t.Helper()
	realGit, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed")
	}
	r, res = chainRepo(t, n)
	dir := t.TempDir()
	remote = filepath.Join(dir, "r.git")
	gitCmd(t, dir, "init", "-q", "--bare", remote)
	argLog = filepath.Join(dir, "args")
	wrapper := filepath.Join(dir, "git-wrapper")
	script := "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '" + argLog + "'\nexec '" + realGit + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	if p, err = NewPusher(r.Dir(), Remote{URL: "file://" + remote, Git: wrapper}); err != nil {
		t.Fatal(err)
	}
	return r, res, p, remote, argLog
}

// TestPushBoundsPackMemory: the git push child gets the memory limits
// (pushMemoryLimits) on its command line, and the push still delivers a
// complete history.
func TestPushBoundsPackMemory(t *testing.T) {
	r, res, p, remote, argLog := loggedPushes(t, 2)
	for _, x := range res {
		if err := p.Push(context.Background(), req(r, x)); err != nil {
			t.Fatal(err)
		}
	}
	if got := remoteHead(t, remote, "refs/heads/snapshots"); got != res[1].Commit.String() {
		t.Fatalf("remote head %s, want %s", got, res[1].Commit)
	}
	gitCmd(t, remote, "fsck", "--strict", "--no-dangling")
	// The local remote kept each push's pack (receive.unpackLimit=1): no
	// loose object was written there.
	if loose := gitCmd(t, remote, "count-objects"); !strings.HasPrefix(loose, "0 objects") {
		t.Errorf("the local remote has loose objects after the pushes: %s", loose)
	}
	data, err := os.ReadFile(argLog)
	if err != nil {
		t.Fatal(err)
	}
	pushes, receives := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.HasSuffix(l, " receive-pack "+remote) {
			receives++ // the wrapper, run as the local remote's receive-pack
			want := append(append([]string{}, pushMemoryLimits...), localReceiveOptions...)
			for i := 1; i < len(want); i += 2 {
				if strings.HasPrefix(want[i], "core.packedGitLimit=") {
					want[i] = "core.packedGitLimit=" // raised to the send size: TestPushLimitsScale
				}
				if !strings.Contains(l, "-c "+want[i]) {
					t.Errorf("receive-pack runs without -c %s: %s", want[i], l)
				}
			}
		}
		if !strings.Contains(l, " push --porcelain") {
			continue
		}
		pushes++
		for i := 1; i < len(pushMemoryLimits); i += 2 {
			a, sep := pushMemoryLimits[i], " "
			if strings.HasPrefix(a, "core.packedGitLimit=") {
				a, sep = "core.packedGitLimit=", "" // raised to the send size: TestPushLimitsScale
			}
			if !strings.Contains(l, "-c "+a+sep) {
				t.Errorf("push command lacks -c %s: %s", a, l)
			}
			if !strings.Contains(l, "'-c' '"+a) {
				t.Errorf("the local receive-pack lacks -c %s: %s", a, l)
			}
		}
	}
	if pushes != len(res) || receives != len(res) {
		t.Fatalf("%d push and %d receive-pack commands logged, want %d:\n%s", pushes, receives, len(res), data)
	}
}

// TestLooseObjectsStored: Repo writes its loose objects as zlib stored
// blocks (looseLevel), which git reads like any other loose object.
func TestLooseObjectsStored(t *testing.T) {
	r, res := chainRepo(t, 1)
	objects := objectsDir(r.Dir())
	var checked int
	err := filepath.WalkDir(objects, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || len(filepath.Base(filepath.Dir(p))) != 2 {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		st, _ := f.Stat()
		zr, err := zlib.NewReader(f)
		if err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, zr)
		if err != nil {
			return err
		}
		if n > 4096 { // a part: stored blocks are never smaller than the content
			checked++
			if st.Size() < n {
				t.Errorf("%s: %d bytes on disk for %d bytes of object: compressed", p, st.Size(), n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no loose object larger than 4 KiB found")
	}
	gitCmd(t, r.Dir(), "fsck", "--strict")
	if out := gitCmd(t, r.Dir(), "cat-file", "-t", res[0].Commit.String()); strings.TrimSpace(out) != "commit" {
		t.Fatalf("cat-file: %q", out)
	}
}

// TestPushLimitsScale: a push may map the packs up to what it sends
// plus pushMappedSlack (at least the base 128 MiB), whatever send is;
// every other limit is pushMemoryLimits'.
func TestPushLimitsScale(t *testing.T) {
	for _, c := range []struct {
		send int64
		want string
	}{
		{0, "128m"},
		{-1, "128m"},
		{1, "129m"},
		{40 << 20, "168m"},
		{1 << 30, "1152m"},
		{1<<30 + 1, "1153m"},
		{math.MaxInt64, "128m"},
	} {
		got := pushLimits(c.send)
		if len(got) != len(pushMemoryLimits) {
			t.Fatalf("send %d: %d arguments, want %d", c.send, len(got), len(pushMemoryLimits))
		}
		for i, a := range got {
			want := pushMemoryLimits[i]
			if strings.HasPrefix(want, "core.packedGitLimit=") {
				want = "core.packedGitLimit=" + c.want
			}
			if a != want {
				t.Errorf("send %d: argument %d is %q, want %q", c.send, i, a, want)
			}
		}
	}
	if pushMemoryLimits[len(pushMemoryLimits)-1] != "core.packedGitLimit=128m" {
		t.Fatalf("pushMemoryLimits changed: %v", pushMemoryLimits)
	}
}

// TestPushAddedSkipsCount: with PushRequest.Added and the remote branch
// at the commit's parent, Push takes the send size from Added (it shows
// in core.packedGitLimit) and runs no git rev-list; without Added, or
// with the remote behind the parent, it counts with rev-list as before.
// Every push delivers the history.
func TestPushAddedSkipsCount(t *testing.T) {
	r, res, p, remote, argLog := loggedPushes(t, 5)
	const added = 300 << 20 // pretend: a large generation
	wantLimit := "core.packedGitLimit=" + strconv.FormatInt((addedSendBytes(added)+pushMappedSlack+(1<<20)-1)>>20, 10) + "m"
	for i, c := range []struct {
		x         *Result
		added     int64
		wantCount bool // a rev-list runs
	}{
		{res[0], added, true}, // the remote has no branch yet
		{res[2], added, true}, // the remote is at res[0], not the parent res[1]
		{res[3], 0, true},     // no Added
	} {
		if err := os.Remove(argLog); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		q := req(r, c.x)
		q.Added = c.added
		if err := p.Push(context.Background(), q); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(argLog)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(data), " rev-list "); got != c.wantCount {
			t.Errorf("push %d: rev-list ran %v, want %v:\n%s", i, got, c.wantCount, data)
		}
	}
	// The remote at res[3], the parent of res[4], pushed with Added: no
	// count.
	more := res[4]
	if err := os.Remove(argLog); err != nil {
		t.Fatal(err)
	}
	q := req(r, more)
	q.Added = added
	if err := p.Push(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(argLog)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), " rev-list ") {
		t.Errorf("rev-list ran although the remote was at the parent and Added was given:\n%s", data)
	}
	if !strings.Contains(string(data), "-c "+wantLimit+" ") {
		t.Errorf("push did not map up to Added's estimate (%s):\n%s", wantLimit, data)
	}
	if got := remoteHead(t, remote, "refs/heads/snapshots"); got != more.Commit.String() {
		t.Fatalf("remote head %s, want %s", got, more.Commit)
	}
	gitCmd(t, remote, "fsck", "--strict", "--no-dangling")
}
