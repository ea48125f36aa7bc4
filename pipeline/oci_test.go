package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// TestOCIPublisherIdempotent drives OCIPublisher against the real registry
// and a real repository through the crash points of one job: a crash
// after the manifest was pushed but before the job was saved (the save
// fails) re-runs the upload, which HEADs every blob and uploads nothing;
// a crash after the commit re-runs the commit, which finds it. The
// generation is committed once, with the skeleton the registry
// assembles back into the WTXT.
func TestOCIPublisherIdempotent(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	dir := t.TempDir()
	k := loadTestKeys(t, filepath.Join(dir, "keys"))
	// Generation 1's WTXT, as the build stage writes it into the ring.
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
	h := &gitops.Header{Gen: 1, Root: res.Root}
	job := queue.Job{Branch: "snapshots", Gen: 1, Publish: &queue.Publish{Kind: KindOCIGeneration, WTXT: wtxtPath, Bytes: st.Size(), Header: h}}

	repoRef := reg.Host + "/snapd/unit"
	r, err := oci.Open(repoRef, oci.Options{})
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

	// Crash after the manifest, before the save.
	crash := errors.New("killed")
	if _, err := p.Jobs().Publish(ctx, job, func(queue.Job) error { return crash }); !errors.Is(err, crash) {
		t.Fatalf("first run: %v", err)
	}
	first, _ := ReadOCIStats(dir)
	if first == nil || first.Last.UploadedBytes == 0 || first.Last.SkippedBytes != 0 {
		t.Fatalf("first upload: %+v", first)
	}
	if _, err := repo.ResolveGen(1); err == nil {
		t.Fatal("committed although the job was not saved after the upload")
	}
	// The re-run uploads nothing and commits.
	var saved queue.Job
	done, err := p.Jobs().Publish(ctx, job, func(j queue.Job) error { saved = j; return nil })
	if err != nil {
		t.Fatal(err)
	}
	second, _ := ReadOCIStats(dir)
	if second.Last.UploadedBytes != 0 || second.Last.SkippedBytes != first.Last.UploadedBytes || second.Last.Manifest != first.Last.Manifest {
		t.Fatalf("re-run after the crash: %+v, first %+v", second.Last, first.Last)
	}
	if saved.Publish == nil || savedState(t, saved).Manifest != first.Last.Manifest || !saved.Publish.Sent || saved.Commit != "" {
		t.Fatalf("saved job %+v", saved)
	}
	if len(done.Commit) != 40 || done.Tag != "gen-000001" {
		t.Fatalf("job after publish: %+v", done)
	}
	// Crash after the commit: the re-run (from the saved job) finds it.
	again, err := p.Jobs().Publish(ctx, saved, func(queue.Job) error { t.Fatal("nothing to save"); return nil })
	if err != nil || again.Commit != done.Commit {
		t.Fatalf("re-run after the commit: %+v %v", again, err)
	}
	if third, _ := ReadOCIStats(dir); third.Generations != 2 {
		t.Fatalf("uploads recorded: %d, want 2 (the second all skipped)", third.Generations)
	}
	// The committed skeleton + the registry give back the WTXT.
	var skel []byte
	{
		c, err := repo.ResolveGen(1)
		if err != nil {
			t.Fatal(err)
		}
		skel = []byte(gittest.Git(t, filepath.Join(dir, "repo"), "show", c+":snapshots/"+gitops.FileSkeleton))
	}
	sp := filepath.Join(dir, "s.skel")
	os.WriteFile(sp, skel, 0o644)
	out := filepath.Join(dir, "out.wtxt")
	if _, err := oci.AssembleFile(ctx, sp, r, out); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(wtxtPath)
	if string(a) != string(b) {
		t.Fatal("assembled WTXT differs")
	}
	// A job of another kind is refused as a local problem (needs a person).
	bad := job
	bad.Publish = &queue.Publish{Kind: "other", WTXT: wtxtPath}
	if _, err := p.Jobs().Publish(ctx, bad, nil); !gitops.NeedsAttention(err) {
		t.Fatalf("foreign job: %v", err)
	}
}

