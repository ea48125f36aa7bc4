package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// publishSnap writes s as generation gen (safetensors) into the store.
func publishSnap(t testing.TB, stateDir string, gen uint64, s *snapshot.Snapshot) string {
	t.Helper()
	st, err := snapshot.OpenGenStore(filepath.Join(stateDir, GensDir))
	if err != nil {
		t.Fatal(err)
	}
	g, err := st.Publish(gen, ".safetensors", func(w io.Writer) error {
		return safetensors.New().Encode(context.Background(), w, s, formats.EncodeOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}
	return g.Path
}

// TestDenseUpdateSkipsDelta: after a dense update (every element moved)
// the daemon builds no delta, yet records how many chunks changed; a
// sparse update after it gets its delta, byte for byte the one
// wtxt.MakeDelta makes from the two ring files.
func TestDenseUpdateSkipsDelta(t *testing.T) {
	f := newFixture(t)
	f.start(t, nil)
	base := denseModel(1, 1)
	dense := denseModel(1, 2) // 1 MiB, every element differs from gen 1's
	sparse := denseModel(1, 2)
	b, err := snapshot.ReadAll(sparse.Arrays[1].Data)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Clone(b)
	b[5000] ^= 0x01 // one element of one row
	sparse.Arrays[1].Data = snapshot.Bytes(b)
	for g, s := range []*snapshot.Snapshot{base, dense, sparse} {
		request(t, f.dir, uint64(g+1), publishSnap(t, f.dir, uint64(g+1), s))
	}
	ring := filepath.Join(f.dir, RingDir)

	r := f.wait(t, 2)
	if r.State != wal.Done {
		t.Fatalf("gen 2: %s %s", r.StateName, r.Error)
	}
	if r.Delta != "" || r.DeltaBytes != 0 || r.BaseGen != 1 {
		t.Errorf("gen 2 (dense): delta %q, %d bytes, base gen %d", r.Delta, r.DeltaBytes, r.BaseGen)
	}
	if _, err := os.Stat(ringPath(ring, 2, ExtDelta)); !os.IsNotExist(err) {
		t.Errorf("gen 2 (dense): a delta file is in the ring (%v)", err)
	}
	if r.Picture == "" {
		t.Error("gen 2 (dense): no diff picture")
	}
	if r.DeltaChunks == 0 || r.DeltaChanged != r.DeltaChunks {
		t.Errorf("gen 2 (dense): %d of %d chunks changed", r.DeltaChanged, r.DeltaChunks)
	}
	if !strings.Contains(f.logs.String(), "delta not smaller than the snapshot; not built") {
		t.Error("gen 2 (dense): no log line says the delta was not built")
	}

	r = f.wait(t, 3)
	if r.State != wal.Done {
		t.Fatalf("gen 3: %s %s", r.StateName, r.Error)
	}
	if r.Delta == "" || r.DeltaChanged != 1 || r.DeltaChunks < 2 || r.BaseGen != 2 {
		t.Fatalf("gen 3 (sparse): delta %q, %d of %d chunks, base gen %d", r.Delta, r.DeltaChanged, r.DeltaChunks, r.BaseGen)
	}
	got, err := os.ReadFile(ringPath(ring, 3, ExtDelta))
	if err != nil {
		t.Fatal(err)
	}
	b2, err := os.ReadFile(ringPath(ring, 2, ExtWTXT))
	if err != nil {
		t.Fatal(err)
	}
	t3, err := os.ReadFile(ringPath(ring, 3, ExtWTXT))
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	info, err := wtxt.MakeDelta(context.Background(), &want, bytes.NewReader(b2), int64(len(b2)), bytes.NewReader(t3), int64(len(t3)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) || info.Changed != r.DeltaChanged || info.Chunks != r.DeltaChunks || int64(len(got)) != r.DeltaBytes {
		t.Errorf("gen 3 (sparse): ring delta (%d bytes, %d of %d chunks) is not MakeDelta's (%d bytes, %d of %d)",
			len(got), r.DeltaChanged, r.DeltaChunks, want.Len(), info.Changed, info.Chunks)
	}
	f.stop(t)
}

// stageEvents is a slog.Handler that reports every "stage started"
// record's stage and generation on a channel (while it has room), and
// passes records on.
type stageEvents struct {
	slog.Handler
	ch chan<- string
}

func (h stageEvents) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "stage started" {
		var stage string
		var gen int64
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "stage":
				stage = a.Value.String()
			case "gen":
				gen = int64(a.Value.Uint64())
			}
			return true
		})
		select {
		case h.ch <- fmt.Sprintf("%s %d", stage, gen):
		default: // more than the test waits for: dropped, never blocking the daemon
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h stageEvents) WithAttrs(as []slog.Attr) slog.Handler {
	return stageEvents{h.Handler.WithAttrs(as), h.ch}
}

func (h stageEvents) WithGroup(name string) slog.Handler {
	return stageEvents{h.Handler.WithGroup(name), h.ch}
}

// slowPublisher holds the Publish of generation hold until release is
// closed, telling held when it starts.
type slowPublisher struct {
	Publisher
	hold          uint64
	held, release chan struct{}
}

func (p *slowPublisher) Publish(ctx context.Context, g Generation) (Published, error) {
	if g.Gen == p.hold {
		close(p.held)
		select {
		case <-p.release:
		case <-ctx.Done():
			return Published{}, ctx.Err()
		}
	}
	return p.Publisher.Publish(ctx, g)
}

// TestEncodeOverlapsPublish: while generation 1's publish (commit) is
// slow, generations 2 and 3 are encoded: the build stage runs ahead of
// the finish stage by the built channel's depth.
func TestEncodeOverlapsPublish(t *testing.T) {
	f := newFixture(t)
	events := make(chan string, 256)
	pub := &slowPublisher{hold: 1, held: make(chan struct{}), release: make(chan struct{})}
	f.start(t, func(c *Config, d *Deps) {
		d.Logger = slog.New(stageEvents{d.Logger.Handler(), events})
		pub.Publisher = NewGitPublisher(d.Repo)
		d.Publisher = pub
	})
	for g := uint64(1); g <= 3; g++ {
		request(t, f.dir, g, publish(t, f.dir, g))
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Guard) // failure guard
	defer cancel()
	select {
	case <-pub.held:
	case <-ctx.Done():
		t.Fatal("generation 1 was never published")
	}
	want := map[string]bool{"encode 2": true, "encode 3": true}
	for len(want) > 0 {
		select {
		case e := <-events:
			if e == "git 1" {
				continue
			}
			delete(want, e)
		case <-ctx.Done():
			t.Fatalf("while generation 1's publish is held, these never started: %v", want)
		}
	}
	close(pub.release)
	for g := uint64(1); g <= 3; g++ {
		if r := f.wait(t, g); r.State != wal.Done || r.Commit == "" {
			t.Fatalf("gen %d: %s %s, commit %q", g, r.StateName, r.Error, r.Commit)
		}
	}
	f.stop(t)
}
