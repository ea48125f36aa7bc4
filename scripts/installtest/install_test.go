// Package installtest runs the documented ways of getting a snapd binary,
// as a user would: scripts/release.sh (also under -buildvcs=false), and
// `go install ./cmd/snapd` from a checkout, as the CI workflow's "Build
// snapd" step (configs/github/verify.yml) does it at a pinned commit. Each
// builds a real binary and asks it for its version and commit. They are
// skipped with -short (each compiles snapd).
package installtest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// root is the module root (this package is scripts/installtest).
const root = "../.."

type versionJSON struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
	Modified bool   `json:"modified"`
	Platform string `json:"platform"`
}

func versionOf(t *testing.T, bin string) versionJSON {
	t.Helper()
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("%s version --json: %v", bin, err)
	}
	var v versionJSON
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("version --json: %v: %s", err, out)
	}
	return v
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("git %s: %v (not a git checkout with history)", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a snapd binary")
	}
}

// TestReleaseScript: scripts/release.sh says what it does while it builds,
// writes the binary and its .sha256, and embeds git describe and the
// commit even when the toolchain's VCS stamping is off.
func TestReleaseScript(t *testing.T) {
	skipShort(t)
	describe := gitOut(t, root, "describe", "--tags", "--always", "--dirty")
	head := gitOut(t, root, "rev-parse", "HEAD")
	bin := filepath.Join(t.TempDir(), "snapd")
	cmd := exec.Command("scripts/release.sh")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "OUT="+bin, "GOFLAGS=-buildvcs=false")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, stderr.String())
	}
	if strings.TrimSpace(stdout.String()) != bin {
		t.Fatalf("release.sh stdout %q, want the binary's path", stdout.String())
	}
	if !strings.Contains(stderr.String(), "release.sh: building snapd") || !strings.Contains(stderr.String(), "release.sh: wrote "+bin) {
		t.Fatalf("release.sh shows no progress:\n%s", stderr.String())
	}
	sum, err := os.ReadFile(bin + ".sha256")
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(sum)), " snapd") {
		t.Fatalf(".sha256: %v %q", err, sum)
	}
	check := exec.Command("sha256sum", "-c", "snapd.sha256")
	check.Dir = filepath.Dir(bin)
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c: %v\n%s", err, out)
	}
	v := versionOf(t, bin)
	// The work tree may change between git describe and the build (other
	// files being edited): compare without the -dirty suffix.
	if strings.TrimSuffix(v.Version, "-dirty") != strings.TrimSuffix(describe, "-dirty") {
		t.Fatalf("version %q, git describe %q", v.Version, describe)
	}
	if v.Revision != head {
		t.Fatalf("-buildvcs=false: revision %q, want %s", v.Revision, head)
	}
	out, _ := exec.Command(bin, "--version").Output()
	if !strings.Contains(string(out), v.Version) {
		t.Fatalf("--version: %s", out)
	}
}

// workflow is the part of a GitHub Actions workflow this test reads.
type workflow struct {
	Env  map[string]string `yaml:"env"`
	Jobs map[string]struct {
		Steps []struct {
			Name string            `yaml:"name"`
			Uses string            `yaml:"uses"`
			With map[string]string `yaml:"with"`
			Run  string            `yaml:"run"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

// TestWorkflowBuildsPinnedSnapd runs the CI workflow's snapd checkout and
// "Build snapd" step (`go install ./cmd/snapd` in a checkout, the README's
// install path) as the runner would: the checkout action is played by
// a clone of this repository at the pinned commit (HEAD) into the path the
// step names, then the step's script runs under bash with RUNNER_TEMP and
// GITHUB_PATH. The binary it leaves on GITHUB_PATH must be built from the
// pinned commit, and ci-verify.sh must come from it. The template's
// placeholder SNAPD_COMMIT must be refused with a clear message.
func TestWorkflowBuildsPinnedSnapd(t *testing.T) {
	skipShort(t)
	head := gitOut(t, root, "rev-parse", "HEAD")
	raw, err := os.ReadFile(filepath.Join(root, "configs", "github", "verify.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf workflow
	if err := yaml.Unmarshal(raw, &wf); err != nil {
		t.Fatal(err)
	}
	job, ok := wf.Jobs["verify"]
	if !ok {
		t.Fatal("no verify job")
	}
	var checkoutPath, build string
	for _, s := range job.Steps {
		if strings.HasPrefix(s.Uses, "actions/checkout@") && s.With["repository"] == "${{ env.SNAPD_REPOSITORY }}" {
			if s.With["ref"] != "${{ env.SNAPD_COMMIT }}" {
				t.Fatalf("the snapd checkout is not at SNAPD_COMMIT: %q", s.With["ref"])
			}
			checkoutPath = s.With["path"]
		}
		if s.Name == "Build snapd" {
			build = s.Run
		}
	}
	if checkoutPath == "" || build == "" {
		t.Fatalf("workflow has no pinned snapd checkout (%q) or no Build snapd step", checkoutPath)
	}
	if strings.Contains(build, "@") {
		t.Fatalf("the build step installs from the module proxy:\n%s", build)
	}

	run := func(commit string) (string, string, error) {
		ws := t.TempDir()
		temp := t.TempDir()
		clone := exec.Command("git", "clone", "--quiet", "--no-checkout", root, filepath.Join(ws, checkoutPath))
		if out, err := clone.CombinedOutput(); err != nil {
			t.Fatalf("clone: %v\n%s", err, out)
		}
		co := exec.Command("git", "-c", "advice.detachedHead=false", "checkout", "--quiet", head)
		co.Dir = filepath.Join(ws, checkoutPath)
		if out, err := co.CombinedOutput(); err != nil {
			t.Fatalf("checkout: %v\n%s", err, out)
		}
		ghPath := filepath.Join(temp, "github_path")
		cmd := exec.Command("bash", "-e", "-c", build)
		cmd.Dir = ws
		cmd.Env = append(os.Environ(), "RUNNER_TEMP="+temp, "GITHUB_PATH="+ghPath,
			"SNAPD_REPOSITORY="+wf.Env["SNAPD_REPOSITORY"], "SNAPD_COMMIT="+commit)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		p, _ := os.ReadFile(ghPath)
		return strings.TrimSpace(string(p)), out.String(), err
	}

	// The template as shipped refuses to build until a commit is pinned.
	if _, out, err := run(wf.Env["SNAPD_COMMIT"]); err == nil || !strings.Contains(out, "SNAPD_COMMIT must be a full 40-hex commit SHA") {
		t.Fatalf("placeholder SNAPD_COMMIT %q: err %v\n%s", wf.Env["SNAPD_COMMIT"], err, out)
	}
	dir, out, err := run(head)
	if err != nil {
		t.Fatalf("Build snapd: %v\n%s", err, out)
	}
	v := versionOf(t, filepath.Join(dir, "snapd"))
	if v.Revision != head {
		t.Fatalf("workflow-built snapd: revision %q, pinned %s", v.Revision, head)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "ci-verify.sh")); err != nil {
		t.Fatalf("ci-verify.sh not taken from the pinned checkout: %v", err)
	}
}
