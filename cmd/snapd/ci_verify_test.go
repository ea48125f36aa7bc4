package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
	"github.com/snapd-ml/snapd/snapshot"
)

// buildSnapd returns the snapd binary for tests that drive scripts or
// processes: built once per test binary (shared.snapdBinary); a test that
// needs to change it copies it.
func buildSnapd(t *testing.T) string {
	t.Helper()
	return shared.snapdBinary(t)
}

// runCIVerify runs scripts/ci-verify.sh on repo (as the working
// directory, like the workflow's `ci-verify.sh .`) with env, returning
// exit code and output.
func runCIVerify(t *testing.T, bin, repo string, env ...string) (int, string) {
	t.Helper()
	script, err := filepath.Abs("../../scripts/ci-verify.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", script, ".")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "SNAPD_BIN="+bin, "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// TestCIVerifyPullRequest simulates GitHub's pull-request refs in a real
// repository: the base branch main holds the trusted keys; each PR is
// refs/pull/N/head (the snapshot branch as the PR proposes it) and
// refs/pull/N/merge (GitHub's merge of it into main). scripts/ci-verify.sh
// in pull-request mode must pass the honest PR and fail a tampered,
// unsigned generation and one signed by a key that only the PR trusts.
func TestCIVerifyPullRequest(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"git", "bash", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	bin := buildSnapd(t)
	f := verifytest.Build(t, verifytest.Options{})
	git := func(dir string, args ...string) string { return strings.TrimSpace(verifytest.Git(t, dir, args...)) }

	// The CI checkout: a clone of the repository with the base branch main
	// holding the trusted keys (K) and a README.
	work := filepath.Join(t.TempDir(), "work")
	git(filepath.Dir(work), "clone", "-q", "--no-checkout", f.Dir, work)
	git(work, "checkout", "-q", "--orphan", "main")
	os.MkdirAll(filepath.Join(work, ".snapd"), 0o755)
	keys, _ := os.ReadFile(f.Key.AllowedSigners)
	verifytest.WriteFile(t, filepath.Join(work, ".snapd", "allowed_signers"), keys)
	verifytest.WriteFile(t, filepath.Join(work, "README"), []byte("model repo\n"))
	git(work, "add", ".snapd/allowed_signers", "README")
	git(work, "commit", "-q", "-m", "base")
	base := git(work, "rev-parse", "HEAD")

	// pr makes refs/pull/N/head = head (a commit of repo src) and
	// refs/pull/N/merge = GitHub's merge of it into main, as the
	// workflow's fetch step names them.
	pr := func(n, src, headRef string) {
		git(work, "fetch", "-q", "--no-tags", src, "+"+headRef+":refs/remotes/pull/"+n+"/head")
		git(work, "checkout", "-q", "--detach", base)
		git(work, "merge", "-q", "--no-ff", "--allow-unrelated-histories", "-m", "Merge pull request #"+n, "refs/remotes/pull/"+n+"/head")
		git(work, "update-ref", "refs/remotes/pull/"+n+"/merge", "HEAD")
		git(work, "checkout", "-q", "main")
	}
	prEnv := func(n string) []string {
		return []string{"SNAPD_PR_BASE=" + base, "SNAPD_PR_HEAD=refs/remotes/pull/" + n + "/head", "SNAPD_PR_MERGE=refs/remotes/pull/" + n + "/merge"}
	}

	// PR 1: the honest snapshot branch, generations 1..5 signed by K.
	pr("1", f.Dir, "refs/heads/snapshots")
	if code, out := runCIVerify(t, bin, work, prEnv("1")...); code != 0 || !strings.Contains(out, "OK: every check passed") {
		t.Fatalf("honest PR: exit %d\n%s", code, out)
	}

	// PR 2: a sixth generation, tampered (arrays changed, every hash
	// recomputed) and unsigned: no sign line, unsigned commit and tag.
	evil := f.Copy(t)
	g6 := f.Make(t, 6, f.Gens[4], false)
	s := verifytest.Snapshot(6)
	s.Arrays[2].Data = snapshot.Bytes(make([]byte, 48*4))
	data, _ := verifytest.Encode(t, s, nil, f.Gens[4].Result.MerkleThis)
	verifytest.WriteFile(t, g6.Files.WTXT, data)
	g6.Files.Delta = ""
	verifytest.HandCommit(t, evil, f.Gens[4].Commit, g6.Files, "", "")
	git(work, "fetch", "-q", "--no-tags", evil, "+refs/tags/gen-000006:refs/tags/gen-000006")
	pr("2", evil, "refs/heads/snapshots")
	code, out := runCIVerify(t, bin, work, prEnv("2")...)
	t.Logf("PR 2:\n%s", out)
	if code != 1 || !strings.Contains(out, "gen 000006") || !strings.Contains(out, "FAIL") {
		t.Fatalf("tampered unsigned PR: exit %d\n%s", code, out)
	}
	git(work, "tag", "-d", "gen-000006")

	// PR 3: a sixth generation signed (WTXT, commit, tag) by an attacker
	// key A, and the PR's version of the key file trusts A (simulated in
	// the working tree the script runs in). Branch mode with A trusted
	// passes, so only the key source decides: the base's keys fail it.
	attacker := &verifytest.Fixture{Key: verifytest.NewKey(t), Work: t.TempDir()}
	a6 := attacker.MakeWith(t, verifytest.Snapshot(6), f.Gens[4].Result.MerkleThis, f.Gens[4], false)
	evil3 := f.Copy(t)
	verifytest.HandCommit(t, evil3, f.Gens[4].Commit, a6.Files, attacker.Key.PrivFile, attacker.Key.PrivFile)
	git(work, "fetch", "-q", "--no-tags", evil3, "+refs/tags/gen-000006:refs/tags/gen-000006")
	pr("3", evil3, "refs/heads/snapshots")
	aKeys, _ := os.ReadFile(attacker.Key.AllowedSigners)
	both := verifytest.WriteFile(t, filepath.Join(t.TempDir(), "both"), append(append([]byte{}, keys...), aKeys...))
	if code, out := runCIVerify(t, bin, work, "SNAPD_PUBKEY_FILE="+both, "SNAPD_BRANCH=refs/remotes/pull/3/head"); code != 0 {
		t.Fatalf("sanity: with A trusted the chain verifies: exit %d\n%s", code, out)
	}
	verifytest.WriteFile(t, filepath.Join(work, ".snapd", "allowed_signers"), append(append([]byte{}, keys...), aKeys...))
	code, out = runCIVerify(t, bin, work, prEnv("3")...)
	t.Logf("PR 3:\n%s", out)
	if code != 1 || !strings.Contains(out, "trusted keys from the base") || !strings.Contains(out, "signature") {
		t.Fatalf("PR trusting its own key: exit %d\n%s", code, out)
	}
	git(work, "checkout", "-q", "--", ".snapd/allowed_signers")

	// A merge ref that does not merge the head (another tree) fails.
	git(work, "update-ref", "refs/remotes/pull/4/head", "refs/remotes/pull/1/head")
	git(work, "update-ref", "refs/remotes/pull/4/merge", "refs/remotes/pull/2/merge")
	if code, out := runCIVerify(t, bin, work, prEnv("4")...); code != 1 || !strings.Contains(out, "parents") {
		t.Fatalf("foreign merge ref: exit %d\n%s", code, out)
	}

	// A PR that does not touch snapshots/ passes with a note.
	git(work, "checkout", "-q", "-b", "docs", base)
	verifytest.WriteFile(t, filepath.Join(work, "README"), []byte("model repo, docs\n"))
	git(work, "commit", "-q", "-am", "docs")
	git(work, "update-ref", "refs/remotes/pull/5/head", "HEAD")
	git(work, "checkout", "-q", "main")
	if code, out := runCIVerify(t, bin, work, "SNAPD_PR_BASE="+base, "SNAPD_PR_HEAD=refs/remotes/pull/5/head"); code != 0 || !strings.Contains(out, "nothing to verify") {
		t.Fatalf("docs PR: exit %d\n%s", code, out)
	}
}

// TestWorkflowActionlint checks configs/github/verify.yml with actionlint
// (scripts/test.sh installs it; skipped, with the reason, without it).
func TestWorkflowActionlint(t *testing.T) {
	bin, err := exec.LookPath("actionlint")
	if err != nil {
		gobin := filepath.Join(os.Getenv("HOME"), "go", "bin", "actionlint")
		if _, serr := os.Stat(gobin); serr != nil {
			t.Skip("actionlint not installed (scripts/test.sh installs it with go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12)")
		}
		bin = gobin
	}
	out, err := exec.Command(bin, "-no-color", "../../configs/github/verify.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("actionlint: %v\n%s", err, out)
	}
	wf, _ := os.ReadFile("../../configs/github/verify.yml")
	for _, l := range strings.Split(string(wf), "\n") {
		if i := strings.Index(l, "uses: "); i >= 0 && !strings.HasPrefix(strings.TrimSpace(l), "#") {
			ref := strings.Fields(l[i+len("uses: "):])[0]
			_, sha, _ := strings.Cut(ref, "@")
			if len(sha) != 40 || strings.Trim(sha, "0123456789abcdef") != "" {
				t.Errorf("action %s is not pinned by a full commit SHA", ref)
			}
		}
	}
	for _, l := range strings.Split(string(wf), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") && strings.Contains(l, "branches: [snapshots]") {
			t.Error("a push trigger on the snapshot branch never finds the workflow file")
		}
	}
}
