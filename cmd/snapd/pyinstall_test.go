package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainerModuleInstalls: python/ is an installable project that
// needs nothing from a package index. Inside a fresh venv (the way to
// install on a PEP 668 system such as Debian 12), `pip install --no-index
// ./python` builds it with its in-tree, stdlib-only backend under pip's
// default build isolation; the installed module — not the source tree's —
// publishes a generation and requests its snapshot, and snapd reads both:
// the request in the WAL, the checkpoint file.
func TestTrainerModuleInstalls(t *testing.T) {
	t.Parallel()
	base := "/usr/bin/python3"
	if err := exec.Command(base, "-c", "import venv, ensurepip").Run(); err != nil {
		t.Skipf("no venv/ensurepip for %s (apt-get install python3-venv): %v", base, err)
	}
	tmp := t.TempDir()
	// Build from a copy: nothing is written into the source tree.
	src := filepath.Join(tmp, "src")
	os.Mkdir(src, 0o755)
	for _, n := range []string{"pyproject.toml", "README.md", "snapd_trainer.py", "_snapd_build.py"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "python", n))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(src, n), b, 0o644)
	}
	venv := filepath.Join(tmp, "venv")
	if out, err := exec.Command(base, "-m", "venv", venv).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv: %v\n%s", err, out)
	}
	py := filepath.Join(venv, "bin", "python")
	cmd := exec.Command(py, "-m", "pip", "install", "--no-index", "--no-cache-dir",
		"--disable-pip-version-check", "--quiet", src)
	cmd.Env = append(os.Environ(), "PIP_ROOT_USER_ACTION=ignore", "PYTHONDONTWRITEBYTECODE=1", "PIP_CONFIG_FILE=/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pip install --no-index ./python in a venv: %v\n%s", err, out)
	}
	purelib, err := exec.Command(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
	if err != nil {
		t.Fatal(err)
	}
	site := strings.TrimSpace(string(purelib))
	if _, err := os.Stat(filepath.Join(site, "snapd_trainer-0.1.0.dist-info", "METADATA")); err != nil {
		t.Fatalf("no installed metadata: %v", err)
	}
	// The same offline build into a target directory (no venv).
	target := filepath.Join(tmp, "target")
	cmd = exec.Command(py, "-m", "pip", "install", "--no-index", "--no-cache-dir",
		"--disable-pip-version-check", "--quiet", "--target", target, src)
	cmd.Env = append(os.Environ(), "PIP_ROOT_USER_ACTION=ignore", "PYTHONDONTWRITEBYTECODE=1", "PIP_CONFIG_FILE=/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pip install --target: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(target, "snapd_trainer.py")); err != nil {
		t.Fatalf("--target install: %v", err)
	}
	state := filepath.Join(tmp, "state")
	ckpt := filepath.Join(tmp, "m.safetensors")
	writeF32Safetensors(t, ckpt, 8, 4)
	script := `
import os, sys, snapd_trainer
assert snapd_trainer.__file__.startswith(sys.argv[1]), snapd_trainer.__file__
state = sys.argv[2]
data = open(sys.argv[3], "rb").read()
path = snapd_trainer.publish_generation(os.path.join(state, "gens"), 7, data)
snapd_trainer.request_snapshot(7, path, state_dir=state, requester="pip-test")
print(path)
`
	run := exec.Command(py, "-c", script, site, state, ckpt)
	run.Dir = tmp // not the repository: nothing else named snapd_trainer is importable
	run.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("installed module: %v\n%s", err, out)
	}
	published := strings.TrimSpace(string(out))
	// snapd sees the request and reads the published generation.
	code, wout, werr := runCLI("wal", "list", "--json", "--state-dir", state)
	if code != 0 {
		t.Fatalf("wal list: %d %s", code, werr)
	}
	var wl struct {
		Requests []struct {
			Gen       uint64 `json:"gen"`
			State     string `json:"state"`
			Source    string `json:"source"`
			Requester string `json:"requester"`
		} `json:"requests"`
	}
	if err := json.Unmarshal([]byte(wout), &wl); err != nil || len(wl.Requests) != 1 {
		t.Fatalf("wal list: %v %s", err, wout)
	}
	if r := wl.Requests[0]; r.Gen != 7 || r.State != "pending" || r.Source != published || r.Requester != "pip-test" {
		t.Fatalf("request %+v, published %s", r, published)
	}
	if code, iout, ierr := runCLI("inspect", "--json", published); code != 0 || !strings.Contains(iout, `"format": "safetensors"`) {
		t.Fatalf("inspect the published generation: %d %s %s", code, iout, ierr)
	}
}
