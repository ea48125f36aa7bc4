package main

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/snapd-ml/snapd/pipeline"
)

// torchPython returns a Python interpreter that can import torch, or skips
// the test naming why.
func torchPython(t *testing.T) string {
	t.Helper()
	py, why := shared.torchPython()
	if py == "" {
		t.Skipf("no PyTorch (apt-get install python3-torch): %s", why)
	}
	return py
}

// torchGen writes checkpoints with the real torch.save: a state_dict with
// tied weights, views of one storage (rows at an offset, transposed,
// strided, expanded with stride 0) and every dtype, a Parameter, a
// training checkpoint (model + Adam state + plain leaves), and legacy
// (non-zip) copies.
const torchGen = `
import sys, os, torch
torch.manual_seed(0)
out = sys.argv[1]
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.fc = torch.nn.Linear(8, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.head = torch.nn.Linear(8, 16, bias=False)
        self.head.weight = self.emb.weight
    def forward(self, x):
        return self.head(self.bn(self.fc(self.emb(x))))
m = M()
torch.save(m.state_dict(), os.path.join(out, "sd.pt"))
torch.save(m.state_dict(), os.path.join(out, "sd_legacy.pt"), _use_new_zipfile_serialization=False)
base = torch.randn(6, 10)
views = {
    "base": base, "rows": base[2:4], "t": base.t(), "strided": base[:, ::3],
    "expanded": torch.arange(3.0).expand(4, 3),
    "f16": torch.randn(3, 5).half(), "bf16": torch.randn(4, 3).bfloat16(), "f64": torch.randn(7).double(),
    "i8": torch.tensor([-128, 0, 127], dtype=torch.int8), "u8": torch.tensor([0, 255], dtype=torch.uint8),
    "i16": torch.tensor([-32768, 32767], dtype=torch.int16), "i32": torch.tensor([[1, -2, 3]], dtype=torch.int32),
    "i64": torch.tensor([-(2**63), 2**63 - 1]), "bool": torch.tensor([True, False, True]),
    "scalar": torch.tensor(3.25), "empty": torch.zeros(0, 4),
    "param": torch.nn.Parameter(torch.randn(2, 2)), "grad": torch.randn(3).requires_grad_(),
}
torch.save(views, os.path.join(out, "views.pt"))
torch.save(views, os.path.join(out, "views_legacy.pt"), _use_new_zipfile_serialization=False)
opt = torch.optim.Adam(m.parameters(), lr=1e-3)
for _ in range(2):
    opt.zero_grad()
    m(torch.randint(0, 16, (4,))).sum().backward()
    opt.step()
ckpt = {"model": m.state_dict(), "optimizer": opt.state_dict(), "step": 1234, "epoch": 3.5,
        "tag": "run-7", "flags": [True, None], "big": -(2**70), "pair": (1, "two", 3.0), "by_id": {7: "seven"}}
torch.save(ckpt, os.path.join(out, "ckpt.pt"))
`

// torchCheck loads each original and snapd's file (its arguments are
// pairs: original, snapd's file; one process for all of them, as importing
// torch costs seconds) with torch and compares: types, keys in order,
// dtypes, shapes, strides, storage offsets, requires_grad, values,
// OrderedDict _metadata, plain leaves, and ties (two tensors share a
// storage in one file exactly when they do in the other). snapd's file is
// loaded with weights_only=True whenever torch can load the original that
// way (torch 1.13's weights_only loader has no float opcode, so it cannot
// load any checkpoint holding a Python float). Each pair prints one line
// "ORIGINAL: same: ..." (after any note about weights_only); the first
// difference fails the process, naming the pair.
const torchCheck = `
import sys, torch
def check(orig, back):
    a = torch.load(orig, weights_only=False)
    try:
        torch.load(orig, weights_only=True)
        wo = True
    except Exception as e:
        wo = False
        print("%s: torch cannot load the original with weights_only=True:" % orig, str(e).split("error:")[-1].strip())
    b = torch.load(back, weights_only=wo)
    ta, tb = {}, {}
    def same(x, y, path):
        assert type(x) is type(y), (path, type(x), type(y))
        if isinstance(x, torch.Tensor):
            assert (x.dtype, x.shape, x.stride(), x.storage_offset(), x.requires_grad) == (y.dtype, y.shape, y.stride(), y.storage_offset(), y.requires_grad), path
            assert torch.equal(x, y), path
            ta[path], tb[path] = x, y
        elif isinstance(x, dict):
            assert list(x.keys()) == list(y.keys()), path
            assert getattr(x, "_metadata", None) == getattr(y, "_metadata", None), path
            for k in x:
                same(x[k], y[k], path + (k,))
        elif isinstance(x, (list, tuple)):
            assert len(x) == len(y), path
            for i, (p, q) in enumerate(zip(x, y)):
                same(p, q, path + (i,))
        else:
            assert x == y, (path, x, y)
    same(a, b, ())
    ptr = lambda t: t.storage().data_ptr()
    ties = 0
    for p in ta:
        for q in ta:
            if str(p) < str(q) and ta[p].numel() and ta[q].numel():
                tied = ptr(ta[p]) == ptr(ta[q])
                assert tied == (ptr(tb[p]) == ptr(tb[q])), (p, q, tied)
                ties += tied
    print("%s: same: %d tensors, %d tied pairs, weights_only=%s" % (orig, len(ta), ties, wo))
if len(sys.argv) < 3 or len(sys.argv) % 2 != 1:
    sys.exit("usage: check.py ORIGINAL SNAPD_FILE [ORIGINAL SNAPD_FILE ...]")
for i in range(1, len(sys.argv), 2):
    try:
        check(sys.argv[i], sys.argv[i + 1])
    except AssertionError:
        print("%s and %s differ:" % (sys.argv[i], sys.argv[i + 1]))
        raise
`

