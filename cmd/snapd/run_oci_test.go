package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/pipeline"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// Daemon-level tests of the skeleton layout: `snapd run` with
// store.oci against the real CNCF registry (internal/registrytest) and the
// real git-http-backend (internal/gittest).

const (
	ociCols    = 256
	ociSegSize = 131072
)

// ociRows and ociCluster size the model of the skeleton-layout tests: w
// is [ociRows, ociCols] f32 (4 MiB raw, 32 segments) and ociCluster rows
// (1%, contiguous) change per generation. Under the race detector every
// byte the daemon, verify-repo, checkout and assemble encode, hash and
// reassemble costs about ten times as much, so the model is 1 MiB raw
// there: still 8 segments, a 1% change within at most two of them, and a
// WTXT above TestRunOCIThreshold's 1 MiB threshold.
var ociRows, ociCluster = func() (int, int) {
	if raceEnabled {
		return 1024, 10
	}
	return 4096, 41
}()

// ociGen is generation gen of a 4 MiB model (1 MiB under the race
// detector, see ociRows): w's values are pseudo-random
// (no two segments alike); generation g adds a step to the ociCluster
// consecutive rows starting at row (g*977) % (ociRows-ociCluster): 1%
// clustered change per generation.
func ociGen(gen uint64) *snapshot.Snapshot {
	w := make([]byte, ociRows*ociCols*4)
	x := uint32(12345)
	for i := 0; i < ociRows*ociCols; i++ {
		x = x*1664525 + 1013904223
		binary.LittleEndian.PutUint32(w[4*i:], math.Float32bits(float32(x>>8)/float32(1<<24)))
	}
	for g := uint64(2); g <= gen; g++ {
		start := int(g*977) % (ociRows - ociCluster)
		for r := start; r < start+ociCluster; r++ {
			for c := 0; c < ociCols; c++ {
				i := 4 * (r*ociCols + c)
				v := math.Float32frombits(binary.LittleEndian.Uint32(w[i:]))
				binary.LittleEndian.PutUint32(w[i:], math.Float32bits(v+float32(g)*1e-3))
			}
		}
	}
	b := make([]byte, ociCols*4)
	for i := range ociCols {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(i)-3.5))
	}
	return &snapshot.Snapshot{Arrays: []*snapshot.Array{
		{Name: "b", DType: snapshot.F32, Shape: []int64{ociCols}, Data: snapshot.Bytes(b)},
		{Name: "w", DType: snapshot.F32, Shape: []int64{int64(ociRows), ociCols}, Data: snapshot.Bytes(w)},
	}}
}

func requestOCI(t *testing.T, stateDir string, gen uint64) {
	t.Helper()
	store, err := snapshot.OpenGenStore(filepath.Join(stateDir, pipeline.GensDir))
	if err != nil {
		t.Fatal(err)
	}
	g, err := store.Publish(gen, ".safetensors", func(w io.Writer) error {
		return safetensors.New().Encode(context.Background(), w, ociGen(gen), formats.EncodeOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wal.OpenWriter(filepath.Join(stateDir, pipeline.WALDir))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Append(wal.Request{Gen: gen, Time: time.Now(), Requester: "test", Source: g.Path}); err != nil {
		t.Fatal(err)
	}
}

// skelSegs returns the segment sizes by digest of a skeleton's seg lines.
func skelSegs(t *testing.T, skel string) map[string]int64 {
	t.Helper()
	m := map[string]int64{}
	for _, l := range strings.Split(skel, "\n") {
		if !strings.HasPrefix(l, "seg ") {
			continue
		}
		var size int64
		var dg string
		for _, f := range strings.Fields(l)[1:] {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "len":
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("seg line %q", l)
				}
				size = n
			case "sha256":
				dg = v
			}
		}
		if dg == "" {
			t.Fatalf("seg line without sha256: %q", l)
		}
		m[dg] = size
	}
	if len(m) == 0 {
		t.Fatalf("skeleton has no seg lines:\n%.400s", skel)
	}
	return m
}

// gitShow returns rev:path of the bare repository dir.
func gitShow(t *testing.T, dir, rev, path string) string {
	t.Helper()
	return gittest.Git(t, dir, "show", rev+":"+path)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// metricValue returns the value of an unlabelled series in a /metrics text.
func metricValue(t *testing.T, text, name string) float64 {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric line %q", l)
			}
			return f
		}
	}
	t.Fatalf("metric %s missing", name)
	return 0
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// isRingGen reports whether got is the WTXT of the daemon's generation
// gen: byte-identical to the ring's WTXT or, for a generation the build
// pushed straight to the registry (the ring holds its skeleton and the
// record of its manifest, no WTXT), split into the very skeleton the
// ring holds (wtxt.Split checks every chunk's sha256 and crc32c against
// its ch line, and the skeleton holds the header, every arr and ch line).
func isRingGen(t *testing.T, state string, gen uint64, got []byte) bool {
	t.Helper()
	e := ringEntry(t, state, gen)
	switch {
	case e.WTXT != "":
		b, err := os.ReadFile(e.WTXT)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Equal(got, b)
	case e.Complete():
		skel, err := os.ReadFile(e.Skeleton)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := os.ReadFile(e.OCI)
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			SegmentSize int64 `json:"segment_size"`
		}
		if err := json.Unmarshal(rb, &rec); err != nil || rec.SegmentSize <= 0 {
			t.Fatalf("gen %d: ring record %s: %v", gen, rb, err)
		}
		var split bytes.Buffer
		if _, err := wtxt.Split(context.Background(), bytes.NewReader(got), &split, nil, wtxt.SplitOptions{SegmentSize: rec.SegmentSize}); err != nil {
			t.Logf("gen %d: split: %v", gen, err)
			return false
		}
		return bytes.Equal(split.Bytes(), skel)
	}
	t.Fatalf("gen %d: ring entry %+v is half-written", gen, e)
	return false
}

