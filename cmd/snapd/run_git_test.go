package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/pipeline"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// Daemon-level Git fault tests: `snapd run` against the real C
// git-http-backend (internal/gittest) on 127.0.0.1, checked with the git
// CLI on the bare remote. Generations are tiny (two f32 arrays, 1 KiB).

// tinyGen is generation gen of a small model: w [32,8] where row gen%32
// changes every generation, b [8] constant.
func tinyGen(gen uint64) *snapshot.Snapshot {
	w := make([]byte, 32*8*4)
	for r := 0; r < 32; r++ {
		for c := 0; c < 8; c++ {
			v := float32(r*8+c) * 0.01
			for g := uint64(1); g <= gen; g++ {
				if int(g%32) == r {
					v += float32(g) * 1e-3
				}
			}
			u := math.Float32bits(v)
			i := 4 * (r*8 + c)
			w[i], w[i+1], w[i+2], w[i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		}
	}
	b := make([]byte, 8*4)
	for i := range 8 {
		u := math.Float32bits(float32(i) - 3.5)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return &snapshot.Snapshot{Arrays: []*snapshot.Array{
		{Name: "b", DType: snapshot.F32, Shape: []int64{8}, Data: snapshot.Bytes(b)},
		{Name: "w", DType: snapshot.F32, Shape: []int64{32, 8}, Data: snapshot.Bytes(w)},
	}}
}

// requestTiny publishes tiny generation gen into the generation store and
// appends its request to the WAL, as the trainer does.
func requestTiny(t *testing.T, stateDir string, gen uint64) {
	t.Helper()
	store, err := snapshot.OpenGenStore(filepath.Join(stateDir, pipeline.GensDir))
	if err != nil {
		t.Fatal(err)
	}
	g, err := store.Publish(gen, ".safetensors", func(w io.Writer) error {
		return safetensors.New().Encode(context.Background(), w, tinyGen(gen), formats.EncodeOptions{})
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

// daemon is `snapd run ARGS` running in-process through run() (the seam
// main uses), stopped by cancelling its context.
type daemon struct {
	cancel context.CancelFunc
	done   chan int
	stderr *testutil.SyncBuffer
}

func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{cancel: cancel, done: make(chan int, 1), stderr: &testutil.SyncBuffer{}}
	go func() { d.done <- run(ctx, append([]string{"run"}, args...), io.Discard, d.stderr) }()
	t.Cleanup(func() { d.stop(t) })
	return d
}

// stop cancels the daemon (a clean SIGTERM-like stop) and waits for it.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	select {
	case code := <-d.done:
		if code != 0 {
			t.Errorf("snapd run exited %d:\n%s", code, d.stderr.String())
		}
	case <-time.After(testutil.Guard):
		t.Fatalf("snapd run did not stop:\n%s", d.stderr.String())
	}
}

// waitFor polls cond until it holds (testutil.Poll: the pause between
// checks grows, as cond may spawn git); testutil.Guard turns a hang into
// a failure (a bound, never a timing assertion).
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testutil.Poll(t, what, cond)
}

// newRemote is an HTTP remote whose ref updates are logged
// (core.logAllRefUpdates), so a test can see every update of the branch.
func newRemote(t *testing.T) *gittest.HTTPRemote {
	r := gittest.NewHTTPRemote(t)
	gittest.Git(t, r.Dir, "config", "core.logAllRefUpdates", "always")
	return r
}

// remoteGens returns the generations on the remote's snapshots branch,
// oldest first, from the Snapd-Gen trailers of its first-parent history.
func remoteGens(t *testing.T, dir string) []uint64 {
	t.Helper()
	out, err := gittest.GitRun(dir, "log", "--first-parent", "--reverse", "--format=%(trailers:key=Snapd-Gen,valueonly)", "refs/heads/snapshots", "--")
	if err != nil {
		return nil // no branch yet
	}
	var gens []uint64
	for _, l := range strings.Fields(out) {
		g, err := strconv.ParseUint(l, 10, 64)
		if err != nil {
			t.Fatalf("remote: trailer %q: %v", l, err)
		}
		gens = append(gens, g)
	}
	return gens
}

func genList(n uint64) []uint64 {
	var gs []uint64
	for g := uint64(1); g <= n; g++ {
		gs = append(gs, g)
	}
	return gs
}

// checkRemote asserts that the remote holds exactly generations 1..n, in
// order, each applied once: the branch's history is gen 1..n, the branch
// was moved n times, once to each generation's commit in generation
// order (its reflog), every gen-NNNNNN tag names its generation's commit,
// git fsck --strict is clean and receive-pack ran n times.
func checkRemote(t *testing.T, r *gittest.HTTPRemote, n uint64) {
	t.Helper()
	if got := remoteGens(t, r.Dir); fmt.Sprint(got) != fmt.Sprint(genList(n)) {
		t.Fatalf("remote branch holds generations %v, want 1..%d", got, n)
	}
	commits := strings.Fields(gittest.Git(t, r.Dir, "log", "--first-parent", "--reverse", "--format=%H", "refs/heads/snapshots"))
	moves := strings.Fields(gittest.Git(t, r.Dir, "log", "-g", "--format=%H", "refs/heads/snapshots"))
	slices.Reverse(moves) // the reflog lists the newest first
	if strings.Join(moves, " ") != strings.Join(commits, " ") {
		t.Fatalf("remote branch updates (reflog, oldest first):\n%v\nwant one per generation, in order:\n%v", moves, commits)
	}
	tags := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(gittest.Git(t, r.Dir, "for-each-ref", "--format=%(refname:short) %(*objectname)", "refs/tags")), "\n") {
		if name, c, ok := strings.Cut(l, " "); ok {
			tags[name] = c
		}
	}
	if len(tags) != int(n) {
		t.Fatalf("remote has %d tags, want %d: %v", len(tags), n, tags)
	}
	for i, c := range commits {
		name := fmt.Sprintf("gen-%06d", i+1)
		if tags[name] != c {
			t.Fatalf("remote tag %s -> %q, want the commit of generation %d %s", name, tags[name], i+1, c)
		}
	}
	r.Fsck(t)
	if got := r.Applied.Load(); got != int32(n) {
		t.Fatalf("receive-pack applied %d pushes, want exactly %d (one per generation)", got, n)
	}
}

