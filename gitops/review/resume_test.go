package review

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestReviewResumedRun: generations 1..4 were committed, then the run
// resumed from generation 2 and re-made 3. A review of the change from
// the old head (4) to the resumed 3 finds the signed resume record in the
// history (git log through GitFetcher) and says what it means instead of
// "generation does not increase"; without history it says what the two
// files show, as before.
func TestReviewResumedRun(t *testing.T) {
	ctx := context.Background()
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	dir := t.TempDir()
	repo, err := gitops.OpenRepo(filepath.Join(dir, "repo"), gitops.Config{SigningKey: key})
	if err != nil {
		t.Fatal(err)
	}
	encode := func(gen uint64, fill byte, prev [32]byte) (string, [32]byte) {
		t.Helper()
		data := make([]byte, 64*16)
		data[gen] = fill
		s := &snapshot.Snapshot{Meta: snapshot.Meta{Schema: "weights/v1", Gen: gen, TS: time.Unix(1700000000+int64(fill), 0).UTC(), Build: "t", Host: "cpu", Cuda: "off"},
			Arrays: []*snapshot.Array{{Name: "W", DType: snapshot.F32, Shape: []int64{16, 16}, Data: snapshot.Bytes(data)}}}
		var buf bytes.Buffer
		res, err := wtxt.Encode(ctx, &buf, s, wtxt.EncodeOptions{SignKey: key, PrevMerkle: prev})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, fmt.Sprintf("g%d-%d.wtxt", gen, fill))
		os.WriteFile(p, buf.Bytes(), 0o644)
		return p, res.MerkleThis
	}
	commit := func(p string, rs *gitops.Resume) string {
		t.Helper()
		r, err := repo.Commit(ctx, gitops.Generation{WTXT: p, Resume: rs})
		if err != nil {
			t.Fatal(err)
		}
		return r.Commit.String()
	}
	var prev [32]byte
	var merkles [][32]byte
	var paths []string
	var commits []string
	for g := uint64(1); g <= 4; g++ {
		p, m := encode(g, byte(g), prev)
		commits = append(commits, commit(p, nil))
		paths, merkles, prev = append(paths, p), append(merkles, m), m
	}
	resumedPath, _ := encode(3, 33, merkles[1])
	head := commit(resumedPath, &gitops.Resume{From: 2})

	fetch := Fallback{GitFetcher{Dir: repo.Dir()}}
	rs, err := fetch.Resumes(ctx, commits[3], head)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].From != 2 || rs[0].FromCommit != commits[1] || rs[0].Abandoned != "000003..000004" {
		t.Fatalf("resume records %+v (gen 2 is %s)", rs, commits[1])
	}
	if none, err := fetch.Resumes(ctx, commits[0], commits[3]); err != nil || len(none) != 0 {
		t.Fatalf("a change without a resume: %+v %v", none, err)
	}

	opts := Options{TrustedKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}, RequireSignature: true}
	in := []FileInput{{Path: "snapshots/current.wtxt", Base: paths[3], Head: resumedPath}}
	withHistory := opts
	withHistory.Resumes = rs
	rv, err := Build(ctx, in, withHistory)
	if err != nil {
		t.Fatal(err)
	}
	if rv.Event == EventRequestChanges {
		t.Fatalf("a declared resume requests changes:\n%s", rv.Body)
	}
	if !strings.Contains(rv.Body, "the run resumed from generation 000002") || !strings.Contains(rv.Body, "abandons 000003..000004") ||
		strings.Contains(rv.Body, "does not increase") {
		t.Fatalf("the review does not explain the resume:\n%s", rv.Body)
	}
	rv, err = Build(ctx, in, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rv.Body, "does not increase") {
		t.Fatalf("without history the review no longer says what the files show:\n%s", rv.Body)
	}
}
