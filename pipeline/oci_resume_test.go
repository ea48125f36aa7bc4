package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestOCIPublisherResume: a run resumed from generation 2 re-uses number
// 3 in the skeleton layout as in the Git one: the queue job (a file that
// survives restarts) carries the resume, and its commit is preceded by the
// resume record and tagged gen-000003-r1.
func TestOCIPublisherResume(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	dir := t.TempDir()
	k := loadTestKeys(t, filepath.Join(dir, "keys"))
	r, err := oci.Open(reg.Host+"/snapd/resume", oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := gitops.OpenRepo(filepath.Join(dir, "repo"), gitops.Config{SigningKey: k.sign})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewOCIPublisher(r, repo, OCIConfig{StateDir: dir, SegmentSize: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	os.MkdirAll(filepath.Join(dir, "ring"), 0o755)
	encode := func(gen uint64, step int, prev [32]byte) (string, wtxt.Root) {
		t.Helper()
		path := filepath.Join(dir, "ring", fmt.Sprintf("gen-%06d-%d.wtxt", gen, step))
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		s := model(step)
		s.Meta = snapshot.Meta{Schema: "weights/v1", Gen: gen, TS: time.Unix(1_700_000_000+int64(step), 0).UTC(), Build: "test", Host: "cpu", Cuda: "off"}
		res, err := wtxt.Encode(ctx, f, s, wtxt.EncodeOptions{SignKey: k.sign, HMACKey: k.hmac, RowsPerChunk: 16, PrevMerkle: prev})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		return path, res.Root
	}
	publish := func(gen uint64, path string, root wtxt.Root, from uint64) queue.Job {
		t.Helper()
		pub, err := p.Publish(ctx, Generation{Gen: gen, WTXT: path, Header: &gitops.Header{Gen: gen, Root: root}, ResumedFrom: from})
		if err != nil {
			t.Fatal(err)
		}
		if pub.Job == nil || pub.Job.ResumedFrom != from {
			t.Fatalf("gen %d: job %+v, want resumed_from %d", gen, pub.Job, from)
		}
		done, err := p.Jobs().Publish(ctx, queue.Job{Branch: "snapshots", Gen: gen, Publish: pub.Job}, func(queue.Job) error { return nil })
		if err != nil {
			t.Fatalf("gen %d: %v", gen, err)
		}
		return done
	}
	var roots []wtxt.Root
	var prev [32]byte
	for g := uint64(1); g <= 3; g++ {
		path, root := encode(g, int(g), prev)
		publish(g, path, root, 0)
		roots, prev = append(roots, root), root.MerkleThis
	}
	path, root := encode(3, 30, roots[1].MerkleThis)
	done := publish(3, path, root, 2)
	if done.Tag != "gen-000003-r1" {
		t.Fatalf("resumed gen 3 tagged %q, want gen-000003-r1", done.Tag)
	}
	log := gittest.Git(t, repo.Dir(), "log", "--format=%s", "snapshots")
	if !strings.Contains(log, "snapd: resume from generation 000002 (abandons 000003..000003)") {
		t.Fatalf("no resume record before the resumed generation:\n%s", log)
	}
	if c, err := repo.ResolveGen(3); err != nil || c != done.Commit {
		t.Fatalf("generation 3 resolves to %s (%v), want the resumed run's %s", c, err, done.Commit)
	}
}
