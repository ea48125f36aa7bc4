package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/gitops/verify"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/wal"

	"crypto/ed25519"
	gogit "github.com/go-git/go-git/v5"
)

// writeModel writes step's model as a safetensors file at p (replacing
// what is there: a new inode).
func writeModel(t *testing.T, p string, step int) string {
	t.Helper()
	tmp := p + ".new"
	f, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if err := safetensors.New().Encode(context.Background(), f, model(step), formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// requestAt appends a request with its own ts (seconds) and resume.
func requestAt(t *testing.T, dir string, gen uint64, src string, sec int64, resumedFrom uint64) {
	t.Helper()
	if err := wal.Append(filepath.Join(dir, WALDir), wal.Request{Gen: gen, Time: time.Unix(sec, 0), Requester: "test", Source: src, ResumedFrom: resumedFrom}); err != nil {
		t.Fatal(err)
	}
}

// waitSource waits for the outcome of a request for gen naming src (the
// latest outcome of gen must not already name src).
func (f *fixture) waitSource(t *testing.T, gen uint64, src string) *GenResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Guard) // failure guard
	defer cancel()
	r, err := f.d.WaitFor(ctx, gen, func(r *GenResult) bool { return r.Source == src })
	if err != nil {
		t.Fatalf("wait gen %d from %s: %v", gen, src, err)
	}
	return r
}

func commits(t *testing.T, f *fixture) int {
	t.Helper()
	return strings.Count(gittest.Git(t, f.repo.Dir(), "rev-list", "snapshots"), "\n")
}

func walEntries(t *testing.T, f *fixture) []wal.Entry {
	t.Helper()
	ents, err := wal.List(filepath.Join(f.dir, WALDir), nil)
	if err != nil {
		t.Fatal(err)
	}
	return ents
}

// A request re-using a snapshotted generation's number for another source
// or other content fails visibly (wal list, status, last_error); the same
// source and content again is done without a new commit.
func TestReusedGenerationNumber(t *testing.T) {
	f := newFixture(t)
	f.start(t, nil)
	for g := uint64(1); g <= 3; g++ {
		request(t, f.dir, g, publish(t, f.dir, g))
		if r := f.wait(t, g); r.State != wal.Done {
			t.Fatalf("gen %d: %+v", g, r)
		}
	}
	n0 := commits(t, f)

	// Another source for gen 2.
	other := writeModel(t, filepath.Join(t.TempDir(), "other.safetensors"), 99)
	requestAt(t, f.dir, 2, other, 1_800_000_000, 0)
	r := f.waitSource(t, 2, other)
	if r.State != wal.Failed || !strings.Contains(r.Error, ErrReused.Error()) || !strings.Contains(r.Error, "--resumed-from") {
		t.Fatalf("re-used gen 2: %+v", r)
	}
	// The same published file for gen 2 again: a duplicate, done.
	src2 := filepath.Join(f.dir, GensDir, "gen-000002.zt")
	requestAt(t, f.dir, 2, src2, 1_800_000_001, 0)
	if r := f.waitSource(t, 2, src2); r.State != wal.Done || !r.Redelivered {
		t.Fatalf("duplicate gen 2: %+v", r)
	}

	// Gen 4 from a path outside the store, then other content at that
	// path (content compared), then the same content rewritten.
	p4 := writeModel(t, filepath.Join(t.TempDir(), "m.safetensors"), 4)
	requestAt(t, f.dir, 4, p4, 1_800_000_002, 0)
	if r := f.wait(t, 4); r.State != wal.Done || r.Redelivered {
		t.Fatalf("gen 4: %+v", r)
	}
	n1 := commits(t, f)
	writeModel(t, p4, 40)
	requestAt(t, f.dir, 4, p4, 1_800_000_003, 0)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Guard) // failure guard
	defer cancel()
	r, err := f.d.WaitFor(ctx, 4, func(r *GenResult) bool { return r.State == wal.Failed })
	if err != nil || !strings.Contains(r.Error, "other content") {
		t.Fatalf("changed content for gen 4: %+v %v", r, err)
	}
	writeModel(t, p4, 4)
	requestAt(t, f.dir, 4, p4, 1_800_000_004, 0)
	if r, err := f.d.WaitFor(ctx, 4, func(r *GenResult) bool { return r.State == wal.Done }); err != nil || !r.Redelivered {
		t.Fatalf("same content again for gen 4: %+v %v", r, err)
	}
	if got := commits(t, f); got != n1 || n1 != n0+1 {
		t.Fatalf("commits %d -> %d -> %d: a refused or duplicate request committed", n0, n1, got)
	}

	// wal list: the first gen 2 request stays done, the re-use is failed.
	var states []string
	for _, e := range walEntries(t, f) {
		s := e.State.String()
		if e.State == wal.Failed && !strings.Contains(e.Message, "re-used") {
			t.Errorf("gen %d failed without the reason: %q", e.Gen, e.Message)
		}
		states = append(states, s)
	}
	if got := strings.Join(states, " "); got != "done done done failed done done failed done" {
		t.Fatalf("wal list states: %s", got)
	}
	f.stop(t)
	st, err := ReadStatus(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Failed) != 2 || st.Failed[0].Gen != 2 || st.Failed[0].Source != other || st.Failed[1].Gen != 4 {
		t.Fatalf("status failed: %+v", st.Failed)
	}
	if st.LastError == nil || st.LastError.Gen != 4 || !strings.Contains(st.LastError.Message, "re-used") {
		t.Fatalf("last error: %+v", st.LastError)
	}
	if st.Chain.Gen != 4 {
		t.Fatalf("chain head %d", st.Chain.Gen)
	}
}