// ringEntry returns the ring entry of gen (failing when there is none).
func ringEntry(t *testing.T, state string, gen uint64) pipeline.RingEntry {
	t.Helper()
	es, err := pipeline.ListRing(filepath.Join(state, pipeline.RingDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Gen == gen {
			return e
		}
	}
	t.Fatalf("gen %d not in the ring", gen)
	return pipeline.RingEntry{}
}

// TestRunOCIThreeGenerations: `snapd run --oci-repository` publishes three
// generations with 1% clustered change. The first uploads every segment;
// the second and third upload exactly the segments whose bytes changed
// (the rest is HEADed and skipped). Git (the remote) holds each
// generation's skeleton and no WTXT, the registry a gen-NNNNNN manifest
// each; `snapd assemble` from a fresh clone + the registry rebuilds the
// ring's WTXT byte for byte; status and metrics show the bytes; a second
// daemon publishing the same model into another repository with mount_from
// mounts every blob instead of uploading it.
func TestRunOCIThreeGenerations(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, "", "")
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	maddr := freeAddr(t)
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%squeue: {policy: block}\nmetrics: {addr: %q}\nstore:\n  oci:\n    segment_size: %d\n",
		remote.URL, fastGit, maddr, ociSegSize))
	repoRef := reg.Host + "/snapd/model"
	d := startDaemon(t, "--state-dir", state, "--config", cfg, "--oci-repository", repoRef)

	// Present at zero from the start.
	waitFor(t, "metrics endpoint", func() (bool, string) {
		resp, err := http.Get("http://" + maddr + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return true, ""
	})
	m0 := scrape(t, maddr)
	for _, n := range []string{"snapd_oci_bytes_uploaded_total", "snapd_oci_bytes_skipped_total", "snapd_oci_bytes_mounted_total", "snapd_oci_pending_bytes"} {
		if v := metricValue(t, m0, n); v != 0 {
			t.Fatalf("%s = %v at start, want 0", n, v)
		}
	}

	have := map[string]bool{} // digests in the registry
	var uploadedTotal, skippedTotal int64
	for g := uint64(1); g <= 3; g++ {
		requestOCI(t, state, g)
		waitFor(t, fmt.Sprintf("generation %d on the remote", g), pushedAll(t, remote, state, g))
		tag := fmt.Sprintf("gen-%06d", g)
		skel := gitShow(t, remote.Dir, tag, "snapshots/current.wtxt.skel")
		segs := skelSegs(t, skel)
		var want, total int64
		for dg, n := range segs {
			total += n
			if !have[dg] {
				want += n
			}
			have[dg] = true
		}
		st, err := pipeline.ReadOCIStats(state)
		if err != nil || st == nil || st.Last == nil || st.Last.Gen != g {
			t.Fatalf("gen %d: oci stats %+v, %v", g, st, err)
		}
		if st.Last.UploadedBytes != want || st.Last.SkippedBytes != total-want || st.Last.MountedBytes != 0 {
			t.Fatalf("gen %d: uploaded %d skipped %d bytes, want exactly the new segments' %d and %d skipped", g, st.Last.UploadedBytes, st.Last.SkippedBytes, want, total-want)
		}
		if g > 1 && (want == 0 || want > 2*ociSegSize) {
			t.Fatalf("gen %d: %d bytes of new segments for a 1%% clustered change (segment size %d)", g, want, ociSegSize)
		}
		t.Logf("gen %d: %d segments, %d bytes raw, uploaded %d, skeleton %d bytes", g, len(segs), total, want, len(skel))
		uploadedTotal += want
		skippedTotal += total - want
		// The ledger holds the skeleton only.
		ls := gittest.Git(t, remote.Dir, "ls-tree", "--name-only", tag, "snapshots/")
		if strings.Contains(ls, "current.wtxt\n") || strings.Contains(ls, "current.wtxt.parts") || strings.Contains(ls, "wtxtdelta") {
			t.Fatalf("gen %d: Git tree holds tensor bytes:\n%s", g, ls)
		}
		sum := gitShow(t, remote.Dir, tag, "snapshots/generation.txt")
		if !strings.Contains(sum, "layout=skeleton\n") || !strings.Contains(sum, "oci_repository="+repoRef+"\n") || !strings.Contains(sum, "oci_manifest=sha256:") {
			t.Fatalf("gen %d: generation.txt:\n%s", g, sum)
		}
	}
	checkRemote(t, remote, 3)

	// The registry holds one manifest per generation.
	r, err := oci.Open(repoRef, oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gts, err := r.Generations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(gts) != 3 {
		t.Fatalf("registry generations: %+v", gts)
	}

	// A fresh clone + the registry give back the exact WTXT.
	clone := filepath.Join(dir, "clone")
	gittest.Git(t, dir, "clone", "-q", "--branch", "snapshots", remote.URL, clone)
	out := filepath.Join(dir, "gen3.wtxt")
	mustRun(t, "assemble", "--oci-repository", repoRef, filepath.Join(clone, "snapshots", "current.wtxt.skel"), out)
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !isRingGen(t, state, 3, got) {
		t.Fatal("assembled WTXT differs from the daemon's")
	}
	mustRun(t, "verify", out)
	// verify-repo on the fresh clone: every generation, in full.
	if code, o, e := snapd(t, map[string]string{"HOME": t.TempDir()}, "verify-repo", clone, "--pubkey", filepath.Join(state, "keys", "allowed_signers"),
		"--oci-repository", repoRef); code != 0 || strings.Count(o, " skeleton ok ") != 3 {
		t.Fatalf("verify-repo: exit %d\n%s%s", code, o, e)
	}

	// Status and metrics.
	js := mustRun(t, "status", "--state-dir", state, "--json")
	if !strings.Contains(js, fmt.Sprintf(`"uploaded_bytes": %d`, uploadedTotal)) || !strings.Contains(js, `"pending_bytes": 0`) {
		t.Fatalf("status --json:\n%s", js)
	}
	txt := mustRun(t, "status", "--state-dir", state)
	if !strings.Contains(txt, fmt.Sprintf("oci registry: %s: 3 generations, %d bytes uploaded, %d skipped", repoRef, uploadedTotal, skippedTotal)) {
		t.Fatalf("status:\n%s", txt)
	}
	m := scrape(t, maddr)
	if v := metricValue(t, m, "snapd_oci_bytes_uploaded_total"); v != float64(uploadedTotal) {
		t.Fatalf("snapd_oci_bytes_uploaded_total %v, want %d", v, uploadedTotal)
	}
	if v := metricValue(t, m, "snapd_oci_bytes_skipped_total"); v != float64(skippedTotal) {
		t.Fatalf("snapd_oci_bytes_skipped_total %v, want %d", v, skippedTotal)
	}
	// Request-to-pushed latency: one observation per generation (request,
	// build, upload, manifest, commit, push), each above zero.
	if v := metricValue(t, m, "snapd_request_to_pushed_seconds_count"); v != 3 {
		t.Fatalf("snapd_request_to_pushed_seconds_count %v, want 3", v)
	}
	if v := metricValue(t, m, "snapd_request_to_pushed_seconds_sum"); v <= 0 {
		t.Fatalf("snapd_request_to_pushed_seconds_sum %v", v)
	} else {
		t.Logf("request to pushed: %.3f s mean over 3 generations (noisy: shared machine)", v/3)
	}
	promtoolCheck(t, m)
	d.stop(t)

	// Cross-repository mount: a second daemon (other keys, other Git
	// remote) publishes generation 1 of the same model into snapd/finetune
	// with mount_from snapd/model: every blob is mounted, none uploaded.
	remote2 := newRemote(t)
	state2 := filepath.Join(dir, "state2")
	cfg2 := writeConfig(t, t.TempDir(), fmt.Sprintf("git:\n  remote: %s\n%smetrics: {addr: \"off\"}\nstore:\n  oci:\n    repository: %s/snapd/finetune\n    mount_from: snapd/model\n    segment_size: %d\n",
		remote2.URL, fastGit, reg.Host, ociSegSize))
	d2 := startDaemon(t, "--state-dir", state2, "--config", cfg2)
	requestOCI(t, state2, 1)
	waitFor(t, "generation 1 on the second remote", pushedAll(t, remote2, state2, 1))
	d2.stop(t)
	st2, err := pipeline.ReadOCIStats(state2)
	if err != nil || st2 == nil || st2.Last == nil {
		t.Fatalf("oci stats: %+v %v", st2, err)
	}
	if st2.Last.UploadedBytes != 0 || st2.Last.MountedBytes == 0 {
		t.Fatalf("mount_from: uploaded %d, mounted %d bytes; want everything mounted", st2.Last.UploadedBytes, st2.Last.MountedBytes)
	}
}

// localGens returns the generations on the daemon's local repository's
// snapshots branch.
func localGens(t *testing.T, state string) []uint64 {
	return remoteGens(t, filepath.Join(state, pipeline.RepoDir))
}

// assembleEqualsRing checks that generation gen's skeleton on the remote
// plus the registry give back the ring's WTXT byte for byte.
func assembleEqualsRing(t *testing.T, remoteDir, repoRef, state string, gen uint64) {
	t.Helper()
	assembleEqualsRingEnv(t, nil, remoteDir, repoRef, state, gen)
}

func assembleEqualsRingEnv(t *testing.T, env map[string]string, remoteDir, repoRef, state string, gen uint64) {
	t.Helper()
	dir := t.TempDir()
	skel := filepath.Join(dir, "skel")
	if err := os.WriteFile(skel, []byte(gitShow(t, remoteDir, fmt.Sprintf("gen-%06d", gen), "snapshots/current.wtxt.skel")), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.wtxt")
	if code, o, e := snapd(t, env, "assemble", "--oci-repository", repoRef, skel, out); code != 0 {
		t.Fatalf("snapd assemble: exit %d\n%s%s", code, o, e)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !isRingGen(t, state, gen, got) {
		t.Fatalf("gen %d: assembled WTXT differs from the daemon's", gen)
	}
}

// ringHolds fails unless the ring entry of gen is a WTXT (what "wtxt")
// or a skeleton with the record of its manifest ("skeleton").
func ringHolds(t *testing.T, state string, gen uint64, what string) {
	t.Helper()
	e := ringEntry(t, state, gen)
	if got := map[bool]string{true: "wtxt", false: "skeleton"}[e.WTXT != ""]; got != what || !e.Complete() {
		t.Fatalf("gen %d: ring entry %+v, want a %s", gen, e, what)
	}
}

// TestRunOCIRegistryOutage: the registry process is stopped while the
// daemon runs (the build of the next generation cannot push it, so it is
// written to the ring and left to the queue); the next generation's job stays pending (status: retrying,
// one generation publishing, its bytes pending) and nothing of it reaches
// Git, not even the local repository; the registry is started again on
// the same port and storage and the job finishes by itself.
func TestRunOCIRegistryOutage(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, "", "")
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	repoRef := reg.Host + "/snapd/model"
	maddr := freeAddr(t)
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%smetrics: {addr: %q}\nstore:\n  oci:\n    repository: %s\n    segment_size: %d\n",
		remote.URL, fastGit, maddr, repoRef, ociSegSize))
	d := startDaemon(t, "--state-dir", state, "--config", cfg)
	requestOCI(t, state, 1)
	waitFor(t, "generation 1 on the remote", pushedAll(t, remote, state, 1))
	ringHolds(t, state, 1, "skeleton") // pushed by the build

	reg.Stop()
	requestOCI(t, state, 2)
	waitFor(t, "generation 2 pending in the queue", func() (bool, string) {
		st, detail := queueState(t, state)
		return st != nil && st.Chain.Gen == 2 && st.Queue != nil && st.Queue.State == "retrying" && st.OCI != nil &&
			st.OCI.Publishing == 1 && st.OCI.PendingBytes > 0, detail
	})
	if g := localGens(t, state); fmt.Sprint(g) != "[1]" {
		t.Fatalf("local repository during the outage: %v, want [1] (no commit before its manifest)", g)
	}
	if g := remoteGens(t, remote.Dir); fmt.Sprint(g) != "[1]" {
		t.Fatalf("remote during the outage: %v", g)
	}
	txt := mustRun(t, "status", "--state-dir", state)
	if !strings.Contains(txt, "1 generations not committed yet") || !strings.Contains(txt, "push queue:  retrying") {
		t.Fatalf("status during the outage:\n%s", txt)
	}
	if v := metricValue(t, scrape(t, maddr), "snapd_oci_pending_bytes"); v <= 0 {
		t.Fatalf("snapd_oci_pending_bytes %v during the outage", v)
	}

	if v := metricValue(t, scrape(t, maddr), "snapd_request_to_pushed_seconds_count"); v != 1 {
		t.Fatalf("snapd_request_to_pushed_seconds_count %v during the outage, want 1 (generation 2 is not pushed)", v)
	}

	// The build could not push it: the ring holds its WTXT, which the
	// queue job uploads.
	ringHolds(t, state, 2, "wtxt")

	reg.Restart(t)
	waitFor(t, "generation 2 on the remote", pushedAll(t, remote, state, 2))
	m := scrape(t, maddr)
	if v := metricValue(t, m, "snapd_oci_pending_bytes"); v != 0 {
		t.Fatalf("snapd_oci_pending_bytes %v after the outage", v)
	}
	// Generation 2's latency, observed once it is pushed, spans the outage.
	if v := metricValue(t, m, "snapd_request_to_pushed_seconds_count"); v != 2 {
		t.Fatalf("snapd_request_to_pushed_seconds_count %v after the outage, want 2", v)
	}
	promtoolCheck(t, m)
	d.stop(t)
	checkRemote(t, remote, 2)
	assembleEqualsRing(t, remote.Dir, repoRef, state, 2)
	st, err := pipeline.ReadStatus(state)
	if err != nil || st.OCI == nil || st.OCI.PendingBytes != 0 || st.OCI.Publishing != 0 || st.OCI.Generations != 2 {
		t.Fatalf("status after the outage: %+v %v", st.OCI, err)
	}
	if es, _ := os.ReadDir(filepath.Join(state, pipeline.QueueDir, "hold")); len(es) != 0 {
		t.Fatalf("held files left after the jobs finished: %v", es)
	}
}

