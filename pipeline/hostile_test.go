package pipeline

import (
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// rawRequest appends a request line the way a tool without snapd's bounds
// would (wal.Writer refuses generations above wal.MaxGen).
func rawRequest(t *testing.T, stateDir string, gen uint64, src string) {
	t.Helper()
	body := fmt.Sprintf("%s gen=%d ts=1700000000000000000 by=raw src=%s", wal.Magic, gen, src)
	line := fmt.Sprintf("%s crc=%08x\n", body, crc32.Checksum([]byte(body), crc32.MakeTable(crc32.Castagnoli)))
	segs, err := wal.Segments(filepath.Join(stateDir, WALDir))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	f, err := os.OpenFile(filepath.Join(stateDir, WALDir, fmt.Sprintf("%08d.wal", segs[len(segs)-1])), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		t.Fatal(err)
	}
}

// Issue 11 item 9: a generation above snapshot.MaxGen (2^63-1 once
// wedged the chain; larger values made the writer emit a meta gen its own
// parser rejects) is recorded as failed and the chain goes on.
func TestGenerationOutOfRangeRefused(t *testing.T) {
	f := newFixture(t)
	f.start(t, nil)
	request(t, f.dir, 1, publish(t, f.dir, 1))
	if r := f.wait(t, 1); r.State != wal.Done {
		t.Fatalf("gen 1: %+v", r)
	}
	src := publish(t, f.dir, 2)
	for _, gen := range []uint64{snapshot.MaxGen + 1, 1<<63 - 1, 1<<64 - 1} {
		rawRequest(t, f.dir, gen, src)
		r := f.wait(t, gen)
		if r.State != wal.Failed || !strings.Contains(r.Error, "generation number out of range") || !strings.Contains(r.Error, fmt.Sprint(gen)) {
			t.Fatalf("gen %d: %+v", gen, r)
		}
	}
	if h := f.d.Head(); h.Gen != 1 {
		t.Fatalf("head moved to %d", h.Gen)
	}
	request(t, f.dir, 2, src)
	if r := f.wait(t, 2); r.State != wal.Done || r.BaseGen != 1 {
		t.Fatalf("gen 2 after refused ones: %+v", r)
	}
	verifyChain(t, f.dir, f.keys, []uint64{1, 2})
}