// A declared resume chains to the generation the run restarted from; the
// ledger records the abandoned generations and verify-repo passes.
func TestResumeDeclared(t *testing.T) {
	f := newFixture(t)
	f.start(t, nil)
	var res []*GenResult
	for g := uint64(1); g <= 3; g++ {
		request(t, f.dir, g, publish(t, f.dir, g))
		res = append(res, f.wait(t, g))
	}
	p3 := writeModel(t, filepath.Join(t.TempDir(), "resumed-3.safetensors"), 33)
	requestAt(t, f.dir, 3, p3, 1_800_000_000, 2)
	r3 := f.waitSource(t, 3, p3)
	if r3.State != wal.Done || r3.Redelivered || r3.ResumedFrom != 2 || r3.MerklePrev != res[1].MerkleThis || r3.BaseGen != 2 {
		t.Fatalf("resumed gen 3: %+v (gen 2 merkle_this %s)", r3, res[1].MerkleThis)
	}
	p4 := writeModel(t, filepath.Join(t.TempDir(), "resumed-4.safetensors"), 44)
	requestAt(t, f.dir, 4, p4, 1_800_000_001, 0)
	r4 := f.wait(t, 4)
	if r4.State != wal.Done || r4.MerklePrev != r3.MerkleThis {
		t.Fatalf("gen 4: %+v", r4)
	}
	if r3.Tag != "gen-000003-r1" || r4.Tag != "gen-000004" {
		t.Fatalf("tags %s %s", r3.Tag, r4.Tag)
	}
	// A second resume request from a generation above the head fails.
	requestAt(t, f.dir, 6, p4, 1_800_000_002, 5)
	if r := f.wait(t, 6); r.State != wal.Failed || !strings.Contains(r.Error, ErrResume.Error()) {
		t.Fatalf("resume from above the head: %+v", r)
	}
	f.stop(t)

	st, err := ReadStatus(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if rs := st.Chain.Resume; rs == nil || rs.From != 2 || rs.AtGen != 3 || rs.AbandonedLast != 3 || st.Chain.Resuming != nil || st.Chain.Gen != 4 {
		t.Fatalf("chain state %+v resume %+v", st.Chain, st.Chain.Resume)
	}
	log := gittest.Git(t, f.repo.Dir(), "log", "--format=%s", "snapshots")
	if !strings.Contains(log, "snapd: resume from generation 000002 (abandons 000003..000003)") {
		t.Fatalf("log:\n%s", log)
	}
	rep := verifyRepo(t, f)
	if !rep.OK {
		t.Fatalf("verify-repo: %+v", rep.AllFailures())
	}
	// Restart: nothing to recommit, chain head kept.
	f.start(t, nil)
	f.stop(t)
	if rep := verifyRepo(t, f); !rep.OK || len(rep.Generations) != 6 {
		t.Fatalf("after restart: ok=%v %d generations", rep.OK, len(rep.Generations))
	}
}

func verifyRepo(t *testing.T, f *fixture) *verify.Report {
	t.Helper()
	r, err := gogit.PlainOpen(f.repo.Dir())
	if err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Verify(context.Background(), r, verify.Options{TrustedKeys: []ed25519.PublicKey{f.keys.pub}})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