// hangProxy forwards to a registry; while hanging, every blob upload
// request (PUT/PATCH under /blobs/uploads/) is held open without an
// answer, so the client is mid-upload.
type hangProxy struct {
	target string
	hang   chan struct{} // closed: stop hanging
	hung   chan struct{} // closed at the first held request
	held   chan struct{} // one value per held request (dropped when full)
	once   sync.Once
	srv    *http.Server
	Addr   string
}

func startHangProxy(t *testing.T, target string) *hangProxy {
	t.Helper()
	p := &hangProxy{target: target, hang: make(chan struct{}), hung: make(chan struct{}), held: make(chan struct{}, 1)}
	u, _ := url.Parse("http://" + target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0) // the killed client's cancellations
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.Addr = l.Addr().String()
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodPut || r.Method == http.MethodPatch) && strings.Contains(r.URL.Path, "/blobs/uploads/") {
			select {
			case <-p.hang:
			default:
				p.once.Do(func() { close(p.hung) })
				select {
				case p.held <- struct{}{}:
				default:
				}
				select {
				case <-p.hang:
				case <-r.Context().Done():
					return
				}
			}
		}
		rp.ServeHTTP(w, r)
	})}
	go p.srv.Serve(l)
	t.Cleanup(func() { p.srv.Close() })
	return p
}

