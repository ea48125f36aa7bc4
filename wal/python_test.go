package wal

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The trainer helper lives in scripts/ at the repository root.
var trainerScripts, _ = filepath.Abs(filepath.Join("..", "scripts"))

func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	if _, err := os.Stat(filepath.Join(trainerScripts, "snapd_trainer.py")); err != nil {
		t.Fatal(err)
	}
	return p
}

// Odd source paths the Python escaping must encode exactly like Go.
var pySources = []string{
	"/data/gens/gen-000001.safetensors",
	"/data/with space/gen 2.zt",
	"/data/ümlaut/100%/x\ty",
	"relative/path",
}

const pyProgram = `
import os, sys
sys.path.insert(0, sys.argv[1])
import snapd_trainer as st
state, sources = sys.argv[2], sys.argv[3].split("\x1f")
gens = os.path.join(state, "gens")
p = st.publish_generation(gens, 7, b"checkpoint-bytes", ".bin")
assert os.path.basename(p) == "gen-000007.bin", p
assert open(p, "rb").read() == b"checkpoint-bytes"
try:
    st.publish_generation(gens, 7, b"again", ".zt")
    raise SystemExit("republish accepted")
except FileExistsError:
    pass
p2 = st.publish_generation(gens, 8, lambda f: f.write(b"streamed"))
assert sorted(os.listdir(gens)) == ["gen-000007.bin", "gen-000008.safetensors"], os.listdir(gens)
log = st.RequestLog(os.path.join(state, "wal"), requester="py:test")
for i, src in enumerate(sources):
    log.append(i + 1, src, ts_ns=1700000000000000000 + i)
print("batch1", flush=True)
sys.stdin.readline()  # Go seals the segment meanwhile
for i, src in enumerate(sources):
    log.append(i + 11, src, ts_ns=1700000000000000000 + i)
st.request_snapshot(21, p2, state_dir=state, requester="py:oneshot", ts_ns=5)
try:
    log.append(1, "/x" * 3000)
    raise SystemExit("long line accepted")
except ValueError:
    pass
for bad in (0, st.MAX_GEN + 1, 2**63 - 1, 2**64):
    for call in (lambda: log.append(bad, "/x"), lambda: st.encode_request(bad, "/x", "py:test", 1)):
        try:
            call()
            raise SystemExit("gen %d accepted" % bad)
        except ValueError as e:
            assert "out of range 1..999999999999999999" in str(e), e
assert st.MAX_GEN == 999999999999999999
print("done", flush=True)
`

// The Python helper writes lines the Go reader parses, follows rotation,
// and publishes generations atomically.
func TestPythonHelper(t *testing.T) {
	py := python(t)
	state := t.TempDir()
	dir := filepath.Join(state, "wal")
	cmd := exec.Command(py, "-c", pyProgram, trainerScripts, state, strings.Join(pySources, "\x1f"))
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "batch1" {
		t.Fatalf("python: %q", sc.Text())
	}
	if err := rotate(dir, 1); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "go\n")
	if !sc.Scan() || sc.Text() != "done" {
		t.Fatalf("python: %q", sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	var corrupt []*CorruptError
	recs := readAll(t, dir, func(ce *CorruptError) { corrupt = append(corrupt, ce) })
	if len(corrupt) != 0 || len(recs) != 2*len(pySources)+1 {
		t.Fatalf("%d records, corrupt %v", len(recs), corrupt)
	}
	for i, rec := range recs[:2*len(pySources)] {
		k := i % len(pySources)
		want := Request{Gen: uint64(k + 1 + 10*(i/len(pySources))), Time: time.Unix(0, 1700000000000000000+int64(k)), Requester: "py:test", Source: pySources[k]}
		if rec.Gen != want.Gen || !rec.Time.Equal(want.Time) || rec.Requester != want.Requester || rec.Source != want.Source {
			t.Fatalf("record %d: %+v, want %+v", i, rec.Request, want)
		}
		// The bytes are exactly what Go writes.
		wantLine := mustLine(t, want)
		if rec.End.Offset-rec.Pos.Offset != int64(len(wantLine)) {
			t.Fatalf("record %d length differs from Go encoding", i)
		}
		if wantSeg := uint64(1 + i/len(pySources)); rec.Pos.Segment != wantSeg {
			t.Fatalf("record %d in segment %d, want %d (python did not follow the seal)", i, rec.Pos.Segment, wantSeg)
		}
	}
	last := recs[len(recs)-1]
	if last.Gen != 21 || last.Requester != "py:oneshot" || last.Source != filepath.Join(state, "gens", "gen-000008.safetensors") {
		t.Fatalf("request_snapshot record %+v", last.Request)
	}
	b, _ := os.ReadFile(filepath.Join(state, "gens", "gen-000008.safetensors"))
	if string(b) != "streamed" {
		t.Fatalf("published %q", b)
	}
}

const pyAppender = `
import sys
sys.path.insert(0, sys.argv[1])
import snapd_trainer as st
log = st.RequestLog(sys.argv[2], requester="p" + sys.argv[3])
pid = int(sys.argv[3])
for i in range(int(sys.argv[4])):
    log.append(pid * 1000000 + i + 1, "/gens/p%d/%d" % (pid, i))
`

// Python and Go processes append at once: every line is read exactly once.
func TestPythonAndGoConcurrentAppends(t *testing.T) {
	py := python(t)
	n := 2000
	if testing.Short() {
		n = 500
	}
	dir := filepath.Join(t.TempDir(), "wal")
	var cmds []*exec.Cmd
	for id := 0; id < 4; id++ {
		var cmd *exec.Cmd
		if id%2 == 0 {
			cmd = exec.Command(py, "-c", pyAppender, trainerScripts, dir, fmt.Sprint(id), fmt.Sprint(n))
			cmd.Stderr = os.Stderr
		} else {
			cmd = childCmd("append", "WAL_TEST_DIR="+dir, fmt.Sprintf("WAL_TEST_ID=%d", id), fmt.Sprintf("WAL_TEST_N=%d", n))
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	var corrupt []*CorruptError
	recs := readAll(t, dir, func(ce *CorruptError) { corrupt = append(corrupt, ce) })
	seen := map[uint64]int{}
	for _, r := range recs {
		seen[r.Gen]++
		id, i := r.Gen/1_000_000, r.Gen%1_000_000-1
		if r.Source != fmt.Sprintf("/gens/p%d/%d", id, i) {
			t.Fatalf("mixed record %+v", r.Request)
		}
	}
	if len(corrupt) != 0 || len(recs) != 4*n || len(seen) != 4*n {
		t.Fatalf("%d records, %d distinct, corrupt %v", len(recs), len(seen), corrupt)
	}
}
