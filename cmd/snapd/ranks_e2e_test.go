package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/pipeline"
)

// ranksNode is one `snapd run` process of a sharded job.
type ranksNode struct {
	t     *testing.T
	bin   string
	cfg   string
	state string
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	cond  *sync.Cond
	done  chan struct{}
}

func (n *ranksNode) start() {
	n.t.Helper()
	n.cmd = exec.Command(n.bin, "run", "--config", n.cfg)
	n.cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+filepath.Join(n.state, "docker"), "GIT_CONFIG_GLOBAL=/dev/null")
	pr, pw := io.Pipe()
	n.cmd.Stdout, n.cmd.Stderr = pw, pw
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	// done closes when the process has exited (Wait returned: its lock
	// on the state directory is released) and its output is read.
	n.done = make(chan struct{})
	exited := make(chan struct{})
	go func() {
		n.cmd.Wait()
		pw.Close()
		close(exited)
	}()
	go func() {
		defer func() { <-exited; close(n.done) }()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			n.mu.Lock()
			n.lines = append(n.lines, sc.Text())
			n.cond.Broadcast()
			n.mu.Unlock()
		}
		// A scan error (a line over 4 MiB) must not block the node's
		// writes: note it, drain the rest.
		if err := sc.Err(); err != nil {
			n.mu.Lock()
			n.lines = append(n.lines, "TEST: log scan stopped: "+err.Error())
			n.cond.Broadcast()
			n.mu.Unlock()
		}
		io.Copy(io.Discard, pr)
	}()
}

// waitLog waits (bounded) until the node logged a line containing all of
// parts, from line index from on.
func (n *ranksNode) waitLog(from int, parts ...string) {
	n.t.Helper()
	deadline := time.AfterFunc(testutil.Guard, func() { n.mu.Lock(); n.cond.Broadcast(); n.mu.Unlock() })
	defer deadline.Stop()
	start := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := from; ; {
		for ; i < len(n.lines); i++ {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(n.lines[i], p)
			}
			if ok {
				return
			}
		}
		if time.Since(start) > 2*time.Minute {
			n.t.Fatalf("node %s never logged %q; log:\n%s", n.cfg, parts, strings.Join(n.lines, "\n"))
		}
		n.cond.Wait()
	}
}

func (n *ranksNode) mark() int { n.mu.Lock(); defer n.mu.Unlock(); return len(n.lines) }

func (n *ranksNode) kill9() {
	n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
}

func (n *ranksNode) stop() {
	n.cmd.Process.Signal(syscall.SIGTERM)
	<-n.done
	if n.cmd.ProcessState != nil && n.cmd.ProcessState.ExitCode() != 0 {
		n.t.Errorf("node %s: %v; log:\n%s", n.cfg, n.cmd.ProcessState, strings.Join(n.lines, "\n"))
	}
}

