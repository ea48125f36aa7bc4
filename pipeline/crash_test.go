package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/keys"
)

// The test binary doubles as the daemon child of the crash test. Every
// test (and the child, which inherits the environment) checks each pack a
// gitops Commit writes with git index-pack --strict (gitops.EnvCheckPacks).
//
// The slowest tests, each in its own state directory and waiting much of
// its time on processes (the daemon child, git pushing to a remote and
// checking packs, a registry), call t.Parallel: go test runs them after
// the sequential ones, -parallel at a time, overlapping those waits.
func TestMain(m *testing.M) {
	os.Setenv(gitops.EnvCheckPacks, "1")
	if dir := os.Getenv("PIPELINE_TEST_DAEMON"); dir != "" {
		os.Exit(childDaemon(dir))
	}
	os.Exit(m.Run())
}

func childDaemon(dir string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	sk, err := keys.LoadSigner(filepath.Join(dir, KeysDir, keys.SignKeyFile))
	if err != nil {
		return fail(err)
	}
	hk, err := keys.LoadHMACKey(filepath.Join(dir, KeysDir, keys.HMACKeyFile))
	if err != nil {
		return fail(err)
	}
	lock, err := LockStateDir(dir)
	if err != nil {
		return fail(err)
	}
	repo, err := gitops.OpenRepo(filepath.Join(dir, RepoDir), gitops.Config{SigningKey: sk})
	if err != nil {
		return fail(err)
	}
	cfg := testConfig(dir, &testKeys{sign: sk, hmac: hk})
	cfg.Workers = 1
	d, err := New(cfg, Deps{Registry: testRegistry(), Repo: repo, Lock: lock,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := d.Start(ctx); err != nil {
		return fail(err)
	}
	fmt.Println("ready") // startChildReady waits for this line
	<-ctx.Done()
	cctx, cancel := context.WithTimeout(context.Background(), testutil.Guard)
	defer cancel()
	if err := d.Close(cctx); err != nil {
		return fail(err)
	}
	return 0
}

func startChild(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PIPELINE_TEST_DAEMON="+dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// startChildReady starts a daemon child and returns once it has started
// (recovery at start is done and its signal handler is installed).
func startChildReady(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PIPELINE_TEST_DAEMON="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("daemon child did not start: %q %v", line, err)
	}
	go io.Copy(io.Discard, out)
	return cmd
}

// TestKill9 runs a 20-generation workload per run (10 under the race
// detector) and kills the daemon with SIGKILL at random points
// (re-executing the test binary as the daemon), restarting it until
// everything is done. Afterwards every
// requested generation is in the ring exactly once, the chain and every
// delta verify end to end, Git holds the head, and no temp files or pins
// are left. PIPELINE_CRASH_RUNS overrides the number of runs.
func TestKill9(t *testing.T) {
	t.Parallel()
	// The full size: 50 runs of 20 generations (about 16 s). Under the
	// race detector 5 runs (15 kills at random points, a fresh seed each
	// time) of 10 generations keep CI within its budget: every generation
	// costs about ten times the CPU there, and a kill still lands after a
	// random number of done generations (0..gens-1) of a workload that
	// spans several daemon lives.
	runs, gens := 50, 20
	switch {
	case testing.Short():
		runs = 2
	case raceEnabled:
		runs, gens = 5, 10
	}
	if s := os.Getenv("PIPELINE_CRASH_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		runs = n
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	kills := 0
	for run := 0; run < runs; run++ {
		dir := t.TempDir()
		k := loadTestKeys(t, filepath.Join(dir, KeysDir))
		for g := 1; g <= gens; g++ {
			request(t, dir, uint64(g), publish(t, dir, uint64(g)))
		}
		done := func() bool {
			st, err := ReadStatus(dir)
			return err == nil && st.Chain.Gen == uint64(gens) && st.Done == gens && st.Backlog == 0
		}
		// Kill at random points until the work is done.
		killedLast := false
		for attempt := 0; !done(); attempt++ {
			child := startChild(t, dir)
			if attempt < 3 {
				// A random point of the workload: after a random number
				// of generations are done, plus a random delay.
				target := rng.IntN(gens)
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
					if st, err := ReadStatus(dir); err == nil && st.Done >= target {
						break
					}
				}
				time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
				child.Process.Signal(syscall.SIGKILL)
				child.Wait()
				kills++
				killedLast = true
				continue
			}
			killedLast = false
			// Poll the state files until done (a child process: no event
			// to wait on); the deadline is only a failure guard.
			deadline := time.Now().Add(5 * time.Minute)
			for !done() && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			child.Process.Signal(syscall.SIGTERM)
			if err := child.Wait(); err != nil {
				t.Fatalf("run %d: child: %v", run, err)
			}
			if !done() {
				st, _ := ReadStatus(dir)
				t.Fatalf("run %d: not done after 5 minutes: %+v", run, st)
			}
		}
		if killedLast {
			// The last kill came after the work was done (e.g. while the
			// WAL cursor was being replaced): the promise is about the
			// state after a restart has recovered, so start once more.
			child := startChildReady(t, dir)
			child.Process.Signal(syscall.SIGTERM)
			if err := child.Wait(); err != nil {
				t.Fatalf("run %d: recovery start: %v", run, err)
			}
		}
		entries, err := ListRing(filepath.Join(dir, RingDir))
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != gens {
			t.Fatalf("run %d: ring holds %d generations, want %d", run, len(entries), gens)
		}
		all := make([]uint64, gens)
		for i, e := range entries {
			want := uint64(i + 1)
			all[i] = want
			if e.Gen != want || e.WTXT == "" || (want > 1 && e.Delta == "") {
				t.Fatalf("run %d: ring entry %d: %+v", run, i, e)
			}
		}
		verifyChain(t, dir, k, all)
		noLeftovers(t, dir)
		repo, err := gitops.OpenRepo(filepath.Join(dir, RepoDir), gitops.Config{})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := repo.WriteWTXT(fmt.Sprintf("gen-%06d", gens), &b); err != nil {
			t.Fatalf("run %d: git: %v", run, err)
		}
		ring, _ := os.ReadFile(entries[gens-1].WTXT)
		if string(ring) != b.String() {
			t.Fatalf("run %d: git's gen %d differs from the ring's", run, gens)
		}
	}
	t.Logf("%d runs x %d generations, %d kills", runs, gens, kills)
}
