package main

import (
	"crypto/rand"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
)

// brokenChainCopy returns a copy of f's repository with a sixth generation
// whose merkle_prev is wrong (committed and signed by hand), and its commit.
func brokenChainCopy(t *testing.T, f *verifytest.Fixture) (string, string) {
	repo := f.Copy(t)
	var wrong [32]byte
	rand.Read(wrong[:])
	g6 := f.MakeWith(t, verifytest.Snapshot(6), wrong, f.Gens[4], false)
	return repo, verifytest.HandCommit(t, repo, f.Gens[4].Commit, g6.Files, f.Key.PrivFile, f.Key.PrivFile)
}

func TestVerifyRepoCommand(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{Encrypt: []uint64{3}})
	code, out, errs := snapd(t, nil, "verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	for _, want := range []string{
		"gen 000001 " + f.Gens[0].Commit[:12] + " single ok",
		"gen 000003 " + f.Gens[2].Commit[:12] + " single ok       sealed (age-armored) signature verified",
		"commit verified, tag verified; chain continues; delta applied",
		"summary: 5 generation(s) 000001..000005 (head " + f.Gens[4].Commit[:12] + "): all checks passed",
		"chain: first at 000001, 4 link(s) checked; deltas: 2 applied, 2 skipped; sealed (encrypted): 1",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}

	// JSON.
	code, out, _ = snapd(t, nil, "verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--json", "--since", "gen-000002")
	var rep struct {
		OK          bool   `json:"ok"`
		Repo        string `json:"repo"`
		Generations []struct {
			Gen     uint64 `json:"gen"`
			GenText string `json:"gen_text"`
			Chain   string `json:"chain"`
		} `json:"generations"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || !rep.OK || rep.Repo != f.Dir || len(rep.Generations) != 4 || rep.Generations[0].Chain != "anchor" ||
		rep.Generations[0].Gen != 2 || rep.Generations[0].GenText != "000002" {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}

	// A broken chain: exit 1, the failure named.
	repo, commit := brokenChainCopy(t, f)
	code, out, errs = snapd(t, nil, "verify-repo", repo, "--pubkey", f.Key.AllowedSigners)
	t.Logf("%s%s", out, errs)
	want := "FAIL commit " + commit[:12] + " gen 000006 snapshots/current.wtxt: chain: merkle_prev "
	if code != 1 || !strings.Contains(out, want) || !strings.Contains(errs, "verify-repo: 1 failed check(s) in 1 generation(s); first: "+want[5:]) {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}

	// Usage and I/O errors: exit 2.
	for _, args := range [][]string{
		{"verify-repo", f.Dir},
		{"verify-repo", filepath.Join(t.TempDir(), "nope"), "--pubkey", f.Key.AllowedSigners},
		{"verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--branch", "nope"},
		{"verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--since", "gen-999999"},
		{"verify-repo", f.Dir, "--pubkey", filepath.Join(t.TempDir(), "missing.pub")},
		{"verify-repo", f.Dir, "extra", "--pubkey", f.Key.AllowedSigners},
	} {
		if code, out, errs := snapd(t, nil, args...); code != 2 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errs)
		}
	}
}

// TestCIVerifyScript runs scripts/ci-verify.sh with bash against real
// repositories, with snapd built into a temp dir and put on PATH.
func TestCIVerifyScript(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not available")
	}
	bin := filepath.Dir(buildSnapd(t)) // holds only snapd
	script, err := filepath.Abs("../../scripts/ci-verify.sh")
	if err != nil {
		t.Fatal(err)
	}
	f := verifytest.Build(t, verifytest.Options{Gens: []uint64{1, 2, 3, 4, 5}})
	runScript := func(dir string, env []string, args ...string) (int, string) {
		cmd := exec.Command("bash", append([]string{script}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
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

	// A CI checkout: a clone with its work tree, keys in .snapd/, run in ".".
	wt := filepath.Join(t.TempDir(), "checkout")
	verifytest.Git(t, filepath.Dir(wt), "clone", "-q", "-b", "snapshots", f.Dir, wt)
	os.MkdirAll(filepath.Join(wt, ".snapd"), 0o755)
	keys, _ := os.ReadFile(f.Key.AllowedSigners)
	os.WriteFile(filepath.Join(wt, ".snapd", "allowed_signers"), keys, 0o644)
	report := filepath.Join(t.TempDir(), "report.json")
	code, out := runScript(wt, []string{"SNAPD_REPORT=" + report})
	if code != 0 || !strings.Contains(out, "5 generation(s) 000001..000005: OK: every check passed") ||
		!strings.Contains(out, "gen 000005  "+f.Gens[4].Commit[:12]+"  ok") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if b, err := os.ReadFile(report); err != nil || !json.Valid(b) {
		t.Fatalf("report: %v", err)
	}

	// A tampered bare repository given as argument: exit 1 and the failure.
	repo, commit := brokenChainCopy(t, f)
	code, out = runScript(t.TempDir(), []string{"SNAPD_PUBKEY_FILE=" + f.Key.AllowedSigners}, repo)
	if code != 1 || !strings.Contains(out, "gen 000006  "+commit[:12]+"  FAIL (1)") || !strings.Contains(out, "FAIL [chain] snapshots/current.wtxt merkle_prev ") ||
		!strings.Contains(out, "FAILED: 1 check(s)") {
		t.Fatalf("exit %d\n%s", code, out)
	}

	// No key file: exit 2 with a message.
	code, out = runScript(t.TempDir(), nil, repo)
	if code != 2 || !strings.Contains(out, "trusted keys file .snapd/allowed_signers is not readable") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	// A repository that does not exist: exit 2, snapd's error shown.
	code, out = runScript(t.TempDir(), []string{"SNAPD_PUBKEY_FILE=" + f.Key.AllowedSigners}, filepath.Join(t.TempDir(), "missing"))
	if code != 2 || !strings.Contains(out, "snapd: error:") {
		t.Fatalf("exit %d\n%s", code, out)
	}
}

// TestVerifyWorkflow checks the GitHub Actions workflow's essential steps.
func TestVerifyWorkflow(t *testing.T) {
	b, err := os.ReadFile("../../configs/github/verify.yml")
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		On   map[string]any `yaml:"on"`
		Jobs map[string]struct {
			Steps []struct {
				Name string            `yaml:"name"`
				Uses string            `yaml:"uses"`
				With map[string]any    `yaml:"with"`
				Run  string            `yaml:"run"`
				Env  map[string]string `yaml:"env"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(false)
	if err := dec.Decode(&wf); err != nil {
		t.Fatal(err)
	}
	job, ok := wf.Jobs["verify"]
	if !ok || wf.On["push"] == nil {
		t.Fatalf("workflow: %+v", wf)
	}
	var checkout, goSetup, install, runs bool
	for _, s := range job.Steps {
		switch {
		case strings.HasPrefix(s.Uses, "actions/checkout@") && s.With["repository"] == nil:
			// The repository being verified (the other checkout is
			// snapd's source at the pinned commit).
			checkout = s.With["fetch-depth"] == 0 && s.With["fetch-tags"] == true
		case strings.HasPrefix(s.Uses, "actions/setup-go@"):
			goSetup = true
		case strings.Contains(s.Run, "go install -trimpath -buildvcs=true ./cmd/snapd") && strings.Contains(s.Run, "SNAPD_COMMIT"):
			install = true
		case strings.Contains(s.Run, "ci-verify.sh"):
			runs = install && goSetup && checkout
		}
	}
	if !checkout || !goSetup || !install || !runs {
		t.Fatalf("checkout(full history+tags)=%v setup-go=%v install=%v runs ci-verify.sh after them=%v", checkout, goSetup, install, runs)
	}
}
