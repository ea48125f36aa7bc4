package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/pipeline"
)

// TestRunResumeBelowRetainedHistory: the daemon keeps one pushed
// generation in its local repository (retention.repo: 1), and a run
// resumes from generation 2 with the chain at 4: neither the ring (ring
// retention) nor the local repository holds 2 any more, only the HTTP
// remote. The daemon fetches the history back, commits the resume record
// and the new 3 (tag gen-000003-r1, the first run's gen-000003 kept), and
// pushes them; verify-repo of a full clone passes with the public key,
// and the local repository is cut back to one generation. While the
// remote is down, the fetch is retried. In the registry layout as in the
// Git one.
func TestRunResumeBelowRetainedHistory(t *testing.T) {
	t.Parallel()
	t.Run("git", func(t *testing.T) { t.Parallel(); testResumeBelowRetained(t, "") })
	t.Run("registry", func(t *testing.T) {
		t.Parallel()
		reg := registrytest.Start(t, "", "")
		testResumeBelowRetained(t, fmt.Sprintf("store:\n  oci:\n    repository: %s/snapd/resume\n    threshold: 1\n", reg.Host),
			"--oci-repository", reg.Host+"/snapd/resume")
	})
}

// testResumeBelowRetained runs the test with extra config (the registry
// layout: its queue job carries the resume through its file).
func testResumeBelowRetained(t *testing.T, extra string, verifyArgs ...string) {
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\nretention: {repo: 1, gens: 1}\nring:\n  keep: 1\n%s", remote.URL, extra))
	startDaemon(t, "--state-dir", state, "--config", cfg, "--metrics-addr", "off")
	gens := filepath.Join(dir, "src")
	os.MkdirAll(gens, 0o755)
	request := func(gen int, seed uint64, extra ...string) {
		t.Helper()
		src := filepath.Join(gens, fmt.Sprintf("g%d-%d.safetensors", gen, seed))
		writeSafetensors(t, src, 64, 0, seed)
		mustRun(t, append([]string{"request-snapshot", "--state-dir", state, "--gen", fmt.Sprint(gen), "--source", src}, extra...)...)
	}
	for g := 1; g <= 4; g++ {
		request(g, uint64(g))
		mustRun(t, "wait", fmt.Sprint(g), "--pushed", "--state-dir", state)
	}
	waitFor(t, "the local repository cut to one generation", func() (bool, string) {
		n := strings.TrimSpace(gittest.Git(t, filepath.Join(state, "repo"), "rev-list", "--count", "snapshots"))
		return n == "1", n + " commits"
	})
	// The remote is down when the resume needs it: the fetch is retried
	// (last_error says so) until it answers.
	remote.SetMode(gittest.Down)
	request(3, 33, "--resumed-from", "2")
	waitStatus(t, state, "the resume's fetch retried", func(s *pipeline.Status) bool {
		return s.LastError != nil && strings.Contains(s.LastError.Message, "will retry") && strings.Contains(s.LastError.Message, "resumes from gen 2")
	})
	remote.SetMode(gittest.Up)
	mustRun(t, "wait", "3", "--pushed", "--state-dir", state)
	st := waitStatus(t, state, "resumed gen 3", func(s *pipeline.Status) bool { return s.Chain.Gen == 3 && s.Chain.Resume != nil })
	if rs := st.Chain.Resume; rs.From != 2 || rs.AbandonedLast != 4 || len(st.Failed) != 0 {
		t.Fatalf("status: resume %+v, failed %+v", rs, st.Failed)
	}
	tags := strings.Fields(gittest.Git(t, remote.Dir, "tag", "--list", "gen-*"))
	if strings.Join(tags, " ") != "gen-000001 gen-000002 gen-000003 gen-000003-r1 gen-000004" {
		t.Fatalf("remote tags %v", tags)
	}
	remote.Fsck(t)
	clone := filepath.Join(dir, "clone")
	mustRun(t, "clone", remote.URL, clone, "--full")
	out := mustRun(t, append([]string{"verify-repo", clone, "--pubkey", filepath.Join(state, "keys", "sign_ed25519.pub")}, verifyArgs...)...)
	if !strings.Contains(out, "all checks passed") {
		t.Fatalf("verify-repo:\n%s", out)
	}
	log := mustRun(t, "log", "--repo", clone)
	if !strings.Contains(log, "resume from 000002 (abandons 000003..000004)") {
		t.Fatalf("snapd log:\n%s", log)
	}
	waitFor(t, "the local repository cut again", func() (bool, string) {
		n := strings.TrimSpace(gittest.Git(t, filepath.Join(state, "repo"), "rev-list", "--count", "--first-parent", "snapshots"))
		return n == "1", n + " commits"
	})
	gittest.Git(t, filepath.Join(state, "repo"), "fsck", "--strict", "--no-dangling")
	// --state-dir alone names the daemon's repository: log says where its
	// history ends (the clone's listing above had no such note), and
	// checkout restores from it.
	local := mustRun(t, "log", "--state-dir", state)
	if !strings.Contains(local, "000003") || strings.Contains(local, "000002") ||
		!strings.Contains(local, "older generations are not in this shallow repository") || strings.Contains(log, "shallow") {
		t.Fatalf("snapd log --state-dir:\n%s", local)
	}
	if js := mustRun(t, "log", "--state-dir", state, "--json"); !strings.Contains(js, `"shallow": true`) {
		t.Fatalf("snapd log --state-dir --json:\n%s", js)
	}
	mustRun(t, "checkout", "latest", filepath.Join(dir, "latest.safetensors"), "--state-dir", state, "--lossy")
}

// TestReadRepoMissing: log and checkout on a directory that is no
// repository fail with I/O's exit status and say where repositories are.
func TestReadRepoMissing(t *testing.T) {
	empty := t.TempDir()
	for _, args := range [][]string{{"log", "--repo", empty}, {"checkout", "latest", filepath.Join(empty, "x.wtxt"), "--repo", empty}} {
		code, out, errs := runCLI(args...)
		if code != exitUsage || !strings.Contains(errs, "repository does not exist") ||
			!strings.Contains(errs, "hint: name it with --repo DIR: a clone (snapd clone REMOTE DIR)") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errs)
		}
	}
}
