package pipeline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestOCIPublisherRegistryStalls: a registry that accepts connections and
// never answers fails the publish job with a retryable error (the queue
// keeps it and tries again) that says the registry stalled, instead of
// hanging the push job; nothing is committed.
func TestOCIPublisherRegistryStalls(t *testing.T) {
	host := registrytest.StartSilent(t)
	dir := t.TempDir()
	k := loadTestKeys(t, filepath.Join(dir, "keys"))
	wtxtPath := filepath.Join(dir, "hold", "gen-000001.wtxt")
	os.MkdirAll(filepath.Dir(wtxtPath), 0o755)
	f, err := os.Create(wtxtPath)
	if err != nil {
		t.Fatal(err)
	}
	s := model(1)
	s.Meta = snapshot.Meta{Schema: "weights/v1", Gen: 1, TS: time.Unix(1_700_000_001, 0).UTC(), Build: "test", Host: "cpu", Cuda: "off"}
	res, err := wtxt.Encode(context.Background(), f, s, wtxt.EncodeOptions{SignKey: k.sign, HMACKey: k.hmac, RowsPerChunk: 16})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(wtxtPath)
	job := queue.Job{Branch: "snapshots", Gen: 1, Publish: &queue.Publish{Kind: KindOCIGeneration, WTXT: wtxtPath, Bytes: st.Size(), Header: &gitops.Header{Gen: 1, Root: res.Root}}}
	r, err := oci.Open(host+"/snapd/stall", oci.Options{DockerConfig: filepath.Join(dir, "none.json"),
		Timeouts: oci.Timeouts{ResponseHeader: 200 * time.Millisecond, Stall: 200 * time.Millisecond}})
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // failure guard only
	defer cancel()
	_, err = p.Jobs().Publish(ctx, job, func(queue.Job) error { return nil })
	if ctx.Err() != nil {
		t.Fatalf("the failure guard ended the publish: %v", err)
	}
	if !errors.Is(err, oci.ErrStalled) || !errors.Is(err, gitops.ErrRetryable) || gitops.NeedsAttention(err) {
		t.Fatalf("publish to a stalled registry: %v; want a retryable error wrapping oci.ErrStalled", err)
	}
	if _, err := repo.ResolveGen(1); err == nil {
		t.Fatal("committed although the registry never took the generation")
	}
}
