package pipeline

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/chunkdiff"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/pipeline/ring"
	"github.com/snapd-ml/snapd/wal"
)

// startDirect starts f's daemon publishing through an OCIPublisher to a
// real registry (8 KiB segments), its queue committing locally.
func startDirect(t *testing.T, f *fixture, r *oci.Repository) *OCIPublisher {
	t.Helper()
	var p *OCIPublisher
	f.start(t, func(c *Config, d *Deps) {
		var err error
		if p, err = NewOCIPublisher(r, f.repo, OCIConfig{StateDir: f.dir, SegmentSize: 8 << 10}); err != nil {
			t.Fatal(err)
		}
		d.Publisher = p
		if d.Queue, err = queue.Open(filepath.Join(f.dir, QueueDir), queue.Options{Pusher: LocalOnly{}, Publisher: p.Jobs(),
			BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	})
	return p
}

// TestOCIDirectBuild: with an OCIPublisher the build encodes each
// generation straight to the skeleton and the segments and pushes them:
// the ring holds the skeleton and the record of the manifest, never a
// WTXT; the queue job only commits the skeleton. The skeleton and the
// registry's blobs give back a WTXT that verifies with the public keys,
// chained; from the second generation the segment cache and the previous
// manifest keep unchanged segments from being hashed and uploaded again.
// A request repeated for the same source is recognised from the ring
// record, and a run resumed from generation 1 chains to the root the
// record holds.
func TestOCIDirectBuild(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, "", "")
	px := registrytest.StartProxy(t, reg.Host)
	f := newFixture(t)
	r, err := oci.Open(px.Host+"/snapd/direct", oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	startDirect(t, f, r)
	ringDir := filepath.Join(f.dir, RingDir)
	ctx := context.Background()
	srcs := map[uint64]string{}
	var total int64
	var res4 *GenResult
	var heads int
	for g := uint64(1); g <= 4; g++ {
		if g == 4 {
			// After a restart the previous segments come from the
			// ring's skeleton.
			f.stop(t)
			startDirect(t, f, r)
		}
		heads = px.Methods()[http.MethodHead]
		srcs[g] = publish(t, f.dir, g)
		request(t, f.dir, g, srcs[g])
		res := f.wait(t, g)
		res4 = res
		if res.State != wal.Done || res.WTXT != "" || res.Skeleton != ringPath(ringDir, g, ring.ExtSkeleton) || res.OCI == nil || res.WTXTBytes <= 0 {
			t.Fatalf("gen %d: %+v, want done from the direct path", g, res)
		}
		if fileExists(ringPath(ringDir, g, ExtWTXT)) || !fileExists(ringPath(ringDir, g, ring.ExtOCI)) {
			t.Fatalf("gen %d: the ring holds a WTXT, or no record of the manifest", g)
		}
		waitPushed(t, f)
		if _, err := f.repo.ResolveGen(g); err != nil {
			t.Fatalf("gen %d not committed: %v", g, err)
		}
		txt := gittest.Git(t, f.repo.Dir(), "show", f.repo.TagName(wtxt.FormatGen(g))+":snapshots/generation.txt")
		if !strings.Contains(txt, "layout=skeleton\n") || !strings.Contains(txt, "oci_manifest="+res.OCI.Manifest) {
			t.Fatalf("gen %d generation.txt:\n%s", g, txt)
		}
		st, err := ReadOCIStats(f.dir)
		if err != nil || st == nil || st.Last == nil || st.Last.Gen != g {
			t.Fatalf("gen %d: oci stats %+v %v", g, st, err)
		}
		if g == 1 {
			total = st.Last.UploadedBytes
			continue
		}
		// model(step) changes two rows of each array per step: three
		// 8 KiB segments, and the attributes document.
		if st.Last.UploadedBytes > 3*(8<<10)+1024 {
			t.Fatalf("gen %d: uploaded %d of %d bytes: unchanged segments were uploaded again", g, st.Last.UploadedBytes, total)
		}
		// Only the config blob and the generation's tag (free, or a
		// re-used number's) are asked for: the previous manifest
		// confirms the unchanged segments (after the restart through
		// the ring's skeleton; before that change every segment was
		// HEADed), the changed ones are uploaded without asking.
		if n := px.Methods()[http.MethodHead] - heads; n > 2 {
			t.Fatalf("gen %d: %d HEAD requests", g, n)
		}
	}
	if !strings.Contains(f.logs.String(), "generation snapshotted") {
		t.Fatalf("daemon log:\n%s", f.logs.String())
	}
	if !fileExists(filepath.Join(f.dir, OCISegmentCacheFile)) {
		t.Fatal("no segment cache written (the fixture has an HMAC key)")
	}

	// Each skeleton, with the registry's blobs, is the signed WTXT,
	// chained to the one before.
	var prev *[32]byte
	for g := uint64(1); g <= 4; g++ {
		out := filepath.Join(t.TempDir(), "gen.wtxt")
		if _, err := oci.AssembleFile(ctx, ringPath(ringDir, g, ring.ExtSkeleton), r, out); err != nil {
			t.Fatalf("gen %d: assemble: %v", g, err)
		}
		fh, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := wtxt.Verify(ctx, fh, wtxt.VerifyOptions{File: out, TrustedKeys: []ed25519.PublicKey{f.keys.pub}, HMACKey: f.keys.hmac, PrevMerkle: prev, RequireSignature: true})
		fh.Close()
		if err != nil {
			t.Fatalf("gen %d: verify: %v", g, err)
		}
		var mt [32]byte
		if b, err := hex.DecodeString(rep.MerkleThis); err != nil || copy(mt[:], b) != 32 {
			t.Fatalf("gen %d: merkle_this %q", g, rep.MerkleThis)
		}
		prev = &mt
	}

	// The same source again: recognised from the ring record.
	requestAt(t, f.dir, 4, srcs[4], 1_800_000_000, 0)
	wctx, cancel := context.WithTimeout(ctx, testutil.Guard) // failure guard
	defer cancel()
	if r, err := f.d.WaitFor(wctx, 4, func(r *GenResult) bool { return r.Redelivered }); err != nil || r.State != wal.Done || r.OCI == nil || r.MerkleThis != res4.MerkleThis {
		t.Fatalf("repeated request: %+v %v", r, err)
	}

	// A run resumed from generation 1: generation 2 again, chained to the
	// root of generation 1's record.
	rec1 := ringOCIRecord(ringDir, 1)
	src := writeModel(t, filepath.Join(t.TempDir(), "resumed-2.safetensors"), 22)
	requestAt(t, f.dir, 2, src, 1_800_000_100, 1)
	r2 := f.waitSource(t, 2, src)
	if r2.State != wal.Done || r2.ResumedFrom != 1 || r2.MerklePrev != hexs(rec1.Header.Root.MerkleThis) || r2.OCI == nil {
		t.Fatalf("resumed generation: %+v, want chained to gen 1's merkle_this %s", r2, hexs(rec1.Header.Root.MerkleThis))
	}
	for _, g := range []uint64{3, 4} {
		if fileExists(ringPath(ringDir, g, ring.ExtSkeleton)) || fileExists(ringPath(ringDir, g, ring.ExtOCI)) {
			t.Fatalf("the abandoned generation %d is still in the ring", g)
		}
	}
	waitPushed(t, f)
	f.stop(t)
	noLeftovers(t, f.dir)
}

// TestOCIDirectNonFinite: the direct path reports NaN/±Inf from the
// encoder's counts: an array that gains some is listed; one that keeps
// the same count is not, one whose count grows is, with the growth.
func TestOCIDirectNonFinite(t *testing.T) {
	head := &ChainState{Gen: 1, Held: &HeldNonFinite{Arrays: []chunkdiff.NonFiniteCount{{Array: "a", NaN: 2}, {Array: "b", NaN: 1, Inf: 1}}}}
	enc := &wtxt.Result{Arrays: []wtxt.ArrayInfo{{Name: "a", NaN: 2}, {Name: "b", NaN: 3, Inf: 1}, {Name: "c", Inf: 4}, {Name: "d"}}}
	it := &item{rec: wal.Record{Request: wal.Request{Gen: 2}}}
	d := &Daemon{log: slog.New(slog.DiscardHandler)}
	d.nonFiniteDirect(it, head, enc)
	got := nonFiniteSummary(it.res.NonFinite)
	if want := "b (2 NaN, 0 Inf), c (0 NaN, 4 Inf)"; got != want {
		t.Fatalf("non-finite %q, want %q", got, want)
	}
}

// TestSegmentCacheIdle: after a push whose segment cache recognised
// nothing (a dense update) the cache is left out, except every
// cacheRetry-th generation; a push it helps puts it back in use.
func TestSegmentCacheIdle(t *testing.T) {
	p := &OCIPublisher{}
	if !p.useSegmentCache(1) {
		t.Fatal("the cache is not used at the start")
	}
	dense := &oci.PushResult{PushStats: oci.PushStats{Segments: 8}}
	p.cacheUsed(dense)
	for g := uint64(2); g < cacheRetry; g++ {
		if p.useSegmentCache(g) {
			t.Fatalf("gen %d: the cache is used after a push it did not help", g)
		}
	}
	if !p.useSegmentCache(cacheRetry) {
		t.Fatalf("gen %d: the cache is not tried again", cacheRetry)
	}
	p.cacheUsed(dense)
	p.cacheUsed(&oci.PushResult{PushStats: oci.PushStats{Segments: 8, CacheHits: 3}})
	if !p.useSegmentCache(cacheRetry + 1) {
		t.Fatal("the cache is not used after a push it helped")
	}
}

// TestOCIDirectWaitsBehindQueue: a registry that cannot be reached makes
// the build fall back (the ring WTXT, left to the queue job, which
// retries); the next generation does not try the registry at all while
// the earlier one still waits for it in the queue, so generations reach
// the registry in order.
func TestOCIDirectWaitsBehindQueue(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there: every request is refused
	r, err := oci.Open(addr+"/snapd/down", oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	startDirect(t, f, r)
	ringDir := filepath.Join(f.dir, RingDir)
	for g := uint64(1); g <= 2; g++ {
		request(t, f.dir, g, publish(t, f.dir, g))
		if res := f.wait(t, g); res.State != wal.Done || res.WTXT == "" || res.OCI != nil {
			t.Fatalf("gen %d: %+v, want done through the ring WTXT", g, res)
		}
		if !fileExists(ringPath(ringDir, g, ExtWTXT)) || fileExists(ringPath(ringDir, g, ring.ExtSkeleton)) {
			t.Fatalf("gen %d: the ring holds no WTXT, or a skeleton", g)
		}
	}
	logs := f.logs.String()
	if n := strings.Count(logs, "registry push from the build failed"); n != 1 {
		t.Fatalf("%d failed pushes from the build, want 1 (generation 1's):\n%s", n, logs)
	}
	if !strings.Contains(logs, `msg="earlier generations wait for the registry: this one is uploaded by the resend queue after them" gen=2`) {
		t.Fatalf("generation 2 did not wait behind generation 1:\n%s", logs)
	}
	st, err := ReadStatus(f.dir)
	if err != nil || st.Queue == nil || st.Queue.Publishing != 2 || st.Queue.PublishPendingBytes <= 0 {
		t.Fatalf("queue %+v %v: want both generations waiting for the registry", st.Queue, err)
	}
	f.stop(t)
}
