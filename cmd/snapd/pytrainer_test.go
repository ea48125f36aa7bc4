package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/wal"
)

// trainerPython returns Debian's /usr/bin/python3 (else python3 on PATH)
// if it is Python 3.8 or newer, or skips the test naming why.
func trainerPython(t *testing.T) string {
	t.Helper()
	var why []string
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		out, err := exec.Command(py, "-c", "import sys; assert sys.version_info >= (3, 8), sys.version").CombinedOutput()
		if err == nil {
			return py
		}
		why = append(why, fmt.Sprintf("%s: %v %s", py, err, strings.TrimSpace(string(out))))
	}
	t.Skipf("no Python 3.8+ for the trainer helper: %s", strings.Join(why, "; "))
	return ""
}

// walRequests returns "gen:source" of every request in the WAL of
// stateDir, in log order, as snapd's own reader parses them.
func walRequests(t *testing.T, stateDir string) []string {
	t.Helper()
	entries, err := wal.List(filepath.Join(stateDir, "wal"), func(ce *wal.CorruptError) { t.Errorf("corrupt WAL line: %v", ce) })
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, fmt.Sprintf("%d:%s", e.Gen, e.Source))
	}
	return out
}

// TestPythonTrainerUnit runs python/tests (request_snapshot's on_failure
// check against hand-written outcome lines, the Hugging Face and
// Lightning callbacks driven as those libraries call their hooks), then
// checks with wal.List that the callbacks appended the right requests.
func TestPythonTrainerUnit(t *testing.T) {
	py := trainerPython(t)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Guard)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-v", "-s", filepath.Join("..", "..", "python", "tests"))
	cmd.Env = append(os.Environ(), "SNAPD_PYTEST_OUT="+out, "PYTHONDONTWRITEBYTECODE=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python unittest: %v\n%s", err, b)
	}
	hf := filepath.Join(out, "hf", "out")
	want := map[string][]string{
		"hf": {"10:" + filepath.Join(hf, "checkpoint-10"), "20:" + filepath.Join(hf, "checkpoint-20")},
	}
	ck := func(name, f string) string { return filepath.Join(out, "lightning", name, "checkpoints", f) }
	for _, name := range []string{"private", "public", "linked"} {
		want["lightning/"+name] = []string{"5:" + ck(name, "epoch=0-step=5.ckpt"), "10:" + ck(name, "epoch=0-step=10.ckpt"), "15:" + ck(name, "epoch=1-step=15.ckpt")}
	}
	want["lightning/lastonly"] = []string{"5:" + ck("lastonly", "last.ckpt"), "10:" + ck("lastonly", "last.ckpt"), "15:" + ck("lastonly", "last.ckpt")}
	for dir, w := range want {
		state, err := filepath.EvalSymlinks(filepath.Join(out, dir, "state"))
		if err != nil {
			t.Fatal(err)
		}
		got := walRequests(t, state)
		real := make([]string, len(w))
		for i, s := range w {
			gen, p, _ := strings.Cut(s, ":")
			if r, err := filepath.EvalSymlinks(p); err == nil {
				p = r
			}
			real[i] = gen + ":" + p
		}
		if strings.Join(got, " ") != strings.Join(real, " ") {
			t.Errorf("%s: WAL requests\n got %v\nwant %v", dir, got, real)
		}
	}
	// The callbacks' metadata reached the request lines, as snapd parses
	// them (step, epoch and the newest logged values).
	hfEntries, err := wal.List(filepath.Join(out, "hf", "state", "wal"), nil)
	if err != nil || len(hfEntries) != 2 {
		t.Fatalf("hf WAL: %d entries, %v", len(hfEntries), err)
	}
	if got, want := string(hfEntries[1].Meta.JSON()), `{"epoch":2,"eval_loss":0.5,"eval_runtime":1.25,"grad_norm":2,"learning_rate":0.0001,"loss":0.05,"step":20}`; got != want {
		t.Errorf("hf gen 20 meta %s, want %s", got, want)
	}
	if _, err := os.Stat(filepath.Join(out, "lightning-rank1", "state", "wal")); err == nil {
		if got := walRequests(t, filepath.Join(out, "lightning-rank1", "state")); len(got) != 0 {
			t.Errorf("rank 1 requested: %v", got)
		}
	}
}