// TestRunOCIKilledDuringUpload: the daemon process is killed with SIGKILL
// while its first generation's blobs are being uploaded, with two more
// generations queued behind it; nothing reached Git or the registry's
// tags. A restarted daemon re-HEADs, uploads again what was interrupted
// and finishes: every generation lands exactly once, in order, on the Git
// remote and as one manifest in the registry, and every generation's
// request-to-pushed latency is observed (the request times survive in the
// durable jobs).
func TestRunOCIKilledDuringUpload(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, "", "")
	proxy := startHangProxy(t, reg.Host)
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	repoRef := proxy.Addr + "/snapd/model"
	maddr := freeAddr(t)
	// ring.keep 4: every generation's WTXT stays in the ring, the bytes the
	// registry's copies are compared with at the end. A held upload
	// fails after store.oci.timeout (the wait for response headers), and
	// the build and then the queue try again: 3s instead of the default
	// 30s keeps the test from waiting out the default twice. A request the
	// registry is merely slow to answer is retried the same way.
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%squeue: {policy: block}\nring: {keep: 4}\nmetrics: {addr: %q}\nstore:\n  oci:\n    repository: %s\n    segment_size: %d\n    timeout: 3s\n",
		remote.URL, fastGit, maddr, repoRef, ociSegSize))

	var childErr testutil.SyncBuffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestDaemonChildProcess$")
	cmd.Env = append(os.Environ(), "SNAPD_TEST_DAEMON_ARGS="+strings.Join([]string{"run", "--state-dir", state, "--config", cfg}, "\n"))
	cmd.Stdout, cmd.Stderr = io.Discard, &childErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	for g := uint64(1); g <= 3; g++ {
		requestOCI(t, state, g)
	}
	select {
	case <-proxy.hung:
	case <-time.After(testutil.Guard):
		t.Fatalf("no blob upload reached the registry:\n%s", childErr.String())
	}
	waitFor(t, "3 generations built, all queued", func() (bool, string) {
		st, detail := queueState(t, state)
		return st != nil && st.Chain.Gen == 3 && st.Queue != nil && st.Queue.Pending == 3 && st.OCI != nil && st.OCI.Publishing == 3, detail
	})
	// Kill while the queue's next upload attempt is held (not between
	// attempts).
	select {
	case <-proxy.held:
	default:
	}
	select {
	case <-proxy.held:
	case <-time.After(testutil.Guard):
		t.Fatalf("the queue tried no upload again:\n%s", childErr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v\n%s", cmd.ProcessState, childErr.String())
	}
	if g := localGens(t, state); len(g) != 0 {
		t.Fatalf("local repository after the kill: %v, want nothing committed before its manifest", g)
	}
	if g := remoteGens(t, remote.Dir); len(g) != 0 {
		t.Fatalf("remote after the kill: %v", g)
	}
	r, err := oci.Open(reg.Host+"/snapd/model", oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if gts, _ := r.Generations(context.Background()); len(gts) != 0 {
		t.Fatalf("registry tags after the kill: %+v", gts)
	}

	close(proxy.hang)
	d := startDaemon(t, "--state-dir", state, "--config", cfg)
	requestOCI(t, state, 4)
	waitFor(t, "generation 4 on the remote", pushedAll(t, remote, state, 4))
	// The request times of generations 1-3 were in their durable jobs:
	// the restarted daemon observes all four request-to-pushed latencies.
	m := scrape(t, maddr)
	if v := metricValue(t, m, "snapd_request_to_pushed_seconds_count"); v != 4 {
		t.Fatalf("snapd_request_to_pushed_seconds_count %v after the restart, want 4", v)
	}
	promtoolCheck(t, m)
	d.stop(t)
	checkRemote(t, remote, 4)
	gts, err := r.Generations(context.Background())
	if err != nil || len(gts) != 4 {
		t.Fatalf("registry generations: %+v %v", gts, err)
	}
	for g := uint64(1); g <= 4; g++ {
		assembleEqualsRing(t, remote.Dir, repoRef, state, g)
	}
	out := mustRun(t, "status", "--state-dir", state)
	if !strings.Contains(out, "requests:    0 pending (backlog), 4 done, 0 failed") {
		t.Fatalf("status:\n%s", out)
	}
}

// TestRunOCIFlagsRefused: snapd run refuses a malformed --oci-repository,
// one without Git (the ledger) and one with encryption, naming the field,
// before creating any state.
func TestRunOCIFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--oci-repository", "no-slash"}, "store.oci.repository"},
		{[]string{"--oci-repository", "https://ghcr.io/acme/m"}, "store.oci.repository"},
		{[]string{"--oci-repository", "ghcr.io/acme/m", "--no-git"}, "git.enabled"},
		{[]string{"--oci-repository", "ghcr.io/acme/m", "--stream"}, "streaming"},
	} {
		state := filepath.Join(t.TempDir(), "state")
		code, _, errs := snapd(t, nil, append([]string{"run", "--state-dir", state, "--metrics-addr", "off"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want a usage error naming %s", tc.args, code, errs, tc.want)
		}
		if _, err := os.Stat(state); err == nil {
			t.Errorf("%v: the state directory was created", tc.args)
		}
	}
	if out := mustRun(t, "run", "--help"); !strings.Contains(out, "--oci-repository") || !strings.Contains(out, "skeleton layout") {
		t.Fatalf("run --help:\n%s", out)
	}
}

// TestRunOCIThreshold: with store.oci.threshold above a generation's WTXT
// size, the generation is committed whole (layout single, no registry
// upload) through the same queue, while a larger one goes the skeleton
// layout; both land in order.
func TestRunOCIThreshold(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, "", "")
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	repoRef := reg.Host + "/snapd/model"
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%smetrics: {addr: \"off\"}\nstore:\n  oci:\n    repository: %s\n    threshold: 1048576\n    segment_size: %d\n",
		remote.URL, fastGit, repoRef, ociSegSize))
	d := startDaemon(t, "--state-dir", state, "--config", cfg)
	requestTiny(t, state, 1) // ~2 KiB WTXT: below the threshold
	waitFor(t, "generation 1 on the remote", pushedAll(t, remote, state, 1))
	requestOCI(t, state, 2) // ~5.6 MB WTXT (~1.4 MB under race): above
	waitFor(t, "generation 2 on the remote", pushedAll(t, remote, state, 2))
	d.stop(t)
	checkRemote(t, remote, 2)
	if s := gitShow(t, remote.Dir, "gen-000001", "snapshots/generation.txt"); !strings.Contains(s, "layout=single\n") || strings.Contains(s, "oci_") {
		t.Fatalf("gen 1 generation.txt:\n%s", s)
	}
	if s := gitShow(t, remote.Dir, "gen-000001", "snapshots/current.wtxt"); !isRingGen(t, state, 1, []byte(s)) {
		t.Fatal("gen 1: the committed WTXT differs from the ring's")
	}
	if s := gitShow(t, remote.Dir, "gen-000002", "snapshots/generation.txt"); !strings.Contains(s, "layout=skeleton\n") {
		t.Fatalf("gen 2 generation.txt:\n%s", s)
	}
	assembleEqualsRing(t, remote.Dir, repoRef, state, 2)
	st, err := pipeline.ReadOCIStats(state)
	if err != nil || st == nil || st.Generations != 1 || st.Last.Gen != 2 {
		t.Fatalf("oci stats %+v %v: want one generation (2) uploaded", st, err)
	}
}