// TestRanksProcesses runs a sharded job end to end with real processes:
// W `snapd run` daemons (separate state dirs), one real registry, one
// bare Git remote, the Python trainer writing W torch shards per
// generation. One node is killed with SIGKILL while its upload is failing
// during a registry outage and restarted; the committer is killed right
// after a request and restarted. Every generation must be committed
// exactly once, in order, with a continuous chain, and verify from a
// fresh clone. Short by default (2 ranks x 3 generations);
// SNAPD_RANKS_LONG=1 runs 4 ranks x 10 generations.
func TestRanksProcesses(t *testing.T) {
	t.Parallel()
	world, gens, outageGen, killGen := 2, 3, 2, 3
	if os.Getenv("SNAPD_RANKS_LONG") != "" {
		world, gens, outageGen, killGen = 4, 10, 4, 7
	}
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import torch").CombinedOutput(); err != nil {
		t.Skipf("%s with torch is needed for the trainer: %v %s", py, err, out)
	}
	for _, tool := range []string{"git", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	reg := registrytest.Start(t, "", "")
	bin := buildSnapd(t)
	dir := t.TempDir()
	remote := filepath.Join(dir, "ledger.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", remote).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	repoName := reg.Host + "/e2e/job"
	var nodes []*ranksNode
	var states []string
	for r := range world {
		st := filepath.Join(dir, fmt.Sprintf("node%d", r))
		os.MkdirAll(filepath.Join(st, "docker"), 0o700)
		cfg := filepath.Join(dir, fmt.Sprintf("node%d.yaml", r))
		yaml := fmt.Sprintf(`state_dir: %s
metrics: {addr: "off"}
wal: {poll_interval: 100ms}
keys: {principal: node-%d@ranks-test}
git: {remote: %s, branch: snapshots}
ranks:
  job: e2e-job
  world_size: %d
  repository: %s
  committer: %v
  timeout: 10m
  poll_interval: 200ms
`, st, r, remote, world, repoName, r == 0)
		if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		n := &ranksNode{t: t, bin: bin, cfg: cfg, state: st}
		n.cond = sync.NewCond(&n.mu)
		n.start()
		nodes = append(nodes, n)
		states = append(states, st)
	}
	defer func() {
		for _, n := range nodes {
			n.cmd.Process.Signal(syscall.SIGKILL)
		}
	}()
	for _, n := range nodes {
		n.waitLog(0, "ranks node running")
	}
	trainer, _ := filepath.Abs("../../scripts/ranks_trainer.py")
	train := func(gen int) {
		t.Helper()
		if out, err := exec.Command(py, append([]string{trainer, fmt.Sprint(gen), fmt.Sprint(world)}, states...)...).CombinedOutput(); err != nil {
			t.Fatalf("trainer gen %d: %v %s", gen, err, out)
		}
	}
	last := nodes[world-1]
	statusFile := pipeline.RankStatusFile(states[0])
	// waitCommitted waits (polling the committer's state file, bounded)
	// until generation g is committed.
	waitCommitted := func(g int) {
		t.Helper()
		deadline := time.Now().Add(testutil.Guard)
		for {
			// Committed, and pushed by the committer's resend queue.
			st, err := pipeline.ReadRankStatus(statusFile)
			if err == nil && st.LastCommitted >= uint64(g) &&
				exec.Command("git", "-C", remote, "rev-parse", "-q", "--verify", fmt.Sprintf("refs/tags/gen-%06d", g)).Run() == nil {
				return
			}
			if time.Now().After(deadline) {
				for _, n := range nodes {
					n.mu.Lock()
					t.Logf("log of %s:\n%s", n.cfg, strings.Join(n.lines, "\n"))
					n.mu.Unlock()
				}
				t.Fatalf("generation %d not committed: %+v %v", g, st, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for gen := 1; gen <= gens; gen++ {
		switch gen {
		case outageGen:
			// Registry down; the last node's upload fails and is retried;
			// it is killed mid-upload, then the registry and it come back.
			waitCommitted(gen - 1) // the outage hits this generation only
			reg.Stop()
			m := last.mark()
			train(gen)
			last.waitLog(m, "rank part push failed; retrying", fmt.Sprintf("gen=%d", gen))
			last.kill9()
			reg.Restart(t)
			m = last.mark()
			last.start()
			last.waitLog(m, "ranks node running")
		case killGen:
			// The committer (also rank 0) dies right after the request.
			train(gen)
			nodes[0].kill9()
			m := nodes[0].mark()
			nodes[0].start()
			nodes[0].waitLog(m, "ranks node running")
		default:
			train(gen)
		}
	}
	waitCommitted(gens)
	for _, n := range nodes {
		n.stop()
	}
	logCommitLatency(t, nodes, gens)
	sout, err := exec.Command(bin, "ranks", "status", "--state-dir", states[0]).CombinedOutput()
	if err != nil || !strings.Contains(string(sout), fmt.Sprintf("last committed generation: %d", gens)) {
		t.Fatalf("ranks status: %v\n%s", err, sout)
	}
	// Exactly once, in order.
	out, err := exec.Command("git", "-C", remote, "log", "--first-parent", "--reverse", "--format=%(trailers:key=Snapd-Gen,valueonly)", "snapshots").Output()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for g := 1; g <= gens; g++ {
		want = append(want, fmt.Sprint(g))
	}
	if got := strings.Fields(string(out)); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("ledger generations %v, want %v", got, want)
	}
	// The independent path: a fresh clone verified with public keys only.
	var signers []byte
	for _, st := range states {
		b, err := os.ReadFile(filepath.Join(st, "keys", "allowed_signers"))
		if err != nil {
			t.Fatal(err)
		}
		signers = append(signers, b...)
	}
	as := filepath.Join(dir, "allowed_signers")
	os.WriteFile(as, signers, 0o644)
	clone := filepath.Join(dir, "clone")
	if out, err := exec.Command("git", "clone", "-q", "--branch", "snapshots", remote, clone).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	cmd := exec.CommandContext(context.Background(), bin, "ranks", "verify-repo", clone, "--oci-repository", repoName, "--pubkey", as, "--job", "e2e-job")
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+filepath.Join(dir, "none"))
	vout, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(vout), fmt.Sprintf("verified %d multi-rank generations", gens)) {
		t.Fatalf("verify-repo: %v\n%s", err, vout)
	}
	// The single-node verifier recognises the ledger and names the command.
	vout, err = exec.Command(bin, "verify-repo", clone, "--pubkey", as).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(vout), "snapd ranks verify-repo") {
		t.Fatalf("verify-repo on a multi-rank ledger: %v\n%s", err, vout)
	}
	// Per-array changes across ranks: assemble two generations and diff
	// each rank.
	for _, g := range []int{1, 2} {
		cmd := exec.Command(bin, "ranks", "assemble", clone, filepath.Join(dir, fmt.Sprintf("g%d", g)), "--gen", fmt.Sprintf("%06d", g), "--oci-repository", repoName)
		cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+filepath.Join(dir, "none"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("assemble gen %d: %v %s", g, err, out)
		}
	}
	for r := range world {
		a, b := filepath.Join(dir, "g1", fmt.Sprintf("rank-%d.wtxt", r)), filepath.Join(dir, "g2", fmt.Sprintf("rank-%d.wtxt", r))
		out, err := exec.Command(bin, "diff", a, b).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "layers.0.w") {
			t.Fatalf("diff rank %d: %v\n%s", r, err, out)
		}
	}
	cmd = exec.Command(bin, "ranks", "diff", clone, "--from", "000001", "--to", "000002", "--oci-repository", repoName)
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+filepath.Join(dir, "none"))
	dout, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(dout), fmt.Sprintf("rank %d:", world-1)) || !strings.Contains(string(dout), "layers.2.w") {
		t.Fatalf("ranks diff: %v\n%s", err, dout)
	}
	t.Logf("snapd ranks diff --from 000001 --to 000002:\n%s", dout)
	// A tampered skeleton in a clone fails verification, located.
	bad := filepath.Join(clone, filepath.FromSlash(gitops.RanksDir("")), wranks.SkeletonName(0))
	b, _ := os.ReadFile(bad)
	os.WriteFile(bad, []byte(strings.Replace(string(b), " order=C ", " order=F ", 1)), 0o644)
	gitq := func(args ...string) {
		c := exec.Command("git", append([]string{"-C", clone, "-c", "user.name=x", "-c", "user.email=x@y", "-c", "commit.gpgsign=false"}, args...)...)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	gitq("commit", "-q", "-am", "tamper\n\nSnapd-Gen: 99")
	cmd = exec.Command(bin, "ranks", "verify-repo", clone, "--oci-repository", repoName, "--pubkey", as)
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+filepath.Join(dir, "none"))
	vout, err = cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(vout), "signature") {
		t.Fatalf("tampered ledger: %v\n%s", err, vout)
	}
	// Retention: keep the rank manifests of the newest generation only,
	// collect the registry, verify from the kept generation on.
	cmd = exec.Command(bin, "ranks", "gc", remote, "--keep", "1", "--oci-repository", repoName)
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+filepath.Join(dir, "none"))
	gout, err := cmd.CombinedOutput()
	if err != nil || strings.Count(string(gout), "deleted gen-") != (gens-1)*world {
		t.Fatalf("ranks gc: %v\n%s", err, gout)
	}
	reg.GarbageCollect(t)
	cmd = exec.Command(bin, "ranks", "verify-repo", remote, "--oci-repository", repoName, "--pubkey", as, "--since", fmt.Sprintf("gen-%06d", gens))
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+filepath.Join(dir, "none"))
	if vout, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(vout), "verified 1 multi-rank generations") {
		t.Fatalf("verify-repo --since after gc: %v\n%s", err, vout)
	}
}

