package wal

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A request may name one rank's shard of a sharded generation.
func TestRankRequest(t *testing.T) {
	r := Request{Gen: 12, Time: time.Unix(1760000000, 0), Requester: "py:7", Source: "/gens/gen-000012/rank-3.safetensors", Rank: 3, WorldSize: 4}
	line, err := r.AppendLine(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(line), " by=py:7 rank=3 world_size=4 src=/gens/") {
		t.Fatalf("unexpected line %q", line)
	}
	got, err := ParseLine(line)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rank != 3 || got.WorldSize != 4 || got.Source != r.Source || got.Gen != 12 {
		t.Fatalf("round trip: %+v", got)
	}
	// Rank 0 of a world of 1 is a rank request too (it is written).
	r0 := Request{Gen: 1, Time: time.Unix(0, 0), Requester: "a", Source: "/x", Rank: 0, WorldSize: 1}
	l0, err := r0.AppendLine(nil)
	if err != nil || !strings.Contains(string(l0), " rank=0 world_size=1 ") {
		t.Fatalf("%q %v", l0, err)
	}
}

// Lines written before rank fields existed still read, as ordinary
// requests.
func TestOldLineStillReads(t *testing.T) {
	old := "snapreq/1 gen=123 ts=1760000000000000005 by=trainer:4711 src=/data/gens/gen-000123.safetensors crc=2194d071\n"
	r, err := ParseLine([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if r.WorldSize != 0 || r.Rank != 0 || r.Gen != 123 {
		t.Fatalf("%+v", r)
	}
}

func TestRankRequestErrors(t *testing.T) {
	base := Request{Gen: 1, Time: time.Unix(0, 0), Requester: "a", Source: "/x"}
	for _, c := range []struct{ rank, world int }{{4, 4}, {-1, 4}, {1, 0}, {0, MaxWorldSize + 1}, {0, -2}} {
		r := base
		r.Rank, r.WorldSize = c.rank, c.world
		if _, err := r.AppendLine(nil); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("rank %d world %d: want ErrInvalidRequest, got %v", c.rank, c.world, err)
		}
	}
	for _, body := range []string{
		"snapreq/1 gen=1 ts=1 by=a rank=4 world_size=4 src=/x",     // rank >= world
		"snapreq/1 gen=1 ts=1 by=a rank=0 world_size=0 src=/x",     // world 0
		"snapreq/1 gen=1 ts=1 by=a rank=01 world_size=4 src=/x",    // leading zero
		"snapreq/1 gen=1 ts=1 by=a rank=1 src=/x",                  // no world size
		"snapreq/1 gen=1 ts=1 by=a world_size=4 rank=1 src=/x",     // order
		"snapreq/1 gen=1 ts=1 by=a rank=1 world_size=65537 src=/x", // too big
		"snapreq/1 gen=1 ts=1 by=a rank=1 world_size=999999 src=/x",
	} {
		line := body + crcSuffix(body)
		r, err := ParseLine([]byte(line))
		var pe *ParseError
		if !errors.As(err, &pe) || !errors.Is(err, ErrCorrupt) {
			t.Errorf("%q: want a ParseError, got %+v %v", body, r, err)
		}
	}
}

// The Python helper writes rank requests byte for byte as Go does and
// refuses bad ranks.
func TestPythonRankRequest(t *testing.T) {
	py := python(t)
	prog := `
import sys
sys.path.insert(0, sys.argv[1])
import snapd_trainer as st
sys.stdout.buffer.write(st.encode_request(12, "/gens/r 3", "py:7", 1760000000000000000, rank=3, world_size=4))
sys.stdout.buffer.write(st.encode_request(12, "/gens/all", "py:7", 1760000000000000000))
for rank, world in ((4, 4), (-1, 4), (0, 0), (1, None), (0, 65537)):
    try:
        st.encode_request(1, "/x", "py:7", 1, rank=rank, world_size=world)
    except ValueError as e:
        continue
    raise SystemExit("accepted rank=%r world_size=%r" % (rank, world))
`
	out, err := exec.Command(py, "-c", prog, trainerScripts).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.SplitAfter(string(out), "\n")
	want1, _ := Request{Gen: 12, Time: time.Unix(0, 1760000000000000000), Requester: "py:7", Source: "/gens/r 3", Rank: 3, WorldSize: 4}.AppendLine(nil)
	want2, _ := Request{Gen: 12, Time: time.Unix(0, 1760000000000000000), Requester: "py:7", Source: "/gens/all"}.AppendLine(nil)
	if len(lines) < 2 || lines[0] != string(want1) || lines[1] != string(want2) {
		t.Fatalf("python wrote %q, Go writes %q %q", out, want1, want2)
	}
}
