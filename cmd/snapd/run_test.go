package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/pipeline"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// publishAndRequest publishes a small safetensors generation and appends
// its request, as a trainer does.
func publishAndRequest(t *testing.T, stateDir string, gen uint64) {
	t.Helper()
	store, err := snapshot.OpenGenStore(filepath.Join(stateDir, pipeline.GensDir))
	if err != nil {
		t.Fatal(err)
	}
	m := newDemoModel()
	for range gen {
		m.train()
	}
	g, err := store.Publish(gen, ".safetensors", func(w io.Writer) error {
		return safetensors.New().Encode(context.Background(), w, m.snapshot(), formats.EncodeOptions{})
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

// waitStatus polls the state dir's status until ok holds (testutil.Poll;
// a guard, not a timing assertion) and returns it.
func waitStatus(t *testing.T, dir string, what string, ok func(*pipeline.Status) bool) *pipeline.Status {
	t.Helper()
	var st *pipeline.Status
	testutil.Poll(t, what, func() (bool, string) {
		s, err := pipeline.ReadStatus(dir)
		if err != nil {
			return false, err.Error()
		}
		st = s
		return ok(s), fmt.Sprintf("%+v", s)
	})
	return st
}

// TestRunZeroConfigWithRemote: `snapd run --state-dir DIR --config FILE`
// with only a Git remote works: keys are generated, generations are
// snapshotted, committed and queued for push (the remote fails with 503,
// so the queue retries), SIGHUP reloads, SIGTERM stops, a second instance
// is refused, and `snapd status` reports it all from the files.
func TestRunZeroConfigWithRemote(t *testing.T) {
	var hits sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Store(r.URL.Path, true)
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfgPath := filepath.Join(dir, "snapd.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf("git: {remote: %s/repo.git}\n", srv.URL)), 0o644)

	var stderr testutil.SyncBuffer
	e := newEnv(io.Discard, &stderr)
	sigs := make(chan os.Signal, 1)
	o := &runOptions{stateDir: state, config: cfgPath, metricsAddr: "127.0.0.1:0", signals: sigs,
		changed: func(n string) bool { return n == "state-dir" || n == "metrics-addr" }}
	done := make(chan error, 1)
	go func() { done <- runRun(context.Background(), e, o) }()
	defer func() {
		select {
		case sigs <- syscall.SIGTERM:
		default:
		}
	}()

	publishAndRequest(t, state, 1)
	publishAndRequest(t, state, 2)
	st := waitStatus(t, state, "gen 2 and a failed push", func(s *pipeline.Status) bool {
		// The WAL outcome is recorded after the commit and enqueue: wait
		// for it too, or Backlog may still count gen 2.
		return s.Chain.Gen == 2 && s.Done == 2 && s.Queue != nil && s.Queue.Pending == 2 && s.Queue.State == "retrying"
	})
	if !st.Running || len(st.Ring) != 2 || st.Backlog != 0 {
		t.Fatalf("status %+v", st)
	}
	if _, ok := hits.Load("/repo.git/info/refs"); !ok {
		t.Fatal("the remote was never contacted")
	}
	for _, n := range []string{"sign_ed25519", "hmac.key", "age.key"} {
		fi, err := os.Stat(filepath.Join(state, "keys", n))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("key %s: %v %v", n, fi, err)
		}
	}
	// A second instance refuses to start.
	code, _, errs := snapd(t, nil, "run", "--state-dir", state, "--metrics-addr", "off")
	if code != exitUsage || !strings.Contains(errs, "in use by another snapd") {
		t.Fatalf("second instance: exit %d\n%s", code, errs)
	}
	// SIGHUP reloads the config.
	os.WriteFile(cfgPath, []byte(fmt.Sprintf("git: {remote: %s/repo.git}\nring: {keep: 3}\nsnapshot: {build: v2}\n", srv.URL)), 0o644)
	sigs <- syscall.SIGHUP
	deadline := time.Now().Add(testutil.Guard)
	for !strings.Contains(stderr.String(), "configuration reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("no reload:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	publishAndRequest(t, state, 3)
	// Done, not only chained: SIGTERM abandons a generation still in the
	// last stage (it stays pending in the WAL).
	waitStatus(t, state, "gen 3 done", func(s *pipeline.Status) bool { return s.Chain.Gen == 3 && s.Chain.Build == "v2" && s.Done == 3 })
	sigs <- syscall.SIGTERM
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, stderr.String())
		}
	case <-time.After(testutil.Guard):
		t.Fatal("run did not stop on SIGTERM")
	}

	// status, daemon stopped.
	out := mustRun(t, "status", "--state-dir", state)
	for _, want := range []string{"not running", "chain head:  gen 000003", "push queue:  retrying", "503"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status output lacks %q:\n%s", want, out)
		}
	}
	var js pipeline.Status
	if err := json.Unmarshal([]byte(mustRun(t, "status", "--state-dir", state, "--json")), &js); err != nil {
		t.Fatal(err)
	}
	if js.Chain.Gen != 3 || js.Done != 3 || js.Queue.Pending < 1 {
		t.Fatalf("status --json: %+v", js)
	}
	// The generations verify with the generated public key.
	mustRun(t, "verify", filepath.Join(state, "ring/gen-000003.wtxt"), "--pubkey", filepath.Join(state, "keys/sign_ed25519.pub"),
		"--hmac-key", filepath.Join(state, "keys/hmac.key"), "--prev", filepath.Join(state, "ring/gen-000002.wtxt"), "--require-signature")
}

func TestRunConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("git:\n  remote: x\n  remotee: y\n"), 0o644)
	code, _, errs := snapd(t, nil, "run", "--state-dir", filepath.Join(dir, "s"), "--config", cfg)
	if code != exitUsage || !strings.Contains(errs, `line 3: unknown key "remotee"`) {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	code, _, errs = snapd(t, nil, "run", "--state-dir", filepath.Join(dir, "s"), "--queue-policy", "drop")
	if code != exitUsage || !strings.Contains(errs, "queue.policy") {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	code, _, errs = snapd(t, nil, "status", "--state-dir", filepath.Join(dir, "missing"))
	if code != exitUsage || !strings.Contains(errs, "missing") {
		t.Fatalf("exit %d\n%s", code, errs)
	}
}

func TestStatusShowsFailedRequest(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "s")
	os.MkdirAll(filepath.Join(state, "wal"), 0o755)
	junk := filepath.Join(dir, "junk.bin")
	os.WriteFile(junk, []byte("garbage garbage garbage"), 0o644)
	w, err := wal.OpenWriter(filepath.Join(state, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	w.Append(wal.Request{Gen: 1, Time: time.Now(), Requester: "t", Source: junk})
	w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runRun(ctx, newEnv(io.Discard, io.Discard), &runOptions{stateDir: state, metricsAddr: "off", noGit: true,
			changed: func(n string) bool { return n == "state-dir" || n == "metrics-addr" || n == "no-git" }})
	}()
	waitStatus(t, state, "a failed request", func(s *pipeline.Status) bool { return len(s.Failed) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := statusNeedsPerson(t, "the newest generation failed: gen 1", "--state-dir", state)
	if !strings.Contains(out, "failed gen 1") || !strings.Contains(out, "unknown format") || !strings.Contains(out, "last error:") {
		t.Fatalf("status:\n%s", out)
	}
	ents, err := wal.List(filepath.Join(state, "wal"), nil)
	if err != nil || len(ents) != 1 || ents[0].State != wal.Failed || !strings.Contains(ents[0].Message, "unknown format") {
		t.Fatalf("wal list: %+v %v", ents, err)
	}
}
