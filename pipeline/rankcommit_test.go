package pipeline

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/wtxt"
	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/formats/wtxt/ranks/rankstest"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/gitops/sshsig"
	"github.com/snapd-ml/snapd/gitops/verify"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/wal"
)

type rankFixture struct {
	t         *testing.T
	reg       *registrytest.Registry
	dir       string
	repo      *oci.Repository
	remote    string
	nodes     []*RankPublisher
	nodeKeys  []ed25519.PrivateKey
	committer *keys.Generated
	signers   string
	trusted   []ed25519.PublicKey
	world     int
	now       time.Time
}

func newRankFixture(t *testing.T, world int) *rankFixture {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	reg := registrytest.Start(t, "", "")
	f := &rankFixture{t: t, dir: t.TempDir(), world: world, now: time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)}
	f.repo = openRankRepo(t, reg, "job/ranks")
	f.reg = reg
	f.remote = filepath.Join(f.dir, "ledger.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", f.remote).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	g, err := keys.Generate(filepath.Join(f.dir, "committer-keys"))
	if err != nil {
		t.Fatal(err)
	}
	f.committer = g
	pub, _ := os.ReadFile(g.SignPub)
	f.signers = filepath.Join(f.dir, "allowed_signers")
	os.WriteFile(f.signers, []byte("committer@test namespaces=\"git\" "+strings.TrimSpace(string(pub))+"\n"), 0o644)
	f.trusted = []ed25519.PublicKey{g.PublicKey}
	for r := range world {
		k := rankstest.Key(byte(40 + r))
		f.nodeKeys = append(f.nodeKeys, k)
		f.trusted = append(f.trusted, k.Public().(ed25519.PublicKey))
		n, err := NewRankPublisher(RankOptions{Repo: f.repo, Chain: rankstest.Chain, SignKey: k,
			Dir: filepath.Join(f.dir, fmt.Sprintf("node%d", r)), SegmentSize: 2048, RetryMin: time.Millisecond, RetryMax: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		f.nodes = append(f.nodes, n)
	}
	return f
}

func (f *rankFixture) committerFor(onTimeout string) *RankCommitter {
	return f.committerWith(onTimeout, nil)
}

// committerWith is committerFor with the options changed by mod.
func (f *rankFixture) committerWith(onTimeout string, mod func(*RankCommitterOptions)) *RankCommitter {
	sk, err := keys.LoadSigner(f.committer.SignKey)
	if err != nil {
		f.t.Fatal(err)
	}
	dir := filepath.Join(f.dir, "committer-git")
	ledger, err := gitops.OpenRepo(dir, gitops.Config{SigningKey: sk, AuthorName: "snapd", AuthorEmail: "committer@test"})
	if err != nil {
		f.t.Fatal(err)
	}
	pusher, err := gitops.NewPusher(dir, gitops.Remote{URL: f.remote})
	if err != nil {
		f.t.Fatal(err)
	}
	o := RankCommitterOptions{
		Repo: f.repo, Chain: rankstest.Chain, WorldSize: f.world, Timeout: time.Minute, OnTimeout: onTimeout, IndexKey: sk,
		Ledger: ledger, Pusher: pusher,
		StateFile: filepath.Join(f.dir, "committer.json"),
		Now:       func() time.Time { return f.now },
	}
	if mod != nil {
		mod(&o)
	}
	c, err := NewRankCommitter(o)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// publish writes rank r's shard of gen as safetensors and runs the node.
func (f *rankFixture) publish(gen uint64, r int) {
	f.t.Helper()
	p := filepath.Join(f.dir, fmt.Sprintf("shard-%d-%d.safetensors", gen, r))
	w, err := os.Create(p)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := safetensors.New().Encode(context.Background(), w, rankstest.Shard(gen, r), formats.EncodeOptions{}); err != nil {
		f.t.Fatal(err)
	}
	w.Close()
	rec := wal.Record{Request: wal.Request{Gen: gen, Time: f.now, Requester: "test", Source: p, Rank: r, WorldSize: f.world}}
	if err := handleRank(context.Background(), f.nodes[r], rec); err != nil {
		f.t.Fatal(err)
	}
}

// clone clones the remote ledger and returns it with the options that
// verify it (the committer's and nodes' keys, the registry).
func (f *rankFixture) clone() (*git.Repository, verify.RanksOptions) {
	f.t.Helper()
	clone := filepath.Join(f.t.TempDir(), "clone")
	if out, err := exec.Command("git", "clone", "-q", "--branch", "snapshots", f.remote, clone).CombinedOutput(); err != nil {
		f.t.Fatalf("%v %s", err, out)
	}
	r, err := git.PlainOpen(clone)
	if err != nil {
		f.t.Fatal(err)
	}
	signers, err := sshsig.LoadAllowedSigners(f.signers)
	if err != nil {
		f.t.Fatal(err)
	}
	return r, verify.RanksOptions{Blobs: f.repo, Signers: signers, Trusted: f.trusted, Chain: rankstest.Chain}
}

func (f *rankFixture) verify() []verify.RanksGeneration {
	f.t.Helper()
	r, o := f.clone()
	gens, err := verify.VerifyRanks(context.Background(), r, o)
	if err != nil {
		f.t.Fatal(err)
	}
	return gens
}

func TestCommitterCommitsInOrderOnce(t *testing.T) {
	t.Parallel()
	f := newRankFixture(t, 2)
	c := f.committerFor(RankOnTimeoutWait)
	ctx := context.Background()
	// Gen 1 rank 0 and gen 2 rank 1 only: nothing to commit.
	f.publish(1, 0)
	f.publish(2, 1)
	st, err := c.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.LastCommitted != 0 || st.Pending != 1 || len(st.Missing) != 1 || st.Missing[0] != 1 {
		t.Fatalf("status %+v", st)
	}
	// Gen 2 completes first, but gen 1 is waited for (order).
	f.publish(2, 0)
	if st, _ = c.Step(ctx); st.LastCommitted != 0 || st.Pending != 1 {
		t.Fatalf("gen 2 committed before gen 1: %+v", st)
	}
	f.publish(1, 1)
	f.publish(3, 0)
	f.publish(3, 1)
	if st, err = c.Step(ctx); err != nil || st.LastCommitted != 3 || st.Pending != 0 {
		t.Fatalf("status %+v %v", st, err)
	}
	// A second round (and a restarted committer) commits nothing again.
	if st, err = f.committerFor(RankOnTimeoutWait).Step(ctx); err != nil || st.LastCommitted != 3 {
		t.Fatalf("status %+v %v", st, err)
	}
	gens := f.verify()
	if len(gens) != 3 || gens[0].Gen != 1 || gens[2].Gen != 3 || gens[0].WorldSize != 2 || gens[0].Arrays != 4 {
		t.Fatalf("ledger %+v", gens)
	}
	// Node re-delivery (kill -9 after the push, before the WAL outcome):
	// the same manifest, nothing new committed.
	f.publish(3, 1)
	if st, _ = c.Step(ctx); st.LastCommitted != 3 {
		t.Fatal(st)
	}
	if n := len(f.verify()); n != 3 {
		t.Fatalf("%d generations after a redelivery", n)
	}
}

func TestCommitterTimeoutSkipAndWait(t *testing.T) {
	f := newRankFixture(t, 2)
	ctx := context.Background()
	f.publish(1, 0)
	f.publish(1, 1)
	f.publish(2, 0) // rank 1 of gen 2 never arrives
	f.publish(3, 0)
	f.publish(3, 1)
	wait := f.committerFor(RankOnTimeoutWait)
	st, err := wait.Step(ctx)
	if err != nil || st.LastCommitted != 1 || st.Pending != 2 || st.TimedOut {
		t.Fatalf("%+v %v", st, err)
	}
	f.now = f.now.Add(2 * time.Minute)
	if st, _ = wait.Step(ctx); st.LastCommitted != 1 || st.Pending != 2 || !st.TimedOut || st.Missing[0] != 1 {
		t.Fatalf("wait: %+v", st)
	}
	// The same state, now with on_timeout: skip (config change + restart).
	skip := f.committerFor(RankOnTimeoutSkip)
	if st, err = skip.Step(ctx); err != nil || st.LastCommitted != 3 || len(st.SkippedTotal) != 1 {
		t.Fatalf("skip: %+v %v", st, err)
	}
	gens := f.verify()
	if len(gens) != 2 || gens[1].Gen != 3 || len(gens[1].Skipped) != 1 || gens[1].Skipped[0] != 2 {
		t.Fatalf("ledger %+v", gens)
	}
	// The late rank of the skipped generation is never committed.
	f.publish(2, 1)
	if st, _ = skip.Step(ctx); st.LastCommitted != 3 {
		t.Fatal(st)
	}
}

func TestCommitterRefusesBadRanks(t *testing.T) {
	f := newRankFixture(t, 2)
	ctx := context.Background()
	f.publish(1, 0)
	// Rank 1 pushed by a node that believes the world has 3 ranks.
	p := filepath.Join(f.dir, "bad.safetensors")
	w, _ := os.Create(p)
	safetensors.New().Encode(ctx, w, rankstest.Shard(1, 1), formats.EncodeOptions{})
	w.Close()
	rec := wal.Record{Request: wal.Request{Gen: 1, Time: f.now, Requester: "t", Source: p, Rank: 1, WorldSize: 3}}
	if err := handleRank(ctx, f.nodes[1], rec); err != nil {
		t.Fatal(err)
	}
	c := f.committerFor(RankOnTimeoutWait)
	st, err := c.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.LastCommitted != 0 || st.Pending != 1 || !strings.Contains(st.Invalid["1"], "world_size") {
		t.Fatalf("%+v", st)
	}
	// Nothing half-committed: the remote has no branch.
	if out, _ := exec.Command("git", "-C", f.remote, "branch", "--list").Output(); len(out) != 0 {
		t.Fatalf("remote has branches: %s", out)
	}
	// The same rank re-requested with the right world size is refused by
	// the node (the tag is taken by the wrong part): an operator decides.
	rec.WorldSize = 2
	err = handleRank(ctx, f.nodes[1], rec)
	var re *wtxt.Error
	if !errors.As(err, &re) || re.Check != wranks.CheckRank {
		t.Fatalf("want rank conflict, got %v", err)
	}
}

// The Git remote unreachable while a generation is complete: the round
// fails (last_error), nothing is lost; once it is back the generation is
// committed exactly once.
func TestCommitterGitRemoteDown(t *testing.T) {
	t.Parallel()
	f := newRankFixture(t, 2)
	ctx := context.Background()
	c := f.committerFor(RankOnTimeoutWait)
	f.publish(1, 0)
	f.publish(1, 1)
	if st, err := c.Step(ctx); err != nil || st.LastCommitted != 1 {
		t.Fatalf("%+v %v", st, err)
	}
	f.publish(2, 0)
	f.publish(2, 1)
	away := f.remote + ".away"
	if err := os.Rename(f.remote, away); err != nil {
		t.Fatal(err)
	}
	st, err := c.Step(ctx)
	if err == nil || st.LastCommitted != 1 || st.LastError == "" {
		t.Fatalf("remote down: %+v %v", st, err)
	}
	if err := os.Rename(away, f.remote); err != nil {
		t.Fatal(err)
	}
	if st, err = c.Step(ctx); err != nil || st.LastCommitted != 2 || st.LastError != "" {
		t.Fatalf("remote back: %+v %v", st, err)
	}
	// The remote refuses the push itself (after the local commit was
	// made): the next round rebuilds the commit on the remote head.
	f.publish(3, 0)
	f.publish(3, 1)
	hook := filepath.Join(f.remote, "hooks", "pre-receive")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho refused >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if st, err = c.Step(ctx); err == nil || st.LastCommitted != 2 || !strings.Contains(st.LastError, "push") {
		t.Fatalf("push refused: %+v %v", st, err)
	}
	os.Remove(hook)
	if st, err = c.Step(ctx); err != nil || st.LastCommitted != 3 {
		t.Fatalf("push accepted again: %+v %v", st, err)
	}
	if gens := f.verify(); len(gens) != 3 || gens[1].Gen != 2 || gens[2].Gen != 3 {
		t.Fatalf("ledger %+v", gens)
	}
}

// TestCommitterThroughQueue: with the daemon's resend queue the committer
// does not wait for the remote: generations are committed while it is
// away, each commit becomes one push job (the head is not enqueued again
// every round), and the queue pushes them once the remote is back.
func TestCommitterThroughQueue(t *testing.T) {
	f := newRankFixture(t, 2)
	ctx := context.Background()
	pusher, err := gitops.NewPusher(filepath.Join(f.dir, "committer-git"), gitops.Remote{URL: f.remote})
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.Open(filepath.Join(f.dir, "queue"), queue.Options{Pusher: pusher, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := f.committerWith(RankOnTimeoutWait, func(o *RankCommitterOptions) { o.Queue = q; o.Pusher = nil })
	away := f.remote + ".away"
	if err := os.Rename(f.remote, away); err != nil {
		t.Fatal(err)
	}
	for g := uint64(1); g <= 2; g++ {
		f.publish(g, 0)
		f.publish(g, 1)
		if st, err := c.Step(ctx); err != nil || st.LastCommitted != g || st.LastError != "" {
			t.Fatalf("gen %d with the remote away: %+v %v", g, st, err)
		}
	}
	if _, err := c.Step(ctx); err != nil { // a round with nothing new
		t.Fatal(err)
	}
	jobs, err := q.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].Gen != 1 || jobs[1].Gen != 2 || jobs[1].Tag != "gen-000002" || len(jobs[1].Commit) != 40 {
		t.Fatalf("queue jobs %+v", jobs)
	}
	if err := os.Rename(away, f.remote); err != nil {
		t.Fatal(err)
	}
	qctx, cancel := context.WithTimeout(ctx, testutil.Guard) // failure guard
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- q.Run(qctx) }()
	testutil.Poll(t, "the queue pushes the committed generations", func() (bool, string) {
		jobs, err := q.List()
		return err == nil && len(jobs) == 0, fmt.Sprintf("%d jobs left, %v", len(jobs), err)
	})
	cancel()
	<-done
	if gens := f.verify(); len(gens) != 2 || gens[1].Gen != 2 {
		t.Fatalf("remote ledger %+v", gens)
	}
}
