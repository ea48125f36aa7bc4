package pipeline

import (
	"os"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// waitRanks polls the daemon's status (bounded by testutil.Guard) until
// the committer's state satisfies ok.
func waitRanks(t *testing.T, dir string, what string, ok func(*RankStatus) bool) *RankStatus {
	t.Helper()
	deadline := time.Now().Add(testutil.Guard)
	for {
		st, err := ReadStatus(dir)
		if err != nil {
			t.Fatal(err)
		}
		if st.Ranks != nil && ok(st.Ranks) {
			return st.Ranks
		}
		if time.Now().After(deadline) {
			t.Fatalf("committer never got to %s: %+v", what, st.Ranks)
		}
		<-time.After(5 * time.Millisecond)
	}
}

// The committer is a stage of the daemon (Deps.RankCommitter): it commits
// complete generations by itself; a failed round (the Git remote gone) is
// retried with backoff, counted and visible in the status until a round
// succeeds; Close stops it.
func TestRankCommitterStage(t *testing.T) {
	rf := newRankFixture(t, 2)
	f := newFixture(t)
	com := rf.committerWith(RankOnTimeoutWait, func(o *RankCommitterOptions) {
		o.StateFile, o.Poll, o.RetryMax = RankStatusFile(f.dir), 5*time.Millisecond, 20*time.Millisecond
	})
	f.start(t, func(c *Config, d *Deps) { d.Repo, d.Publisher, d.RankCommitter = nil, rf.nodes[0], com })
	rf.publish(1, 0)
	rf.publish(1, 1)
	waitRanks(t, f.dir, "gen 1 committed", func(st *RankStatus) bool { return st.LastCommitted == 1 })
	away := rf.remote + ".away"
	if err := os.Rename(rf.remote, away); err != nil {
		t.Fatal(err)
	}
	rf.publish(2, 0)
	rf.publish(2, 1)
	st := waitRanks(t, f.dir, "a failed round", func(st *RankStatus) bool { return st.LastError != "" })
	if st.LastCommitted != 1 {
		t.Fatalf("remote down: %+v", st)
	}
	if n := metric(t, f.reg, "snapd_ranks_commit_failures_total"); n < 1 {
		t.Fatalf("snapd_ranks_commit_failures_total = %v", n)
	}
	if err := os.Rename(away, rf.remote); err != nil {
		t.Fatal(err)
	}
	waitRanks(t, f.dir, "gen 2 committed", func(st *RankStatus) bool { return st.LastCommitted == 2 && st.LastError == "" })
	if g := metric(t, f.reg, "snapd_ranks_last_committed_generation"); g != 2 {
		t.Fatalf("snapd_ranks_last_committed_generation = %v", g)
	}
	f.stop(t)
	if gens := rf.verify(); len(gens) != 2 || gens[1].Gen != 2 {
		t.Fatalf("ledger %+v", gens)
	}
}
