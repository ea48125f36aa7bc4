package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/snapshot"
)

// genWTXT encodes a generation of one 4 MiB f32 array W (16384 rows of 256
// bytes; 64 KiB chunks) plus a small bias, with data from seed and rows
// [lo, hi) flipped.
func genWTXT(t *testing.T, gen uint64, lo, hi int) []byte {
	t.Helper()
	const rows, rowSize = 16384, 256
	r := rand.New(rand.NewPCG(1, 2))
	w := make([]byte, rows*rowSize)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for i := lo * rowSize; i < hi*rowSize; i++ {
		w[i] ^= byte(gen)
	}
	m := snapshot.DefaultMeta()
	m.Gen, m.TS, m.Build = gen, time.Date(2026, 11, 24, 5, 0, int(gen), 0, time.UTC), "test"
	s := &snapshot.Snapshot{Meta: m, Arrays: []*snapshot.Array{
		{Name: "W", DType: snapshot.F32, Shape: []int64{rows, 64}, Data: snapshot.Bytes(w)},
		{Name: "b", DType: snapshot.F32, Shape: []int64{64}, Data: snapshot.Bytes(make([]byte, 256))},
	}}
	var buf bytes.Buffer
	if _, err := wtxt.Encode(context.Background(), &buf, s, wtxt.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func pushBytes(t *testing.T, repo *Repository, in []byte, segSize int64) (*PushResult, []byte) {
	t.Helper()
	var skel bytes.Buffer
	res, err := repo.PushWTXT(context.Background(), bytes.NewReader(in), "gen.wtxt", &skel, segSize)
	if err != nil {
		t.Fatal(err)
	}
	return res, skel.Bytes()
}

func assembleFrom(t *testing.T, repo *Repository, skel []byte) ([]byte, error) {
	t.Helper()
	dir := t.TempDir()
	sp, out := filepath.Join(dir, "g.skel"), filepath.Join(dir, "g.wtxt")
	if err := os.WriteFile(sp, skel, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := AssembleFile(context.Background(), sp, repo, out)
	if err != nil {
		if _, serr := os.Stat(out); serr == nil {
			t.Fatal("partial output left behind")
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Fatalf("temp files left behind: %d entries", len(ents))
		}
		return nil, err
	}
	return os.ReadFile(out)
}

// TestRegistryPushTwoGenerations: the second generation, with 1% of rows
// changed in one cluster, uploads only the segments that changed; both
// assemble byte for byte from the registry; the oras CLI reads them.
func TestRegistryPushTwoGenerations(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	repo, err := Open(reg.Host+"/snapd/model", Options{})
	if err != nil {
		t.Fatal(err)
	}
	const segSize = 256 << 10 // 4 chunks of W per segment: 16 segments + b
	g1 := genWTXT(t, 1, 0, 0)
	g2 := genWTXT(t, 2, 8000, 8164) // 164 rows = 1% of 16384, inside chunk 125..127
	r1, skel1 := pushBytes(t, repo, g1, segSize)
	if r1.Uploaded != 17 || r1.Skipped != 0 || r1.Tag != "gen-000001" {
		t.Fatalf("gen 1: %+v", r1.PushStats)
	}
	r2, skel2 := pushBytes(t, repo, g2, segSize)
	changed, changedBytes := 0, int64(0)
	for i := range r1.Generation.Segments {
		if r1.Generation.Segments[i].Digest != r2.Generation.Segments[i].Digest {
			changed++
			changedBytes += r2.Generation.Segments[i].Size
		}
	}
	if changed < 1 || changed > 2 || r2.Uploaded != changed || r2.UploadedBytes != changedBytes || r2.Skipped != 17-changed {
		t.Fatalf("gen 2: %d segments changed (%d bytes); push %+v", changed, changedBytes, r2.PushStats)
	}
	t.Logf("gen 2: uploaded %d of %d segments, %d bytes (%.1f%% of the raw %d)", r2.Uploaded, r2.Segments, r2.UploadedBytes, 100*float64(r2.UploadedBytes)/float64(16384*256+256), 16384*256+256)
	for i, c := range []struct{ skel, want []byte }{{skel1, g1}, {skel2, g2}} {
		got, err := assembleFrom(t, repo, c.skel)
		if err != nil {
			t.Fatalf("assemble gen %d: %v", i+1, err)
		}
		if !bytes.Equal(got, c.want) {
			t.Fatalf("gen %d: assembled WTXT differs", i+1)
		}
	}
	// Pushing the same generation again uploads nothing and gives the same
	// manifest (deterministic).
	r2b, _ := pushBytes(t, repo, g2, segSize)
	if r2b.Uploaded != 0 || r2b.Manifest.Digest != r2.Manifest.Digest {
		t.Fatalf("re-push: %+v vs %s", r2b.PushStats, r2.Manifest.Digest)
	}

	t.Run("oras", func(t *testing.T) { orasReads(t, reg, r2) })

	t.Run("check", func(t *testing.T) {
		ctx := context.Background()
		for _, s := range [][]byte{skel1, skel2} {
			if _, err := repo.CheckGeneration(ctx, s, "g.skel", ""); err != nil {
				t.Fatal(err)
			}
		}
		// A skeleton whose header does not match the manifest.
		bad := bytes.Replace(skel2, []byte("ts=2026-11-24T05:00:02Z"), []byte("ts=2026-11-24T05:00:09Z"), 1)
		if _, err := repo.CheckGeneration(ctx, bad, "g.skel", ""); err == nil || !strings.Contains(err.Error(), "gen-000002") {
			t.Fatalf("mismatched skeleton: %v", err)
		}
	})

	t.Run("missing blob", func(t *testing.T) {
		// Remove one segment's data from the registry's storage.
		seg := r2.Generation.Segments[3]
		hx := hex.EncodeToString(seg.Digest[:])
		p := filepath.Join(reg.Storage, "docker/registry/v2/blobs/sha256", hx[:2], hx, "data")
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		_, err := assembleFrom(t, repo, skel2)
		var e *wtxt.Error
		if !errors.As(err, &e) || e.Check != wtxt.CheckBlob || e.Array != "W" || e.Chunk != seg.FirstChunk || e.Line == 0 {
			t.Fatalf("want a located blob error for array W chunk %d, got %v", seg.FirstChunk, err)
		}
		_, err = repo.CheckGeneration(context.Background(), skel2, "g.skel", "")
		if !errors.Is(err, wtxt.ErrBlobNotFound) || !strings.Contains(err.Error(), seg.DigestString()) {
			t.Fatalf("check: want the missing blob named, got %v", err)
		}
	})
}

// orasReads checks the independent oras CLI can fetch the manifest and
// pull the generation's blobs.
func orasReads(t *testing.T, reg *registrytest.Registry, r *PushResult) {
	oras, err := exec.LookPath("oras")
	if err != nil {
		home, _ := os.UserHomeDir()
		if _, serr := os.Stat(filepath.Join(home, "go/bin/oras")); serr != nil {
			t.Skip("oras CLI not installed (go install oras.land/oras/cmd/oras@v1.3.6; scripts/test.sh does)")
		}
		oras = filepath.Join(home, "go/bin/oras")
	}
	ref := reg.Host + "/snapd/model:" + r.Tag
	out, err := exec.Command(oras, "manifest", "fetch", "--plain-http", ref).Output()
	if err != nil {
		t.Fatalf("oras manifest fetch: %v", err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if m.ArtifactType != ArtifactType || m.Annotations[AnnGen] != r.Generation.Gen || m.Annotations[AnnSHA256All] != r.Generation.SHA256All || m.Config.MediaType != ConfigMediaType {
		t.Fatalf("manifest: %s", out)
	}
	dir := t.TempDir()
	cmd := exec.Command(oras, "pull", "--plain-http", "-o", dir, ref)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oras pull: %v\n%s", err, b)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(m.Layers) {
		t.Fatalf("oras pulled %d files, manifest has %d layers", len(ents), len(m.Layers))
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if e.Name() != "sha256-"+hex.EncodeToString(sum[:])+".seg" {
			t.Fatalf("pulled %s has digest %x", e.Name(), sum)
		}
	}
}

// TestRegistryBasicAuth: htpasswd basic auth, with credentials from
// Options and from a Docker config.json; a wrong password fails without
// the password appearing in the error.
func TestRegistryBasicAuth(t *testing.T) {
	const user, pass = "snapd", "s3cret-pass-XYZ"
	reg := registrytest.Start(t, user, pass)
	g1 := genWTXT(t, 1, 0, 0)
	ctx := context.Background()

	bad, err := Open(reg.Host+"/snapd/model", Options{Username: user, Password: "wrong-pass-QQQ"})
	if err != nil {
		t.Fatal(err)
	}
	var skel bytes.Buffer
	_, err = bad.PushWTXT(ctx, bytes.NewReader(g1), "g1.wtxt", &skel, 0)
	if err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
		t.Fatalf("wrong password: %v", err)
	}
	if strings.Contains(err.Error(), "wrong-pass-QQQ") {
		t.Fatal("error echoes the password")
	}
	anon, err := Open(reg.Host+"/snapd/model", Options{DockerConfig: filepath.Join(t.TempDir(), "none.json")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.PushWTXT(ctx, bytes.NewReader(g1), "g1.wtxt", &bytes.Buffer{}, 0); err == nil {
		t.Fatal("anonymous push accepted by an htpasswd registry")
	}

	good, err := Open(reg.Host+"/snapd/model", Options{Username: user, Password: pass})
	if err != nil {
		t.Fatal(err)
	}
	r1, skel1 := pushBytes(t, good, g1, 0)
	if r1.Uploaded != 2 { // W (4 MiB) + b, one segment each at the default 4 MiB
		t.Fatalf("push: %+v", r1.PushStats)
	}

	// Docker config.json as `docker login` writes it.
	cfg := filepath.Join(t.TempDir(), "config.json")
	dc := fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, reg.Host, base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
	if err := os.WriteFile(cfg, []byte(dc), 0o600); err != nil {
		t.Fatal(err)
	}
	viaCfg, err := Open(reg.Host+"/snapd/model", Options{DockerConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	got, err := assembleFrom(t, viaCfg, skel1)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, g1) {
		t.Fatal("assembled WTXT differs")
	}
}

func TestOpenPlainHTTPOnlyLoopback(t *testing.T) {
	for ref, plain := range map[string]bool{
		"127.0.0.1:5000/a/b": true, "localhost:5000/a": true, "[::1]:5000/a": true,
		"registry.example:5000/a": false, "ghcr.io/o/m": false,
	} {
		r, err := Open(ref, Options{DockerConfig: filepath.Join(t.TempDir(), "none.json")})
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if r.repo.PlainHTTP != plain {
			t.Fatalf("%s: plain HTTP %v", ref, r.repo.PlainHTTP)
		}
	}
	r, _ := Open("registry.example:5000/a", Options{Insecure: true, DockerConfig: filepath.Join(t.TempDir(), "none.json")})
	if !r.repo.PlainHTTP {
		t.Fatal("insecure not honoured")
	}
	for _, bad := range []string{"", "nohost", "127.0.0.1:5000/a:tag", "127.0.0.1:5000/A"} {
		if _, err := Open(bad, Options{}); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// TestRegistryMount: a fine-tuned model in another repository of the same
// registry mounts the base's unchanged segments instead of uploading them.
func TestRegistryMount(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	base, err := Open(reg.Host+"/snapd/base", Options{})
	if err != nil {
		t.Fatal(err)
	}
	const segSize = 256 << 10
	g1 := genWTXT(t, 1, 0, 0)
	r1, _ := pushBytes(t, base, g1, segSize)
	ft, err := Open(reg.Host+"/snapd/finetune", Options{MountFrom: "snapd/base"})
	if err != nil {
		t.Fatal(err)
	}
	g2 := genWTXT(t, 2, 4000, 4100)
	r2, skel := pushBytes(t, ft, g2, segSize)
	changed := 0
	for i := range r1.Generation.Segments {
		if r1.Generation.Segments[i].Digest != r2.Generation.Segments[i].Digest {
			changed++
		}
	}
	if changed == 0 || r2.Uploaded != changed || r2.Mounted != r2.Segments-changed || r2.Skipped != 0 {
		t.Fatalf("%d changed; push %+v", changed, r2.PushStats)
	}
	// The fine-tuned repository serves every blob itself.
	plain, _ := Open(reg.Host+"/snapd/finetune", Options{})
	got, err := assembleFrom(t, plain, skel)
	if err != nil || !bytes.Equal(got, g2) {
		t.Fatalf("assemble from the mounting repository: %v", err)
	}
}

// cancelAfterPuts cancels a context once n blob uploads have completed
// (a PUT answered 201), simulating a push killed midway.
// cancelAfterPuts cancels the push once n blob uploads have completed
// (201 to the PUT that finishes an upload). The finishing PUTs are
// serialised and none is sent after the cancel, so exactly n blobs are in
// the registry afterwards: no in-flight upload can land behind the
// cancel. Everything else (upload sessions, HEADs) runs concurrently.
type cancelAfterPuts struct {
	next    http.RoundTripper
	n       int64
	done    atomic.Int64
	cancel  context.CancelFunc
	mu      sync.Mutex // held across a finishing PUT
	stopped bool       // under mu: the n-th blob is in
}

func (c *cancelAfterPuts) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPut || !strings.Contains(req.URL.Path, "/blobs/uploads/") {
		return c.next.RoundTrip(req)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errors.New("cancelAfterPuts: push cancelled, upload not sent")
	}
	resp, err := c.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusCreated {
		if c.done.Add(1) == c.n {
			c.stopped = true
			c.cancel()
		}
	}
	return resp, err
}

// TestRegistryInterruptedPush: a push interrupted after some blobs are in
// continues where it stopped: the next push uploads only the blobs still
// missing, never the whole generation again, and no manifest was pushed
// by the interrupted one.
func TestRegistryInterruptedPush(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ct := &cancelAfterPuts{next: http.DefaultTransport, n: 5, cancel: cancel}
	repo, err := Open(reg.Host+"/snapd/resume", Options{HTTPClient: &http.Client{Transport: ct}, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	g1 := genWTXT(t, 1, 0, 0)
	if _, err := repo.PushWTXT(ctx, bytes.NewReader(g1), "g1.wtxt", io.Discard, 256<<10); err == nil {
		t.Fatal("interrupted push reported success")
	}
	done := int(ct.done.Load())
	if done != 5 {
		t.Fatalf("%d blobs completed before the interruption", done)
	}
	again, err := Open(reg.Host+"/snapd/resume", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if gens, err := again.Generations(context.Background()); err != nil || len(gens) != 0 {
		t.Fatalf("a manifest was pushed by the interrupted push: %v %v", gens, err)
	}
	r, skel := pushBytes(t, again, g1, 256<<10)
	// Exactly the done blobs are skipped (no upload was sent after the
	// cancel): nothing already in is sent again, everything else is.
	if r.Uploaded+r.Skipped != 17 || r.Skipped != done {
		t.Fatalf("resumed push: %+v after %d blobs were in", r.PushStats, done)
	}
	got, err := assembleFrom(t, again, skel)
	if err != nil || !bytes.Equal(got, g1) {
		t.Fatalf("assemble: %v", err)
	}
}