// TestTorchRoundTrip: checkpoints written by the real torch go
// .pt -> WTXT -> .pt through `snapd convert`; torch loads the result equal
// to the original, ties and views included, and .pt -> WTXT is a fixed
// point (the WTXT of the rewritten file is byte-identical).
func TestTorchRoundTrip(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	d := t.TempDir()
	gen := filepath.Join(d, "gen.py")
	check := filepath.Join(d, "check.py")
	os.WriteFile(gen, []byte(torchGen), 0o644)
	os.WriteFile(check, []byte(torchCheck), 0o644)
	if out, err := exec.Command(py, gen, d).CombinedOutput(); err != nil {
		t.Fatalf("torch.save: %v\n%s", err, out)
	}
	// A snapshot from another format becomes a flat OrderedDict that
	// torch loads with weights_only=True, and comes back with the same
	// arrays.
	t.Run("from-safetensors", func(t *testing.T) {
		pt := filepath.Join(d, "v2.pt")
		back := filepath.Join(d, "v2.safetensors")
		mustRun(t, "convert", filepath.Join(vectors, "v2-ext.safetensors"), pt)
		out, err := exec.Command(py, "-c", "import sys, torch; d = torch.load(sys.argv[1], weights_only=True); print(type(d).__name__, len(d))", pt).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "OrderedDict ") {
			t.Fatalf("torch.load: %v\n%s", err, out)
		}
		mustRun(t, "convert", pt, back)
		mustRun(t, "diff", filepath.Join(vectors, "v2-ext.safetensors"), back)
	})
	names := []string{"sd", "sd_legacy", "views", "views_legacy", "ckpt"}
	var pairs []string // original, snapd's file: compared by one torch process below
	for _, name := range names {
		in := filepath.Join(d, name+".pt")
		back := filepath.Join(d, name+".back.pt")
		pairs = append(pairs, in, back)
		t.Run(name, func(t *testing.T) {
			w1 := filepath.Join(d, name+".wtxt")
			w2 := filepath.Join(d, name+".2.wtxt")
			mustRun(t, "convert", in, w1, "--ts", "2026-01-01T00:00:00Z")
			mustRun(t, "convert", w1, back)
			mustRun(t, "convert", back, w2, "--ts", "2026-01-01T00:00:00Z")
			x, _ := os.ReadFile(w1)
			y, _ := os.ReadFile(w2)
			if !bytes.Equal(x, y) {
				t.Fatal("WTXT of the rewritten .pt differs from the WTXT of the original")
			}
		})
	}
	if t.Failed() {
		return // a conversion failed: nothing to load
	}
	out, err := exec.Command(py, append([]string{check}, pairs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("torch comparison failed: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
	for i, name := range names {
		_, line, ok := strings.Cut(string(out), pairs[2*i]+": same: ")
		line, _, _ = strings.Cut(line, "\n")
		if !ok {
			t.Fatalf("%s: no comparison result:\n%s", name, out)
		}
		if strings.HasPrefix(name, "sd") || strings.HasPrefix(name, "views") {
			if !strings.Contains(line, "weights_only=True") || strings.Contains(line, " 0 tied") {
				t.Fatalf("%s: expected a weights_only load with ties: %s", name, line)
			}
		}
	}
}

// trainerLoop is the three-line PyTorch loop of scripts/snapd_trainer.py:
// torch.save into a published generation, then request_snapshot.
const trainerLoop = `
import os, sys, torch
sys.path.insert(0, sys.argv[1])
import snapd_trainer
state = sys.argv[2]
log = snapd_trainer.RequestLog(os.path.join(state, "wal"))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in (1, 2):
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
    path = snapd_trainer.publish_generation(os.path.join(state, "gens"), step,
                                            lambda f: torch.save(model.state_dict(), f), suffix=".pt")
    snapd_trainer.request_snapshot(step, path, log=log)
log.close()
`

// TestTrainerTorchLoop: a PyTorch training loop publishes .pt generations
// with scripts/snapd_trainer.py; the daemon (snapd run) snapshots them,
// and the WTXT of generation 2 converts back to a .pt that torch loads
// (weights_only=True) equal to what the trainer saved.
func TestTrainerTorchLoop(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	loop := filepath.Join(dir, "loop.py")
	os.WriteFile(loop, []byte(trainerLoop), 0o644)
	sigs := make(chan os.Signal, 1)
	o := &runOptions{stateDir: state, metricsAddr: "off", signals: sigs,
		changed: func(n string) bool { return n == "state-dir" || n == "metrics-addr" }}
	done := make(chan error, 1)
	go func() { done <- runRun(context.Background(), newEnv(io.Discard, io.Discard), o) }()
	scripts, _ := filepath.Abs("../../scripts")
	if out, err := exec.Command(py, loop, scripts, state).CombinedOutput(); err != nil {
		sigs <- syscall.SIGTERM
		<-done
		t.Fatalf("trainer loop: %v\n%s", err, out)
	}
	waitStatus(t, state, "gen 2 done", func(s *pipeline.Status) bool { return s.Chain.Gen == 2 && s.Done == 2 })
	sigs <- syscall.SIGTERM
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(dir, "back.pt")
	mustRun(t, "convert", filepath.Join(state, "ring/gen-000002.wtxt"), back)
	check := filepath.Join(dir, "check.py")
	os.WriteFile(check, []byte(torchCheck), 0o644)
	out, err := exec.Command(py, check, filepath.Join(state, "gens/gen-000002.pt"), back).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "weights_only=True") {
		t.Fatalf("torch comparison: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

// TestTorchHostileCLI: a .pt whose pickle would run os.system is carried
// verbatim, and with --strict fails with exit 1 and a one-line error naming the global; the command never runs
// and no output file is left. A torch checkpoint named .bin is recognised
// by its magic bytes.
func TestTorchHostileCLI(t *testing.T) {
	d := t.TempDir()
	marker := filepath.Join(d, "PWNED")
	cmd := "touch " + marker
	pkl := []byte("\x80\x02cos\nsystem\nX")
	pkl = append(pkl, byte(len(cmd)), 0, 0, 0)
	pkl = append(pkl, cmd...)
	pkl = append(pkl, "\x85R."...)
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	for name, data := range map[string][]byte{"evil/data.pkl": pkl, "evil/version": []byte("3\n")} {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		w.Write(data)
	}
	zw.Close()
	in := filepath.Join(d, "evil.pt")
	os.WriteFile(in, zb.Bytes(), 0o644)
	out := filepath.Join(d, "out.wtxt")
	// Without --strict it is carried verbatim, never run.
	if code, _, errs := snapd(t, nil, "convert", in, out); code != 0 {
		t.Fatalf("exit %d: %q", code, errs)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the pickle's command ran")
	}
	os.Remove(out)
	code, _, errs := snapd(t, nil, "convert", "--strict", in, out)
	if code != exitInvalid || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, "global os.system is not allowed") {
		t.Fatalf("exit %d: %q", code, errs)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the pickle's command ran")
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a failed conversion left its output")
	}
	t.Logf("%s", strings.TrimSpace(errs))

	bin := filepath.Join(d, "pytorch_model.bin")
	b, err := os.ReadFile(filepath.Join(fixtures, "torch/state_dict.pt"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bin, b, 0o644)
	if o := mustRun(t, "inspect", bin); !strings.Contains(o, "emb.weight") {
		t.Fatalf("inspect of a torch .bin:\n%s", o)
	}
}