// logCommitLatency logs, per generation, the time from the last rank's
// "rank part pushed" to the committer's "multi-rank generation committed"
// (informational: timings on a shared machine are noisy and never
// asserted).
func logCommitLatency(t *testing.T, nodes []*ranksNode, gens int) {
	stamp := func(line string) (time.Time, bool) {
		v, ok := strings.CutPrefix(line, "time=")
		if !ok {
			return time.Time{}, false
		}
		v, _, _ = strings.Cut(v, " ")
		ts, err := time.Parse(time.RFC3339Nano, v)
		return ts, err == nil
	}
	lastPush := map[string]time.Time{}
	committed := map[string]time.Time{}
	for _, n := range nodes {
		n.mu.Lock()
		for _, l := range n.lines {
			ts, ok := stamp(l)
			if !ok {
				continue
			}
			for g := 1; g <= gens; g++ {
				key := fmt.Sprintf(" gen=%d ", g)
				switch {
				case strings.Contains(l, `msg="rank part pushed"`) && strings.Contains(l, key) && ts.After(lastPush[key]):
					lastPush[key] = ts
				case strings.Contains(l, `msg="multi-rank generation committed"`) && strings.Contains(l, key):
					committed[key] = ts
				}
			}
		}
		n.mu.Unlock()
	}
	for g := 1; g <= gens; g++ {
		key := fmt.Sprintf(" gen=%d ", g)
		if c, ok := committed[key]; ok && !lastPush[key].IsZero() {
			t.Logf("gen %d: committed %v after the last rank's push", g, c.Sub(lastPush[key]).Round(time.Millisecond))
		}
	}
}
