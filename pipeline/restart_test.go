package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/wal"
)

// A clean restart after more than 8 generations (the
// Git trailer "000010" once parsed as octal 8) recommitted generation 9,
// logged a merkle chain break and left it in last_error although Git was
// intact. Recovery must recognise work that is already done.
//
// With retention.repo the local repository holds only the newest pushed
// generations while the ring holds all twelve: recovery still recognises
// the older ones as published. The remote is a file:// one: recovery, not
// the transport, is under test (HTTP push: TestRetentionNeverPrunesUnpushed).
func TestCleanRestartRecognisesCommittedGenerations(t *testing.T) {
	t.Parallel()
	for _, keep := range []int{0, 3} {
		t.Run(fmt.Sprintf("retain-repo-%d", keep), func(t *testing.T) { testCleanRestart(t, keep) })
	}
}

func testCleanRestart(t *testing.T, keep int) {
	f := newFixture(t)
	remote := fileRemote(t)
	withRemote := func(c *Config, d *Deps) {
		c.Retention.Repo = keep
		p, err := gitops.NewPusher(filepath.Join(f.dir, RepoDir), gitops.Remote{URL: remote.URL})
		if err != nil {
			t.Fatal(err)
		}
		if keep > 0 { // the push observer trims the repository after each push
			f.observedQueue(t, d, p)
			return
		}
		if d.Queue, err = queue.Open(filepath.Join(f.dir, QueueDir), queue.Options{Pusher: p, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	const n = 12
	f.start(t, withRemote)
	for g := uint64(1); g <= n; g++ {
		request(t, f.dir, g, publish(t, f.dir, g))
	}
	for g := uint64(1); g <= n; g++ {
		if r := f.wait(t, g); r.State != wal.Done || r.Commit == "" {
			t.Fatalf("gen %d: %+v", g, r)
		}
	}
	waitPushed(t, f)
	f.stop(t)
	before := f.logs.String()

	for restart := 0; restart < 2; restart++ {
		f.start(t, withRemote)
		waitPushed(t, f)
		f.stop(t)
	}
	after := strings.TrimPrefix(f.logs.String(), before)
	for _, bad := range []string{"level=WARN", "level=ERROR", "chain break"} {
		if strings.Contains(after, bad) {
			t.Fatalf("clean restart logged %q:\n%s", bad, after)
		}
	}
	st, err := ReadStatus(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.LastError != nil {
		t.Fatalf("status after a clean restart shows an error: %+v", st.LastError)
	}
	if st.Chain.Gen != n || st.Queue == nil || st.Queue.Pending != 0 {
		t.Fatalf("status %+v queue %+v", st, st.Queue)
	}
	if got := strings.TrimSpace(gittest.Git(t, remote.Dir, "log", "-1", "--format=%(trailers:key=Snapd-Gen,valueonly)", "refs/heads/snapshots")); got != "000012" {
		t.Fatalf("remote head gen %q", got)
	}
	gittest.Git(t, remote.Dir, "fsck", "--strict", "--no-dangling")
	if keep > 0 {
		if got := strings.TrimSpace(gittest.Git(t, filepath.Join(f.dir, RepoDir), "rev-list", "--count", "refs/heads/snapshots")); got != fmt.Sprint(keep) {
			t.Fatalf("local repository: %s commits, want %d", got, keep)
		}
	}
}

// waitPushed waits until the daemon's resend queue is empty (an event the
// queue records in its directory; the poll is only how it is observed).
func waitPushed(t *testing.T, f *fixture) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Guard)
	defer cancel()
	for {
		st, err := ReadStatus(f.dir)
		if err != nil {
			t.Fatal(err)
		}
		// Every job pushed, and the AfterPush of each push returned (the
		// repository's trim runs once the job is gone).
		if st.Queue != nil && st.Queue.Pending == 0 && f.housekept.Load() == f.pushed.Load() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("queue not drained: %+v", st.Queue)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
