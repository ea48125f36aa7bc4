package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainerModuleInstalls: python/ is an installable project. pip
// installs it (offline: --no-index, with the system's setuptools) into a
// target directory; the installed module — not the source tree's —
// publishes a generation and requests its snapshot, and snapd reads both:
// the request in the WAL, the checkpoint file.
func TestTrainerModuleInstalls(t *testing.T) {
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-m", "pip", "--version").CombinedOutput(); err != nil {
		t.Skipf("no pip for %s (apt-get install python3-pip): %v %s", py, err, out)
	}
	if err := exec.Command(py, "-c", "import setuptools").Run(); err != nil {
		t.Skipf("no setuptools for %s (apt-get install python3-setuptools): %v", py, err)
	}
	tmp := t.TempDir()
	// Build from a copy: an in-tree build leaves build/ and *.egg-info.
	src := filepath.Join(tmp, "src")
	os.Mkdir(src, 0o755)
	for _, n := range []string{"pyproject.toml", "README.md", "snapd_trainer.py"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "python", n))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(src, n), b, 0o644)
	}
	site := filepath.Join(tmp, "site")
	cmd := exec.Command(py, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-cache-dir",
		"--disable-pip-version-check", "--quiet", "--target", site, src)
	cmd.Env = append(os.Environ(), "PIP_ROOT_USER_ACTION=ignore", "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(site, "snapd_trainer-0.1.0.dist-info", "METADATA")); err != nil {
		t.Fatalf("no installed metadata: %v", err)
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
	run.Env = append(os.Environ(), "PYTHONPATH="+site, "PYTHONDONTWRITEBYTECODE=1")
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
