package pipeline

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/ztensor"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

func testRegistry() *formats.Registry {
	return formats.NewRegistry(wtxt.New(), safetensors.New(), ztensor.New())
}

// testKeys generates (once per dir) a key set.
type testKeys struct {
	sign ed25519.PrivateKey
	pub  ed25519.PublicKey
	hmac []byte
	gen  *keys.Generated
}

func loadTestKeys(t testing.TB, dir string) *testKeys {
	t.Helper()
	g, err := keys.Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := keys.LoadSigner(g.SignKey)
	if err != nil {
		t.Fatal(err)
	}
	hk, err := keys.LoadHMACKey(g.HMACKey)
	if err != nil {
		t.Fatal(err)
	}
	return &testKeys{sign: sk, pub: g.PublicKey, hmac: hk, gen: g}
}

// model is a tiny synthetic checkpoint whose rows change per step.
func model(step int) *snapshot.Snapshot {
	mk := func(name string, rows, cols int) *snapshot.Array {
		b := make([]byte, rows*cols*4)
		for r := 0; r < rows; r++ {
			for c := 0; c < cols; c++ {
				v := float32(r*cols + c)
				if r == step%rows || r == (step*13)%rows {
					v += float32(step)
				}
				u := math.Float32bits(v)
				i := 4 * (r*cols + c)
				b[i], b[i+1], b[i+2], b[i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
			}
		}
		return &snapshot.Array{Name: name, DType: snapshot.F32, Shape: []int64{int64(rows), int64(cols)}, Data: snapshot.Bytes(b)}
	}
	return &snapshot.Snapshot{Arrays: []*snapshot.Array{mk("embed.weight", 256, 64), mk("head.weight", 64, 32)}}
}

// publish writes step's model as generation gen into the store (format
// alternates safetensors / ztensor) and returns its path.
func publish(t testing.TB, stateDir string, gen uint64) string {
	t.Helper()
	st, err := snapshot.OpenGenStore(filepath.Join(stateDir, GensDir))
	if err != nil {
		t.Fatal(err)
	}
	var c formats.Codec = safetensors.New()
	suffix := ".safetensors"
	if gen%2 == 0 {
		c, suffix = ztensor.New(), ".zt"
	}
	g, err := st.Publish(gen, suffix, func(w io.Writer) error {
		return c.Encode(context.Background(), w, model(int(gen)), formats.EncodeOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}
	return g.Path
}

func request(t testing.TB, stateDir string, gen uint64, src string) {
	t.Helper()
	w, err := wal.OpenWriter(filepath.Join(stateDir, WALDir))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Append(wal.Request{Gen: gen, Time: time.Unix(1_700_000_000+int64(gen), 0), Requester: "test", Source: src}); err != nil {
		t.Fatal(err)
	}
}

type fixture struct {
	dir  string
	keys *testKeys
	reg  *prometheus.Registry
	d    *Daemon
	repo *gitops.Repo
	logs *testutil.SyncBuffer
	// pushed counts the observed queue's successful pushes, housekept
	// the AfterPush calls that followed them (observedQueue): waitPushed
	// waits for both to agree.
	pushed, housekept atomic.Int64
}

func testConfig(dir string, k *testKeys) Config {
	return Config{StateDir: dir, SignKey: k.sign, HMACKey: k.hmac, Build: "test", PollInterval: 20 * time.Millisecond,
		RingKeep: 100, QueueMax: 16, Policy: PolicyBlock, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, Workers: 2, RowsPerChunk: 16}
}

// start opens and starts a daemon on f.dir.
func (f *fixture) start(t testing.TB, mod func(*Config, *Deps)) {
	t.Helper()
	var err error
	if f.repo == nil {
		if f.repo, err = gitops.OpenRepo(filepath.Join(f.dir, RepoDir), gitops.Config{SigningKey: f.keys.sign}); err != nil {
			t.Fatal(err)
		}
	}
	f.reg = prometheus.NewRegistry()
	if f.logs == nil {
		f.logs = &testutil.SyncBuffer{}
	}
	cfg := testConfig(f.dir, f.keys)
	deps := Deps{Registry: testRegistry(), Logger: slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Metrics: f.reg, Repo: f.repo}
	if mod != nil {
		mod(&cfg, &deps)
	}
	if f.d, err = New(cfg, deps); err != nil {
		t.Fatal(err)
	}
	if err := f.d.Start(context.Background()); err != nil {
		f.d.Close(context.Background())
		t.Fatal(err)
	}
}

// pushTo gives f's daemon a resend queue (retried every 10-50 ms) that
// pushes to url through the push observer, so retention trims the local
// repository after each push. Call it from f.start's mod.
func (f *fixture) pushTo(t testing.TB, d *Deps, url string) {
	t.Helper()
	p, err := gitops.NewPusher(filepath.Join(f.dir, RepoDir), gitops.Remote{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	f.observedQueue(t, d, p)
}

// observedQueue gives d a resend queue (retried every 10-50 ms) that
// pushes through p and the push observer (d.Pushes), whose AfterPush
// trims and maintains the local repository after each push; f counts
// the pushes and the AfterPush calls for waitPushed.
func (f *fixture) observedQueue(t testing.TB, d *Deps, p gitops.Pusher) {
	t.Helper()
	d.Pushes = ObservePushes(p)
	after := func(ctx context.Context, j queue.Job) {
		d.Pushes.AfterPush(ctx, j)
		f.housekept.Add(1)
	}
	var err error
	if d.Queue, err = queue.Open(filepath.Join(f.dir, QueueDir), queue.Options{Pusher: countingPusher{d.Pushes, &f.pushed}, AfterPush: after,
		BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
}

// countingPusher counts the successful pushes of the Pusher it wraps.
type countingPusher struct {
	gitops.Pusher
	n *atomic.Int64
}

func (c countingPusher) Push(ctx context.Context, req gitops.PushRequest) error {
	err := c.Pusher.Push(ctx, req)
	if err == nil {
		c.n.Add(1)
	}
	return err
}

func (f *fixture) stop(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Guard) // failure guard
	defer cancel()
	if err := f.d.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func newFixture(t testing.TB) *fixture {
	dir := t.TempDir()
	f := &fixture{dir: dir, keys: loadTestKeys(t, filepath.Join(dir, KeysDir))}
	t.Cleanup(func() {
		if f.d != nil {
			f.d.Close(context.Background())
		}
		if t.Failed() && f.logs != nil {
			t.Logf("daemon log:\n%s", f.logs.String())
		}
	})
	return f
}

func (f *fixture) wait(t testing.TB, gen uint64) *GenResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Guard) // failure guard
	defer cancel()
	r, err := f.d.Wait(ctx, gen)
	if err != nil {
		t.Fatalf("wait gen %d: %v", gen, err)
	}
	return r
}

// metric returns the sum of the samples of a metric family.
func metric(t testing.TB, reg *prometheus.Registry, name string, label ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(label); i += 2 {
				ok := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == label[i] && lp.GetValue() == label[i+1] {
						ok = true
					}
				}
				if !ok {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

// verifyChain verifies every ring generation listed in gens (ascending)
// with the public key and HMAC key, each chained to the one before, and
// checks each delta reproduces its target.
func verifyChain(t testing.TB, dir string, k *testKeys, gens []uint64) {
	t.Helper()
	ring := filepath.Join(dir, RingDir)
	var prev *[32]byte
	var prevPath string
	for _, g := range gens {
		p := ringPath(ring, g, ExtWTXT)
		f, err := os.Open(p)
		if err != nil {
			t.Fatalf("gen %d: %v", g, err)
		}
		rep, err := wtxt.Verify(context.Background(), f, wtxt.VerifyOptions{File: p, TrustedKeys: []ed25519.PublicKey{k.pub}, HMACKey: k.hmac, PrevMerkle: prev, RequireSignature: true})
		f.Close()
		if err != nil {
			t.Fatalf("gen %d: verify: %v", g, err)
		}
		if prev == nil && rep.Chain != "first" && rep.Chain != "unchecked" {
			t.Fatalf("gen %d: chain %q", g, rep.Chain)
		}
		if prevPath != "" {
			checkDelta(t, prevPath, ringPath(ring, g, ExtDelta), p)
		}
		var mt [32]byte
		if b, err := hex.DecodeString(rep.MerkleThis); err != nil || copy(mt[:], b) != 32 {
			t.Fatalf("gen %d: merkle_this %q", g, rep.MerkleThis)
		}
		prev = &mt
		prevPath = p
	}
}

func checkDelta(t testing.TB, base, delta, target string) {
	t.Helper()
	bb, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	df, err := os.Open(delta)
	if err != nil {
		t.Fatalf("delta: %v", err)
	}
	defer df.Close()
	var out bytes.Buffer
	if _, err := wtxt.ApplyDelta(context.Background(), &out, bytes.NewReader(bb), int64(len(bb)), df, delta); err != nil {
		t.Fatalf("apply %s: %v", delta, err)
	}
	tb, _ := os.ReadFile(target)
	if !bytes.Equal(out.Bytes(), tb) {
		t.Fatalf("delta %s does not reproduce %s", delta, target)
	}
}

// noLeftovers fails if temp files or pins remain in the state dir.
func noLeftovers(t testing.TB, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if strings.Contains(d.Name(), ".snapd-tmp-") || strings.HasPrefix(d.Name(), ".tmp-") {
			t.Errorf("leftover temp file %s", p)
		}
		if strings.HasSuffix(d.Name(), ".pin") {
			t.Errorf("leftover pin %s", p)
		}
		return nil
	})
}

var errInjected = errors.New("injected")

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		t.Fatalf("bad hex64 %q", s)
	}
	return b
}
