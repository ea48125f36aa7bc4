package pipeline

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/wal"
)

// A rank request (one rank's shard) reaching a single-node
// daemon fails with a clear error instead of becoming a generation; the
// chain goes on with the next ordinary request.
func TestRankRequestRefused(t *testing.T) {
	f := newFixture(t)
	f.start(t, nil)
	src := publish(t, f.dir, 1)
	w, err := wal.OpenWriter(filepath.Join(f.dir, WALDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(wal.Request{Gen: 1, Time: time.Unix(1_700_000_001, 0), Requester: "test", Source: src, Rank: 2, WorldSize: 4}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r := f.wait(t, 1)
	if r.State != wal.Failed || !strings.Contains(r.Error, "rank request (rank 2 of 4)") || !strings.Contains(r.Error, "ranks:") {
		t.Fatalf("%+v", r)
	}
	request(t, f.dir, 2, publish(t, f.dir, 2))
	if r := f.wait(t, 2); r.State != wal.Done {
		t.Fatalf("gen 2 after a refused rank request: %+v", r)
	}
	f.stop(t)
}
