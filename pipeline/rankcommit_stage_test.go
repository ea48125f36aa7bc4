package pipeline

import (
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
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

// TestRankMetaReachesCommit: the metadata a rank's request carries
// (request-snapshot --rank R --meta ...) goes into that rank's part; when
// every rank gives the same, the generation's commit states it in its
// Snapd-Meta trailer, which verify-repo checks against every part. Ranks
// that give different metadata fail the generation: nothing is committed,
// it stays pending, and the committer's status names the rank that
// differs and the keys, never a value.
func TestRankMetaReachesCommit(t *testing.T) {
	rf := newRankFixture(t, 2)
	nodes := []*fixture{newFixture(t), newFixture(t)}
	clog := &testutil.SyncBuffer{}
	com := rf.committerWith(RankOnTimeoutWait, func(o *RankCommitterOptions) {
		o.StateFile, o.Poll, o.RetryMax = RankStatusFile(nodes[0].dir), 5*time.Millisecond, 20*time.Millisecond
		o.Log = slog.New(slog.NewTextHandler(clog, nil))
	})
	nodes[0].start(t, func(c *Config, d *Deps) { d.Repo, d.Publisher, d.RankCommitter = nil, rf.nodes[0], com })
	nodes[1].start(t, func(c *Config, d *Deps) { d.Repo, d.Publisher = nil, rf.nodes[1] })
	ts := time.Unix(1_700_000_000, 0)
	request := func(gen uint64, r int, meta string) {
		t.Helper()
		m, err := snapshot.ParseUserMeta([]byte(meta))
		if err != nil {
			t.Fatal(err)
		}
		f := nodes[r]
		appendRequests(t, f.dir, wal.Request{Gen: gen, Time: ts, Requester: "test", Source: writeShard(t, f.dir, gen, r), Rank: r, WorldSize: 2, Meta: m})
		if res := f.wait(t, gen); res.State != wal.Done {
			t.Fatalf("gen %d rank %d: %+v", gen, r, res)
		}
	}
	request(1, 0, `{"step":100,"loss":0.5}`)
	request(1, 1, `{"step":100,"loss":0.5}`)
	waitRanks(t, nodes[0].dir, "gen 1 committed", func(st *RankStatus) bool { return st.LastCommitted == 1 })
	msg, err := exec.Command("git", "-C", rf.remote, "log", "-1", "--format=%B", "snapshots").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(msg), "\nSnapd-Meta: loss=0.5 step=100\n") {
		t.Fatalf("gen 1's commit message lacks the trailer:\n%s", msg)
	}

	request(2, 0, `{"step":200,"loss":0.4}`)
	request(2, 1, `{"step":201,"loss":0.4}`)
	st := waitRanks(t, nodes[0].dir, "gen 2 refused", func(st *RankStatus) bool { return st.Pending == 2 && st.Invalid["1"] != "" })
	if got := st.Invalid["1"]; !strings.Contains(got, "gen-000002.rank-1: the generation metadata its request gave differs from rank 0's, which 1 of 2 ranks give (keys step)") ||
		testutil.ContainsValue(got, "201") || testutil.ContainsValue(got, "0.4") || len(st.Invalid) != 1 || st.LastCommitted != 1 {
		t.Fatalf("committer status: %+v", st)
	}
	if logs := clog.String(); strings.Count(logs, "multi-rank generation refused: its ranks' parts disagree") != 1 || testutil.ContainsValue(logs, "201") {
		t.Fatalf("the refusal is not logged once, without values:\n%s", logs)
	}
	for _, f := range nodes {
		f.stop(t)
	}
	gens := rf.verify()
	if len(gens) != 1 || gens[0].Gen != 1 {
		t.Fatalf("ledger %+v", gens)
	}
}
