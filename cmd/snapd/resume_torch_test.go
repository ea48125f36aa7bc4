package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/pipeline"
)

// resumeLoop is a PyTorch training loop with its own resumable
// checkpoints. "first" trains steps 1..3, publishing each to snapd, then
// "crashes"; "resume" loads step 2's checkpoint and trains steps 3 and 4
// again, declaring the resume on its first request. The resumed run
// publishes 3 again into the same store: replace=True moves the first
// run's gen-000003.pt aside once snapd is done with it.
const resumeLoop = `
import os, sys, torch
sys.path.insert(0, sys.argv[1])
import snapd_trainer
state, ckpts, phase = sys.argv[2], sys.argv[3], sys.argv[4]
torch.manual_seed(0 if phase == "first" else 1)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
def train():
    opt.zero_grad()
    model(torch.randn(32, 8)).pow(2).mean().backward()
    opt.step()
log = snapd_trainer.RequestLog(os.path.join(state, "wal"), requester="py:resume-test")
if phase == "first":
    steps, resumed = [1, 2, 3], None
else:
    ck = torch.load(os.path.join(ckpts, "step-2.pt"))
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    steps, resumed = [3, 4], ck["step"]  # the first run's 3 is done (the test waited): replaceable
for step in steps:
    train()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, os.path.join(ckpts, "step-%d.pt" % step))
    path = snapd_trainer.publish_generation(os.path.join(state, "gens"), step, lambda f: torch.save(model.state_dict(), f),
                                            suffix=".pt", replace=resumed is not None)
    snapd_trainer.request_snapshot(step, path, log=log, resumed_from=resumed if step == steps[0] else None)
log.close()
`

// TestTorchResumedRun: a torch loop saves generations 1..3, crashes,
// resumes from generation 2's checkpoint (resumed_from=2) and continues
// with 3 and 4. The daemon chains the new 3 to 2, verify-repo passes with
// public keys only, and the history shows the abandoned 3.
func TestTorchResumedRun(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	dir := t.TempDir()
	state, ckpts := filepath.Join(dir, "state"), filepath.Join(dir, "ckpts")
	os.MkdirAll(ckpts, 0o755)
	loop := filepath.Join(dir, "loop.py")
	os.WriteFile(loop, []byte(resumeLoop), 0o644)
	sigs := make(chan os.Signal, 1)
	o := &runOptions{stateDir: state, metricsAddr: "off", signals: sigs,
		changed: func(n string) bool { return n == "state-dir" || n == "metrics-addr" }}
	done := make(chan error, 1)
	go func() { done <- runRun(context.Background(), newEnv(io.Discard, io.Discard), o) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			sigs <- syscall.SIGTERM
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	defer stop()
	scripts, _ := filepath.Abs("../../scripts")
	for _, phase := range []string{"first", "resume"} {
		if out, err := exec.Command(py, loop, scripts, state, ckpts, phase).CombinedOutput(); err != nil {
			t.Fatalf("trainer %s: %v\n%s", phase, err, out)
		}
		if phase == "first" {
			waitStatus(t, state, "gen 3 done", func(s *pipeline.Status) bool { return s.Chain.Gen == 3 && s.Done == 3 })
		}
	}
	st := waitStatus(t, state, "resumed gen 4 done", func(s *pipeline.Status) bool { return s.Chain.Gen == 4 && s.Done == 5 })
	stop()
	if rs := st.Chain.Resume; rs == nil || rs.From != 2 || rs.AtGen != 3 || rs.AbandonedLast != 3 || len(st.Failed) != 0 {
		t.Fatalf("status: resume %+v, failed %+v", st.Chain.Resume, st.Failed)
	}
	repo := filepath.Join(state, "repo")
	pub := filepath.Join(state, "keys", "sign_ed25519.pub")
	mustRun(t, "verify-repo", repo, "--pubkey", pub)
	var rep struct {
		OK          bool `json:"ok"`
		Generations []struct {
			Gen       json.Number `json:"gen"`
			Tag       string      `json:"tag"`
			Chain     string      `json:"chain"`
			Abandoned bool        `json:"abandoned"`
			Resume    *struct {
				From      string   `json:"from"`
				Abandoned []string `json:"abandoned"`
			} `json:"resume"`
		} `json:"generations"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "verify-repo", repo, "--pubkey", pub, "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range rep.Generations {
		s := g.Gen.String() + ":" + g.Chain
		if g.Abandoned {
			s += ":abandoned"
		}
		if g.Resume != nil {
			s += fmt.Sprintf(":resume-from-%s-abandons-%v", g.Resume.From, g.Resume.Abandoned)
		}
		got = append(got, s)
	}
	want := "1:first 2:continues 3:continues:abandoned 2:resumed:resume-from-000002-abandons-[000003] 3:continues 4:continues"
	if !rep.OK || strings.Join(got, " ") != want {
		t.Fatalf("verify-repo: ok=%v\n got %s\nwant %s", rep.OK, strings.Join(got, " "), want)
	}
	log := gittest.Git(t, repo, "log", "--format=%s %D", "snapshots")
	for _, l := range []string{"snapd: generation 000003 tag: gen-000003\n", "snapd: resume from generation 000002 (abandons 000003..000003) \n", "snapd: generation 000003 tag: gen-000003-r1\n"} {
		if !strings.Contains(log, l) {
			t.Fatalf("history lacks %q:\n%s", l, log)
		}
	}
}
