package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/pipeline"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestMetaThroughDaemon: metadata attached by `snapd request-snapshot
// --meta/--meta-json` goes through a real daemon into the generation: wal
// list, status, the commit trailer (git log), snapd log --json and diff
// show it; verify-repo passes and checks the trailer; the checked-out
// checkpoint is the same with and without it; a WTXT whose metadata was
// rewritten (base64, parity and all) fails verify.
func TestMetaThroughDaemon(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	d := startDaemon(t, "--state-dir", state, "--metrics-addr", "off")
	publish := func(gen uint64, meta ...string) {
		requestTiny(t, filepath.Join(dir, "scratch"), gen) // publishes into a scratch store; its WAL is unused
		src := filepath.Join(dir, "scratch", pipeline.GensDir, fmt.Sprintf("gen-%06d.safetensors", gen))
		args := append([]string{"request-snapshot", "--state-dir", state, "--gen", fmt.Sprint(gen), "--source", src}, meta...)
		mustRun(t, args...)
	}
	publish(1, "--meta", "step=1000", "--meta", "loss=0.52", "--meta", "opt=adamw")
	publish(2, "--meta-json", `{"step": 1200, "loss": 0.41, "lr": 3e-4}`, "--meta", "note=a b")
	publish(3)
	waitStatus(t, state, "gen 3 done", func(s *pipeline.Status) bool { return s.Chain.Gen == 3 && s.Done == 3 })
	d.stop(t)

	// wal list and status.
	out := mustRun(t, "wal", "list", "--state-dir", state)
	if !strings.Contains(out, "META") || !strings.Contains(out, `loss=0.41 lr=0.0003 note="a b" step=1200`) {
		t.Fatalf("wal list:\n%s", out)
	}
	var wl struct {
		Requests []struct {
			Gen  uint64         `json:"gen"`
			Meta map[string]any `json:"meta"`
		} `json:"requests"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "wal", "list", "--json", "--state-dir", state)), &wl); err != nil || len(wl.Requests) != 3 ||
		wl.Requests[0].Meta["step"] != float64(1000) || wl.Requests[1].Meta["note"] != "a b" || wl.Requests[2].Meta != nil {
		t.Fatalf("wal list --json: %+v %v", wl, err)
	}
	// The status shows the chain head's: gen 3 has none.
	if out := mustRun(t, "status", "--state-dir", state); strings.Contains(out, "  meta ") {
		t.Fatalf("status of a generation without metadata:\n%s", out)
	}

	// The commit trailer, as git reads it.
	repo := filepath.Join(state, pipeline.RepoDir)
	trailers := gittest.Git(t, repo, "log", "--format=%(trailers:key=Snapd-Meta,valueonly)%x00", "snapshots")
	want := []string{"", `loss=0.41 lr=0.0003 note="a b" step=1200`, "loss=0.52 opt=\"adamw\" step=1000"}
	var got []string
	for _, s := range strings.Split(trailers, "\x00") {
		if s = strings.TrimSpace(s); s != "" || len(got) < 3 {
			got = append(got, s)
		}
	}
	if len(got) < 3 || strings.Join(got[:3], "|") != strings.Join(want, "|") {
		t.Fatalf("git log trailers %q, want %q", got, want)
	}

	// snapd log --json reads them back.
	var lg struct {
		Generations []struct {
			Kind string         `json:"kind"`
			Gen  uint64         `json:"gen"`
			Meta map[string]any `json:"meta"`
		} `json:"generations"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "log", "--json", "--repo", repo)), &lg); err != nil || len(lg.Generations) != 3 {
		t.Fatalf("log --json: %+v %v", lg, err)
	}
	if g := lg.Generations[1]; g.Gen != 2 || g.Kind != "generation" || g.Meta["loss"] != 0.41 || g.Meta["lr"] != 0.0003 || g.Meta["note"] != "a b" {
		t.Fatalf("log gen 2: %+v", g)
	}
	if g := lg.Generations[0]; g.Gen != 3 || len(g.Meta) != 0 {
		t.Fatalf("log gen 3: %+v", g)
	}
	if out := mustRun(t, "log", "--repo", repo, "-n", "2"); !strings.Contains(out, "000002") || strings.Contains(out, "000001") || !strings.Contains(out, "step=1200") {
		t.Fatalf("log -n 2:\n%s", out)
	}

	// verify-repo passes (and checks every trailer against the WTXT).
	pub, err := os.ReadFile(filepath.Join(state, "keys", "sign_ed25519.pub"))
	if err != nil {
		t.Fatal(err)
	}
	signers := gittest.WriteFile(t, dir, "allowed_signers", []byte("snapd@localhost "+string(pub)))
	if code, out, errs := snapd(t, nil, "verify-repo", repo, "--pubkey", signers); code != 0 {
		t.Fatalf("verify-repo: %d\n%s%s", code, out, errs)
	}

	// diff lists the metadata change.
	ring := func(g int) string { return filepath.Join(state, "ring", fmt.Sprintf("gen-%06d.wtxt", g)) }
	code, out, errs := snapd(t, nil, "diff", ring(1), ring(2))
	for _, w := range []string{"meta: loss 0.52 -> 0.41\n", "meta: lr added 0.0003\n", `meta: note added "a b"` + "\n", "meta: opt removed (was \"adamw\")\n", "meta: step 1000 -> 1200\n"} {
		if code != 1 || !strings.Contains(out, w) {
			t.Fatalf("diff: exit %d, lacks %q\n%s%s", code, w, out, errs)
		}
	}

	// The checkpoint checked out is the one without metadata would give.
	for _, g := range []string{"2", "3"} {
		mustRun(t, "checkout", g, filepath.Join(dir, "out"+g+".safetensors"), "--repo", repo)
	}
	m2, _ := os.ReadFile(filepath.Join(dir, "out2.safetensors"))
	src2, _ := os.ReadFile(filepath.Join(dir, "scratch", pipeline.GensDir, "gen-000002.safetensors"))
	if !bytes.Equal(m2, src2) {
		t.Fatal("checkout of a generation with metadata differs from its source checkpoint")
	}

	// Rewriting the metadata inside the WTXT fails verify.
	orig, _ := os.ReadFile(ring(2))
	bad := rewriteAttrs(t, orig, `"loss":0.41`, `"loss":0.40`)
	os.WriteFile(filepath.Join(dir, "bad.wtxt"), bad, 0o644)
	if code, out, errs := snapd(t, nil, "verify", filepath.Join(dir, "bad.wtxt"), "--pubkey", signers); code != 1 || !strings.Contains(out+errs, snapshot.AttrsArrayName) {
		t.Fatalf("verify of rewritten metadata: exit %d\n%s%s", code, out, errs)
	}
}