// savedState reads the OCI progress a job's Publisher saved.
func savedState(t *testing.T, j queue.Job) ociState {
	t.Helper()
	var st ociState
	if err := json.Unmarshal(j.Publish.State, &st); err != nil {
		t.Fatalf("job %s state %q: %v", j.ID(), j.Publish.State, err)
	}
	return st
}

// TestOCIPublisherBlobDeletedUnderManifest: the second generation's push
// takes gen 1's blobs as present from gen 1's manifest. A blob deleted
// from under that manifest makes the registry refuse gen 2's manifest;
// the job fails (nothing committed) and its retry HEADs every blob,
// uploads the deleted one and commits a generation that assembles.
func TestOCIPublisherBlobDeletedUnderManifest(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	dir := t.TempDir()
	k := loadTestKeys(t, filepath.Join(dir, "keys"))
	ctx := context.Background()
	var prevMerkle [32]byte
	jobFor := func(gen uint64) (queue.Job, string) {
		t.Helper()
		path := filepath.Join(dir, "hold", fmt.Sprintf("gen-%06d.wtxt", gen))
		os.MkdirAll(filepath.Dir(path), 0o755)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		s := model(int(gen))
		s.Meta = snapshot.Meta{Schema: "weights/v1", Gen: gen, TS: time.Unix(1_700_000_000+int64(gen), 0).UTC(), Build: "test", Host: "cpu", Cuda: "off"}
		res, err := wtxt.Encode(ctx, f, s, wtxt.EncodeOptions{SignKey: k.sign, HMACKey: k.hmac, RowsPerChunk: 16, PrevMerkle: prevMerkle})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		prevMerkle = res.Root.MerkleThis
		st, _ := os.Stat(path)
		return queue.Job{Branch: "snapshots", Gen: gen, Publish: &queue.Publish{Kind: KindOCIGeneration, WTXT: path, Bytes: st.Size(),
			Header: &gitops.Header{Gen: gen, Root: res.Root}}}, path
	}
	r, err := oci.Open(reg.Host+"/snapd/deleted", oci.Options{})
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
	save := func(queue.Job) error { return nil }
	j1, _ := jobFor(1)
	if _, err := p.Jobs().Publish(ctx, j1, save); err != nil {
		t.Fatal(err)
	}
	// embed.weight's third segment (rows 64-95; 16 rows a chunk, two
	// chunks a segment): gens 1 and 2 change rows 1, 13, 2 and 26 only.
	s1, err := os.ReadFile(filepath.Join(dir, "hold", "gen-000001.wtxt.skel"))
	if err != nil {
		t.Fatal(err)
	}
	segs, err := wtxt.SkeletonSegments(ctx, bytes.NewReader(s1), "gen1.skel")
	if err != nil {
		t.Fatal(err)
	}
	victim := segs[2]
	if victim.Array != "embed.weight" || victim.FirstChunk != 4 {
		t.Fatalf("first segment: %+v", victim)
	}
	reg.DeleteBlob(t, "snapd/deleted", oci.SegmentDescriptor(victim).Digest.String())

	j2, w2 := jobFor(2)
	if _, err := p.Jobs().Publish(ctx, j2, save); !errors.Is(err, oci.ErrManifestBlobUnknown) {
		t.Fatalf("gen 2 reusing a deleted blob: %v, want ErrManifestBlobUnknown", err)
	}
	if _, err := repo.ResolveGen(2); err == nil {
		t.Fatal("gen 2 committed although its manifest was refused")
	}
	done, err := p.Jobs().Publish(ctx, j2, save)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	st, _ := ReadOCIStats(dir)
	if st.Last.Gen != 2 || st.Last.UploadedBytes < victim.Size || len(done.Commit) != 40 {
		t.Fatalf("retry: stats %+v, job %+v", st.Last, done)
	}
	c, err := repo.ResolveGen(2)
	if err != nil {
		t.Fatal(err)
	}
	sp, out := filepath.Join(dir, "g2.skel"), filepath.Join(dir, "g2.wtxt")
	os.WriteFile(sp, []byte(gittest.Git(t, filepath.Join(dir, "repo"), "show", c+":snapshots/"+gitops.FileSkeleton)), 0o644)
	if _, err := oci.AssembleFile(ctx, sp, r, out); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(w2)
	if !bytes.Equal(a, b) {
		t.Fatal("assembled gen 2 differs from its WTXT")
	}
}