// apiLoop uses the trainer-side Python API against a running daemon:
// generation 1 (a torch state dict) lands and is pushed, generation 2 (not
// a checkpoint) fails, and a third request with on_failure="raise" is
// refused once because generation 2 failed; generations() and load()
// report and restore them.
const apiLoop = `
import os, sys, warnings, torch
sys.path.insert(0, sys.argv[1])
import snapd_trainer as st
state = sys.argv[2]
gens = os.path.join(state, "gens")
torch.manual_seed(0)
sd = {"layer.weight": torch.randn(4, 3), "layer.bias": torch.randn(4), "steps": torch.arange(5, dtype=torch.int64)}
log = st.RequestLog(os.path.join(state, "wal"), requester="py:api-test")
st.request_snapshot(1, st.publish_generation(gens, 1, lambda f: torch.save(sd, f), suffix=".pt"), log=log,
                    meta={"step": 1, "loss": 0.5, "lr": 3e-4, "opt": "adamw"})
st.request_snapshot(2, st.publish_generation(gens, 2, b"garbage garbage garbage", suffix=".bin"), log=log)
s = st.wait(1, pushed=True, state_dir=state)
assert s.state == "pushed" and s.gen == 1 and s.source.endswith("gen-000001.pt"), s
try:
    st.wait(2, state_dir=state)
    raise SystemExit("wait(2) returned")
except st.SnapshotFailed as e:
    assert e.gen == 2 and "unknown format" in e.reason, (e.gen, e.reason)
assert st.status(1, state_dir=state).state == "done"
assert st.status(1, state_dir=state, pushed=True).state == "pushed"
s2 = st.status(2, state_dir=state)
assert s2.state == "failed" and "unknown format" in s2.message, s2
assert st.status(9, state_dir=state).state == "pending"
try:
    st.wait(9, timeout=0.01, state_dir=state)
    raise SystemExit("wait(9) returned")
except TimeoutError as e:
    assert "timed out" in str(e), e
p3 = st.publish_generation(gens, 3, lambda f: torch.save({k: v * 2 for k, v in sd.items()}, f), suffix=".pt")
try:
    st.request_snapshot(3, p3, log=log, on_failure="raise")
    raise SystemExit("request_snapshot(3) did not raise")
except st.SnapshotFailed as e:
    assert e.gen == 2 and "unknown format" in e.reason, (e.gen, e.reason)
assert [g["gen"] for g in st.generations(state)] == [1, 2], st.generations(state)
with warnings.catch_warnings():
    warnings.simplefilter("error")
    st.request_snapshot(3, p3, log=log, on_failure="raise", meta={"step": 3, "loss": torch.tensor(0.25)})  # generation 2 was reported once
assert st.wait(3, state_dir=state).state == "done"
gl = st.generations(state)
assert [(g["gen"], g["state"], g["requests"]) for g in gl] == [(1, "done", 1), (2, "failed", 1), (3, "done", 1)], gl
assert "unknown format" in gl[1]["message"] and gl[0]["requester"] == "py:api-test", gl
assert [g["meta"] for g in gl] == [{"step": 1, "loss": 0.5, "lr": 0.0003, "opt": "adamw"}, {}, {"step": 3, "loss": 0.25}], gl
for gen, want in ((1, sd), (3, {k: v * 2 for k, v in sd.items()})):
    got = st.load(gen, state_dir=state)
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
try:
    st.load(2, state_dir=state)
    raise SystemExit("load(2) returned")
except st.SnapdError as e:
    assert e.exit_code == 2 or e.exit_code == 1, e
# A training checkpoint: AdamW's state holds Python floats (lr, betas, eps),
# which torch 1.13's weights_only unpickler refuses; load() restores it.
model = torch.nn.Linear(3, 2)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
model(torch.randn(5, 3)).sum().backward()
opt.step()
ck = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 4, "tag": b"run-a"}
st.request_snapshot(4, st.publish_generation(gens, 4, lambda f: torch.save(ck, f), suffix=".pt"), log=log)
assert st.wait(4, state_dir=state).state == "done"
got = st.load(4, state_dir=state)
def same(a, b, where):
    if isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(b, dict):
        assert sorted(a) == sorted(b), (where, sorted(a), sorted(b))
        for k in b:
            same(a[k], b[k], "%s.%s" % (where, k))
    elif isinstance(b, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, "%s[%d]" % (where, i))
    else:
        assert type(a) == type(b) and a == b, (where, a, b)
same(got, ck, "gen4")
assert got["optimizer"]["param_groups"][0]["lr"] == 1e-3 and got["tag"] == b"run-a"
# A pickle holding a class of the training code is carried verbatim; load()
# refuses to resolve it (nothing of it runs) unless trusted=True.
marker = os.path.join(state, "..", "setstate-ran")
class Hook:
    def __setstate__(self, s):
        open(marker, "w").close()
        self.__dict__.update(s)
h = Hook(); h.x = 1
st.request_snapshot(5, st.publish_generation(gens, 5, lambda f: torch.save({"w": torch.ones(2), "hook": h}, f), suffix=".pt"), log=log)
assert st.wait(5, state_dir=state).state == "done"
try:
    st.load(5, state_dir=state)
    raise SystemExit("load(5) returned")
except st.SnapdError as e:
    assert "__main__.Hook" in str(e) and "trusted=True" in str(e), e
assert not os.path.exists(marker), "a refused class ran"
t = st.load(5, state_dir=state, trusted=True)
assert t["hook"].x == 1 and torch.equal(t["w"], torch.ones(2)) and os.path.exists(marker)
# A Trainer's checkpoint directory: load() says it is one and names
# checkout(), which restores the files byte for byte.
import shutil, filecmp
fixture = os.environ["SNAPD_HF_FIXTURE"]
st.request_snapshot(6, st.publish_generation_dir(gens, 6, lambda d: [shutil.copy(os.path.join(fixture, f), d) for f in os.listdir(fixture)]), log=log)
assert st.wait(6, state_dir=state).state == "done"
try:
    st.load(6, state_dir=state)
    raise SystemExit("load(6) returned")
except st.SnapdError as e:
    assert "checkpoint directory" in str(e) and "trainer_state.json" in str(e) and "checkout(6" in str(e), e
ck = st.checkout(6, os.path.join(state, "..", "ck-6") + os.sep, state_dir=state)
assert sorted(os.listdir(ck)) == sorted(os.listdir(fixture)), os.listdir(ck)
for f in os.listdir(fixture):
    assert filecmp.cmp(os.path.join(ck, f), os.path.join(fixture, f), shallow=False), f
one = st.checkout(4, os.path.join(state, "..", "g4.wtxt"), state_dir=state)
assert one.endswith("g4.wtxt") and open(one, "rb").read(5) == b"WTXT "
print("ok")
`

// TestPythonAPIEndToEnd: the Python API (wait, status, generations, load,
// request_snapshot's on_failure) against a real daemon, real git and a
// real remote, through the snapd binary ($SNAPD_BIN), with torch.
func TestPythonAPIEndToEnd(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	bin := buildSnapd(t)
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := writeConfig(t, dir, fmt.Sprintf("git: {remote: %s}\n", remote.URL))
	startDaemon(t, "--state-dir", state, "--config", cfg, "--metrics-addr", "off")
	loop := filepath.Join(dir, "api.py")
	os.WriteFile(loop, []byte(apiLoop), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Guard)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, loop, filepath.Join("..", "..", "python"), state)
	cmd.Env = append(os.Environ(), "SNAPD_BIN="+bin, "PYTHONDONTWRITEBYTECODE=1", "SNAPD_HF_FIXTURE="+trainerFixture)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "ok\n") {
		t.Fatalf("python API loop: %v\n%s", err, out)
	}
	if got := strings.Fields(gittest.Git(t, remote.Dir, "tag", "--list", "gen-*")); len(got) == 0 || got[0] != "gen-000001" {
		t.Fatalf("remote tags: %v", got)
	}
}