func writeConfig(t *testing.T, dir, yaml string) string {
	t.Helper()
	p := filepath.Join(dir, "snapd.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// fastGit are queue settings that keep the fault tests short.
const fastGit = "  retry_base: 50ms\n  retry_max: 400ms\n  auth_recheck: 200ms\n"

func queueState(t *testing.T, state string) (*pipeline.Status, string) {
	st, err := pipeline.ReadStatus(state)
	if err != nil {
		return nil, err.Error()
	}
	b, _ := json.Marshal(st.Queue)
	return st, fmt.Sprintf("chain gen %d, queue %s", st.Chain.Gen, b)
}

// pushedAll reports whether the remote holds generation n and the queue is
// empty and healthy.
func pushedAll(t *testing.T, r *gittest.HTTPRemote, state string, n uint64) func() (bool, string) {
	return func() (bool, string) {
		st, detail := queueState(t, state)
		gens := remoteGens(t, r.Dir)
		detail += fmt.Sprintf(", remote %v", gens)
		return st != nil && st.Queue != nil && st.Queue.Pending == 0 && st.Queue.State == "ok" &&
			len(gens) > 0 && gens[len(gens)-1] == n, detail
	}
}

// TestRunGitPushesToHTTPRemote: a config file holding only the remote
// (keys generated, everything else defaulted) pushes every generation:
// signed commits and tags gen-NNNNNN arrive on the remote, fsck clean.
func TestRunGitPushesToHTTPRemote(t *testing.T) {
	t.Parallel()
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := writeConfig(t, dir, fmt.Sprintf("git: {remote: %s}\n", remote.URL))
	// The metrics port is the only override: the default 127.0.0.1:9464
	// may be taken on a shared machine.
	d := startDaemon(t, "--state-dir", state, "--config", cfg, "--metrics-addr", "127.0.0.1:0")
	for g := uint64(1); g <= 3; g++ {
		requestTiny(t, state, g)
	}
	waitFor(t, "generation 3 on the remote", pushedAll(t, remote, state, 3))
	d.stop(t)
	checkRemote(t, remote, 3)

	subjects := gittest.Git(t, remote.Dir, "log", "--format=%s", "refs/heads/snapshots")
	if subjects != "snapd: generation 000003\nsnapd: generation 000002\nsnapd: generation 000001\n" {
		t.Fatalf("remote log:\n%s", subjects)
	}
	// The commits and tags carry SSH signatures by the generated key.
	pub, err := os.ReadFile(filepath.Join(state, "keys", "sign_ed25519.pub"))
	if err != nil {
		t.Fatal(err)
	}
	signers := gittest.WriteFile(t, dir, "allowed_signers", []byte("snapd@localhost "+string(pub)))
	for _, args := range [][]string{{"verify-commit", "refs/heads/snapshots"}, {"verify-tag", "gen-000003"}} {
		out, err := gittest.GitRun(remote.Dir, append([]string{"-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile=" + signers}, args...)...)
		if err != nil || !strings.Contains(out, `Good "git" signature for snapd@localhost`) {
			t.Fatalf("git %s: %v\n%s", args[0], err, out)
		}
	}
	// The remote's files are the ring's.
	ring, _ := os.ReadFile(filepath.Join(state, "ring", "gen-000003.wtxt"))
	if got := gittest.Git(t, remote.Dir, "show", "gen-000003:snapshots/current.wtxt"); got != string(ring) {
		t.Fatal("snapshots/current.wtxt on the remote differs from ring/gen-000003.wtxt")
	}
	out := mustRun(t, "status", "--state-dir", state)
	if !strings.Contains(out, "push queue:  ok, 0 pending") || !strings.Contains(out, "chain head:  gen 000003") {
		t.Fatalf("status:\n%s", out)
	}
}

// TestRunGitRemoteDownThenUp: the remote answers 503 for a while, then
// applies pushes but loses their acknowledgement (502), then works; the
// daemon keeps snapshotting, `snapd status` shows the retrying queue, and
// in the end each of the 20 generations arrived once, in order. With
// -short or under the race detector 12 generations (6 while down, 3
// while acknowledgements are lost, 3 after) take every one of these
// paths at about half the cost.
func TestRunGitRemoteDownThenUp(t *testing.T) {
	t.Parallel()
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%squeue: {policy: block}\nmetrics: {addr: \"off\"}\n", remote.URL, fastGit))
	n := uint64(20)
	if testing.Short() || raceEnabled {
		n = 12
	}
	remote.SetMode(gittest.Down)
	d := startDaemon(t, "--state-dir", state, "--config", cfg)
	for g := uint64(1); g <= n/2; g++ {
		requestTiny(t, state, g)
	}
	waitFor(t, "the first half snapshotted, pushes retrying", func() (bool, string) {
		st, detail := queueState(t, state)
		return st != nil && st.Chain.Gen == n/2 && st.Queue != nil && st.Queue.State == "retrying" && st.Queue.Pending == int(n/2), detail
	})
	out := mustRun(t, "status", "--state-dir", state)
	if !strings.Contains(out, "push queue:  retrying") || !strings.Contains(out, "503") {
		t.Fatalf("status while the remote is down:\n%s", out)
	}
	if gens := remoteGens(t, remote.Dir); len(gens) != 0 {
		t.Fatalf("remote got %v while down", gens)
	}
	// Pushes are applied but their acknowledgement is lost: the queue
	// finds the commit on the remote at the next attempt.
	remote.SetMode(gittest.LoseAck)
	for g := n/2 + 1; g <= 3*n/4; g++ {
		requestTiny(t, state, g)
	}
	waitFor(t, "pushes applied without acknowledgement", func() (bool, string) {
		gens := remoteGens(t, remote.Dir)
		return len(gens) >= 3, fmt.Sprint(gens)
	})
	remote.SetMode(gittest.Up)
	for g := 3*n/4 + 1; g <= n; g++ {
		requestTiny(t, state, g)
	}
	waitFor(t, fmt.Sprintf("generation %d on the remote", n), pushedAll(t, remote, state, n))
	d.stop(t)
	checkRemote(t, remote, n)
}

// TestDaemonChildProcess is not a test: TestRunGitKilledMidPush re-executes
// the test binary with SNAPD_TEST_DAEMON_ARGS to run `snapd run` in a
// process it can kill -9.
func TestDaemonChildProcess(t *testing.T) {
	args := os.Getenv("SNAPD_TEST_DAEMON_ARGS")
	if args == "" {
		t.Skip("helper process for TestRunGitKilledMidPush")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, strings.Split(args, "\n"), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// TestRunGitKilledMidPush: the daemon process is killed with SIGKILL while
// a push is in flight (the remote applied it and holds the response), with
// more generations queued behind it; a restarted daemon finishes the job:
// each generation arrives once, in order, nothing is pushed twice.
func TestRunGitKilledMidPush(t *testing.T) {
	t.Parallel()
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%squeue: {policy: block}\nmetrics: {addr: \"off\"}\n", remote.URL, fastGit))
	remote.SetMode(gittest.HangAck)

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
	for g := uint64(1); g <= 4; g++ {
		requestTiny(t, state, g)
	}
	select {
	case <-remote.Hung:
	case <-time.After(testutil.Guard):
		t.Fatalf("no push reached the remote:\n%s", childErr.String())
	}
	waitFor(t, "4 generations committed, all queued", func() (bool, string) {
		st, detail := queueState(t, state)
		return st != nil && st.Chain.Gen == 4 && st.Queue != nil && st.Queue.Pending == 4, detail
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v\n%s", cmd.ProcessState, childErr.String())
	}
	// The killed push was applied: generation 1 is on the remote, its job
	// still queued.
	if gens := remoteGens(t, remote.Dir); fmt.Sprint(gens) != "[1]" {
		t.Fatalf("remote after the kill: %v", gens)
	}
	st, _ := pipeline.ReadStatus(state)
	if st.Running || st.Queue.Pending != 4 {
		t.Fatalf("status after kill: running %v, queue %+v", st.Running, st.Queue)
	}

	remote.SetMode(gittest.Up)
	d := startDaemon(t, "--state-dir", state, "--config", cfg)
	for g := uint64(5); g <= 6; g++ {
		requestTiny(t, state, g)
	}
	waitFor(t, "generation 6 on the remote", pushedAll(t, remote, state, 6))
	d.stop(t)
	checkRemote(t, remote, 6)
	out := mustRun(t, "status", "--state-dir", state)
	if !strings.Contains(out, "requests:    0 pending (backlog), 6 done, 0 failed") {
		t.Fatalf("status:\n%s", out)
	}
}

// TestRunGitAuthFailureAndFix: the remote refuses the token (401): the
// queue stops with a clear status line instead of retrying blindly; once
// the token file holds the right token the queue resumes by itself
// (git.auth_recheck) and every generation arrives. No token is ever
// printed.
func TestRunGitAuthFailureAndFix(t *testing.T) {
	t.Parallel()
	const good, wrong = "tok-good-5b0c7e1f", "tok-wrong-93aa2d40"
	remote := newRemote(t)
	remote.RequireToken(good)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	tokFile := gittest.WriteFile(t, dir, "git-token", []byte(wrong+"\n"))
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n  token_file: %s\n%squeue: {policy: block}\nmetrics: {addr: \"off\"}\n",
		remote.URL, tokFile, fastGit))
	d := startDaemon(t, "--state-dir", state, "--config", cfg)
	requestTiny(t, state, 1)
	requestTiny(t, state, 2)
	waitFor(t, "the queue to stop on the refused token", func() (bool, string) {
		st, detail := queueState(t, state)
		return st != nil && st.Chain.Gen == 2 && st.Queue != nil && st.Queue.State == "needs-attention" && st.Queue.Pending == 2, detail
	})
	out := statusNeedsPerson(t, "push queue needs attention: gen 1: authentication failed", "--state-dir", state)
	for _, want := range []string{"push queue:  needs-attention, 2 pending", "last push error: push snapshots to " + remote.URL + ": authentication failed"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status lacks %q:\n%s", want, out)
		}
	}
	if gens := remoteGens(t, remote.Dir); len(gens) != 0 {
		t.Fatalf("remote got %v with a wrong token", gens)
	}
	// Fix the credential; the queue re-checks it and resumes.
	gittest.WriteFile(t, dir, "git-token", []byte(good+"\n"))
	requestTiny(t, state, 3)
	waitFor(t, "generation 3 on the remote", pushedAll(t, remote, state, 3))
	d.stop(t)
	checkRemote(t, remote, 3)
	out = mustRun(t, "status", "--state-dir", state)
	logs := d.stderr.String()
	if !strings.Contains(logs, "push works again; queue resumed") {
		t.Fatalf("no resume logged:\n%s", logs)
	}
	for _, s := range []string{logs, out} {
		if strings.Contains(s, good) || strings.Contains(s, wrong) {
			t.Fatalf("a token was printed:\n%s", s)
		}
	}
}

// TestRunGitRemoteDiverged: someone pushed a foreign commit onto the
// generations branch. The queue stops with "remote diverged" in `snapd
// status`; nothing on the remote is overwritten and later generations wait.
func TestRunGitRemoteDiverged(t *testing.T) {
	t.Parallel()
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%squeue: {policy: block}\nmetrics: {addr: \"off\"}\n", remote.URL, fastGit))
	d := startDaemon(t, "--state-dir", state, "--config", cfg)
	requestTiny(t, state, 1)
	requestTiny(t, state, 2)
	waitFor(t, "generation 2 on the remote", pushedAll(t, remote, state, 2))

	// A foreign commit on the remote branch, pushed past snapd.
	work := filepath.Join(dir, "work")
	gittest.Git(t, dir, "clone", "-q", "--branch", "snapshots", remote.Dir, work)
	gittest.WriteFile(t, work, "NOTES.md", []byte("hand-made change\n"))
	gittest.Git(t, work, "add", "NOTES.md")
	gittest.Git(t, work, "-c", "user.name=someone", "-c", "user.email=someone@example.com", "commit", "-q", "-m", "foreign")
	gittest.Git(t, work, "push", "-q", "origin", "snapshots")
	foreign := strings.TrimSpace(gittest.Git(t, remote.Dir, "rev-parse", "refs/heads/snapshots"))

	requestTiny(t, state, 3)
	requestTiny(t, state, 4)
	waitFor(t, "the queue to stop on the diverged remote", func() (bool, string) {
		st, detail := queueState(t, state)
		return st != nil && st.Chain.Gen == 4 && st.Queue != nil && st.Queue.State == "needs-attention" && st.Queue.Pending == 2, detail
	})
	out := statusNeedsPerson(t, "push queue needs attention: gen 3: remote diverged", "--state-dir", state)
	for _, want := range []string{"push queue:  needs-attention, 2 pending", "remote diverged"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status lacks %q:\n%s", want, out)
		}
	}
	var st pipeline.Status
	if err := json.Unmarshal([]byte(statusNeedsPerson(t, "push queue needs attention: gen 3: remote diverged", "--state-dir", state, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if h := st.Queue.Hold; h == nil || h.Kind != "remote diverged" || h.Gen != 3 {
		t.Fatalf("hold: %+v", h)
	}
	d.stop(t)
	// Nothing was overwritten, nothing of generations 3 and 4 arrived.
	if got := strings.TrimSpace(gittest.Git(t, remote.Dir, "rev-parse", "refs/heads/snapshots")); got != foreign {
		t.Fatalf("remote branch moved from the foreign commit %s to %s", foreign, got)
	}
	if tags := strings.Fields(gittest.Git(t, remote.Dir, "tag", "--list")); fmt.Sprint(tags) != "[gen-000001 gen-000002]" {
		t.Fatalf("remote tags %v", tags)
	}
	if got := remote.Applied.Load(); got != 2 {
		t.Fatalf("receive-pack ran %d times, want 2", got)
	}
	remote.Fsck(t)
	out = mustRun(t, "queue", "list", "--dir", filepath.Join(state, pipeline.QueueDir))
	if !strings.Contains(out, "snapshots@3") || !strings.Contains(out, "snapshots@4") {
		t.Fatalf("queue list:\n%s", out)
	}
}