// rewriteAttrs replaces old by new (same length) in the raw bytes of the
// attributes array of a WTXT, re-encoding the base64 line and its parity
// as a forger would: only the hashes can tell.
func rewriteAttrs(t *testing.T, wtxt []byte, old, new string) []byte {
	t.Helper()
	lines := strings.Split(string(wtxt), "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(l, "arr name="+snapshot.AttrsArrayName+" ") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(l, "ch ") {
			continue
		}
		if l == "endarr" {
			break
		}
		b64, _, ok := strings.Cut(l, " ")
		raw, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil || !bytes.Contains(raw, []byte(old)) {
			continue
		}
		enc := base64.StdEncoding.EncodeToString(bytes.Replace(raw, []byte(old), []byte(new), 1))
		var p byte
		for j := 0; j < len(enc); j++ {
			p ^= enc[j]
		}
		lines[i] = enc + " " + string("0123456789abcdef"[p&15])
		return []byte(strings.Join(lines, "\n"))
	}
	t.Fatalf("%q not found in the attributes array", old)
	return nil
}

// TestRankMetaRequest: --meta with --rank is written into the rank's
// request (the daemon stores it in that rank's part; the committer checks
// every rank gave the same: pipeline TestRankMetaReachesCommit), and wal
// list shows it.
func TestRankMetaRequest(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	src := filepath.Join(t.TempDir(), "rank-1.safetensors")
	if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, "request-snapshot", "--state-dir", state, "--gen", "5", "--source", src, "--rank", "1", "--world-size", "2", "--meta", "step=300")
	if !strings.Contains(out, `requested gen=5 rank=1 world_size=2 meta={"step":300} src=`) {
		t.Fatalf("request-snapshot:\n%s", out)
	}
	if out := mustRun(t, "wal", "list", "--state-dir", state); !strings.Contains(out, "step=300") {
		t.Fatalf("wal list:\n%s", out)
	}
}
