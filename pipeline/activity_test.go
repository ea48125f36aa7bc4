package pipeline

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/wal"
)

// TestActivityInStatus: while a generation is being encoded, ReadStatus
// shows its generation and stage; a progress line is drawn for it on
// Deps.Progress; afterwards and after Close nothing is in progress.
func TestActivityInStatus(t *testing.T) {
	f := newFixture(t)
	bfs := &blockFS{entered: make(chan struct{}), release: make(chan struct{})}
	var mu sync.Mutex
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tick := func() time.Time { // one second per reading: every write may redraw
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(time.Second)
		return clock
	}
	prog := &testutil.SyncBuffer{}
	f.start(t, func(c *Config, d *Deps) { d.FS, d.Progress, d.Now = bfs, prog, tick })
	request(t, f.dir, 1, publish(t, f.dir, 1))
	<-bfs.entered // gen 1 is in its encode stage
	st, err := ReadStatus(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Running || len(st.InProgress) != 1 {
		t.Fatalf("running %v, in progress %+v", st.Running, st.InProgress)
	}
	a := st.InProgress[0]
	if a.Gen != 1 || a.GenText != "000001" || a.Stage != "encode" || a.Total < 256*64*4 || a.Started.IsZero() {
		t.Fatalf("activity %+v", a)
	}
	close(bfs.release)
	if r := f.wait(t, 1); r.State != wal.Done {
		t.Fatalf("gen 1: %+v", r)
	}
	if st, err = ReadStatus(f.dir); err != nil || len(st.InProgress) != 0 {
		t.Fatalf("after gen 1: %+v %v", st.InProgress, err)
	}
	out := prog.String()
	fs := strings.Split(out, "\r")
	if len(fs) < 3 || !strings.HasPrefix(out, "\rgen 000001 encode: ") || !strings.Contains(out, "/s") ||
		!strings.Contains(fs[len(fs)-1], " in ") || !strings.HasSuffix(out, "\x1b[K\n") {
		t.Fatalf("progress %q", out)
	}
	f.stop(t)
	if _, err := os.Stat(filepath.Join(f.dir, ActivityFile)); !os.IsNotExist(err) {
		t.Fatalf("activity file after Close: %v", err)
	}
	// A stale file (kill -9) is not shown when no daemon runs.
	os.WriteFile(filepath.Join(f.dir, ActivityFile), []byte(`[{"gen":7,"gen_text":"000007","stage":"encode","started":"2026-01-01T00:00:00Z"}]`), 0o644)
	if st, err = ReadStatus(f.dir); err != nil || st.Running || len(st.InProgress) != 0 {
		t.Fatalf("stale activity shown: %+v %v", st, err)
	}
}