// TestRunOCIEnqueueFailureRecovered: the generation is built but its job
// cannot be written (the queue's branch directory is blocked by a file):
// the failure is visible in status, nothing reaches Git, and the next
// start enqueues the generation from the ring, so it lands once.
func TestRunOCIEnqueueFailureRecovered(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, "", "")
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	repoRef := reg.Host + "/snapd/model"
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%smetrics: {addr: \"off\"}\nstore:\n  oci:\n    repository: %s\n    segment_size: %d\n",
		remote.URL, fastGit, repoRef, ociSegSize))
	d := startDaemon(t, "--state-dir", state, "--config", cfg)
	blocker := filepath.Join(state, pipeline.QueueDir, "jobs", "snapshots")
	waitFor(t, "the queue directory", func() (bool, string) {
		_, err := os.Stat(filepath.Dir(blocker))
		return err == nil, fmt.Sprint(err)
	})
	if err := os.WriteFile(blocker, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	requestOCI(t, state, 1)
	waitFor(t, "the enqueue failure", func() (bool, string) {
		st, detail := queueState(t, state)
		return st != nil && st.Chain.Gen == 1 && st.LastError != nil && st.LastError.Stage == "git", detail
	})
	d.stop(t)
	if g := localGens(t, state); len(g) != 0 {
		t.Fatalf("committed without a job: %v", g)
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	d = startDaemon(t, "--state-dir", state, "--config", cfg)
	waitFor(t, "generation 1 on the remote", pushedAll(t, remote, state, 1))
	d.stop(t)
	checkRemote(t, remote, 1)
	assembleEqualsRing(t, remote.Dir, repoRef, state, 1)
}

// TestRunOCIRegistryAuth: a registry with htpasswd basic auth refuses the
// configured password: the queue stops as needs-attention (authentication
// failed) with nothing committed, and the password appears in no log,
// status or queue file. Once the password file holds the right password
// (re-read at every authentication) the stopped job is re-checked
// (git.auth_recheck) and lands, without a restart.
func TestRunOCIRegistryAuth(t *testing.T) {
	t.Parallel()
	const user, right, wrong = "ci", "s3cret-RIGHT-pw", "s3cret-WRONG-pw"
	reg := registrytest.Start(t, user, right)
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	pw := filepath.Join(dir, "registry-password")
	if err := os.WriteFile(pw, []byte(wrong+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	repoRef := reg.Host + "/snapd/model"
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%smetrics: {addr: \"off\"}\nstore:\n  oci:\n    repository: %s\n    username: %s\n    password_file: %s\n    segment_size: %d\n",
		remote.URL, fastGit, repoRef, user, pw, ociSegSize))
	d := startDaemon(t, "--state-dir", state, "--config", cfg, "--log-level", "debug")
	defer d.stop(t)
	requestOCI(t, state, 1)
	waitFor(t, "the queue stopped on the refused credential", func() (bool, string) {
		st, detail := queueState(t, state)
		return st != nil && st.Queue != nil && st.Queue.Hold != nil && st.Queue.Hold.Kind == "authentication failed", detail
	})
	if g := localGens(t, state); len(g) != 0 {
		t.Fatalf("committed without its blobs: %v", g)
	}
	// The stopped queue needs a person: status exits 1 and says why.
	code, status, errs := snapd(t, nil, "status", "--state-dir", state, "--json")
	if code != exitInvalid || !strings.Contains(errs, "push queue needs attention: gen 1: authentication failed") {
		t.Fatalf("status of a stopped queue: exit %d\n%s", code, errs)
	}
	status += errs + mustRun(t, "queue", "list", "--state-dir", state)
	var files strings.Builder
	filepath.Walk(filepath.Join(state, pipeline.QueueDir), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && strings.HasSuffix(p, ".json") {
			b, _ := os.ReadFile(p)
			files.Write(b)
		}
		return nil
	})
	for what, text := range map[string]string{"daemon log": d.stderr.String(), "status": status, "queue files": files.String()} {
		if strings.Contains(text, wrong) || strings.Contains(text, right) {
			t.Fatalf("%s shows the password", what)
		}
	}
	if !strings.Contains(status, "authentication failed") {
		t.Fatalf("status does not say why:\n%s", status)
	}

	if err := os.WriteFile(pw, []byte(right+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "generation 1 on the remote", pushedAll(t, remote, state, 1))
	d.stop(t)
	if l := d.stderr.String(); strings.Contains(l, wrong) || strings.Contains(l, right) {
		t.Fatal("the daemon log shows the password")
	}
	// The startup log names the destinations; the snapshot line says the
	// registry job makes the commit, and the job logs it.
	l := d.stderr.String()
	for _, want := range []string{"msg=destinations git_branch=snapshots git_remote=" + remote.URL + " registry=" + repoRef, `msg="generation snapshotted" gen=1 `, `commit="pending (registry job)"`, `msg="oci generation committed" gen=1 `} {
		if !strings.Contains(l, want) {
			t.Fatalf("daemon log lacks %q:\n%s", want, l)
		}
	}
	if strings.Contains(l, `commit=""`) {
		t.Fatalf("daemon log has an empty commit:\n%s", l)
	}
	checkRemote(t, remote, 1)
	assembleEqualsRingEnv(t, map[string]string{"SNAPD_OCI_USERNAME": user, "SNAPD_OCI_PASSWORD": right}, remote.Dir, repoRef, state, 1)
}
