package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// trainerFixture is the Hugging Face Trainer checkpoint directory of the
// shared fixtures (README.md beside it).
const trainerFixture = "/work/shared/fixtures/hf-trainer/checkpoint-3"

// TestTrainerDirectory: a Trainer checkpoint-N/ directory (pickles with
// numpy globals and a dataclass among its files) converts to one WTXT,
// the same bytes twice, and back to a directory whose every file has the
// SHA-256 checkpoint-3.expected.json lists; --strict refuses it naming
// the file and the key path; when Debian's torch is there, it loads the
// restored optimizer.pt and rng_state.pth.
func TestTrainerDirectory(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(trainerFixture); err != nil {
		t.Skip("no Trainer fixture:", err)
	}
	var exp struct {
		Files map[string]string `json:"files"`
	}
	b, err := os.ReadFile(trainerFixture + ".expected.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	w1, w2, out := filepath.Join(dir, "a.wtxt"), filepath.Join(dir, "b.wtxt"), filepath.Join(dir, "out")+"/"
	for _, w := range []string{w1, w2} {
		if code, _, stderr := runCLI("convert", "--ts", "2026-01-02T03:04:05Z", trainerFixture, w); code != 0 {
			t.Fatalf("convert: %d %s", code, stderr)
		}
	}
	a, _ := os.ReadFile(w1)
	c, _ := os.ReadFile(w2)
	if !bytes.Equal(a, c) {
		t.Fatal("two conversions differ")
	}
	if code, _, stderr := runCLI("convert", w1, out); code != 0 {
		t.Fatalf("convert back: %d %s", code, stderr)
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(exp.Files) {
		t.Errorf("%d files restored, want %d", len(ents), len(exp.Files))
	}
	for name, want := range exp.Files {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != want {
			t.Errorf("%s: restored file differs", name)
		}
	}
	code, _, stderr := runCLI("convert", "--strict", trainerFixture, filepath.Join(dir, "s.wtxt"))
	if code == 0 || !strings.Contains(stderr, `rng_state.pth: data.pkl: key path "numpy.1": global numpy._core.multiarray._reconstruct`) ||
		strings.Contains(stderr, "offset") || strings.Count(stderr, "torch:") != 1 {
		t.Errorf("--strict: %d %s", code, stderr)
	}
	code, stdout, _ := runCLI("inspect", filepath.Join(trainerFixture, "training_args.bin"))
	if code != 0 || !strings.Contains(stdout, `torch.unknown=[[".","transformers.training_args.TrainingArguments"]]`) {
		t.Errorf("inspect: %d %s", code, stdout)
	}
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no", py)
	}
	script := `import sys, torch
o = torch.load(sys.argv[1] + "optimizer.pt")
assert len(o["state"]) == 5, o.keys()
try:
    import numpy._core
except ImportError:
    print("numpy without numpy._core: rng_state.pth checked byte for byte only")
    sys.exit(0)
r = torch.load(sys.argv[1] + "rng_state.pth", weights_only=False)
assert set(r) == {"python", "numpy", "cpu"}, r.keys()
`
	cmd := exec.Command(py, "-c", script, out)
	msg, err := cmd.CombinedOutput()
	if err != nil {
		if strings.Contains(string(msg), "No module named 'torch'") {
			t.Skip("no torch")
		}
		t.Fatalf("torch.load: %v\n%s", err, msg)
	}
	t.Logf("%s", msg)
}
