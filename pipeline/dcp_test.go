package pipeline

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/dcp"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/torch"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

const dcpFixture = "../../shared/fixtures/torch2/dcp2"

// copyDir copies the regular files of src (dot-files too) into dst.
func copyDir(t *testing.T, src, dst string, skip string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == skip {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDCPDirectoryGeneration: a torch.distributed.checkpoint directory is
// a generation source. Requested before torch wrote .metadata it is
// retried (never half-read) and converted once .metadata appears; the
// same state dict written by another world size gives the same arrays;
// a malformed .metadata fails its request only.
func TestDCPDirectoryGeneration(t *testing.T) {
	f := newFixture(t)
	f.start(t, func(_ *Config, d *Deps) {
		d.Registry = formats.NewRegistry(wtxt.New(), safetensors.New(), torch.New(), dcp.New())
	})
	src := t.TempDir()
	gen1 := filepath.Join(src, "step-1")
	copyDir(t, dcpFixture, gen1, ".metadata") // rank files written, .metadata not yet
	request(t, f.dir, 1, gen1)

	// Wait (bounded by the guard) until the daemon has retried at least once.
	deadline := time.Now().Add(testutil.Guard)
	for metric(t, f.reg, "snapd_retries_total", "stage", "prepare") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the incomplete DCP directory was not retried")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, r := range f.d.Results() {
		if r.Gen == 1 {
			t.Fatalf("gen 1 finished before .metadata existed: %+v", r)
		}
	}
	b, err := os.ReadFile(filepath.Join(dcpFixture, ".metadata"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gen1, ".metadata.tmp"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(gen1, ".metadata.tmp"), filepath.Join(gen1, ".metadata")); err != nil {
		t.Fatal(err)
	}
	r1 := f.wait(t, 1)
	if r1.State != wal.Done || r1.Format != "dcp" || r1.SourceBytes == 0 {
		t.Fatalf("gen 1: %+v", r1)
	}

	// Gen 2: the same state dict as one rank wrote it (dcp.Write).
	d, err := dcp.Open(context.Background(), gen1, dcp.Options{Torch: torch.New()})
	if err != nil {
		t.Fatal(err)
	}
	gen2 := filepath.Join(src, "step-2")
	if err := dcp.Write(context.Background(), gen2, d.Snapshot, dcp.WriteOptions{Torch: torch.New()}); err != nil {
		t.Fatal(err)
	}
	d.Close()
	request(t, f.dir, 2, gen2)
	// Gen 3: .metadata that is not a pickle.
	gen3 := filepath.Join(src, "step-3")
	copyDir(t, dcpFixture, gen3, ".metadata")
	if err := os.WriteFile(filepath.Join(gen3, ".metadata"), []byte("not a pickle at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	request(t, f.dir, 3, gen3)
	if r := f.wait(t, 2); r.State != wal.Done || r.Format != "dcp" {
		t.Fatalf("gen 2: %+v", r)
	}
	if r := f.wait(t, 3); r.State != wal.Failed || !strings.Contains(r.Error, ".metadata") {
		t.Fatalf("gen 3: %s %q", r.StateName, r.Error)
	}
	verifyChain(t, f.dir, f.keys, []uint64{1, 2})

	// Gens 1 and 2 hold the same arrays (2 ranks or 1, sharded or whole).
	read := func(gen uint64) *snapshot.Snapshot {
		p := ringPath(filepath.Join(f.dir, RingDir), gen, ExtWTXT)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s, err := wtxt.New().Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: p})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s1, s2 := read(1), read(2)
	if len(s1.Arrays) != 4 || len(s2.Arrays) != len(s1.Arrays) {
		t.Fatalf("gen 1 has %d arrays, gen 2 %d", len(s1.Arrays), len(s2.Arrays))
	}
	for _, a := range s1.Arrays {
		b := s2.Array(a.Name)
		x, _ := snapshot.ReadAll(a.Data)
		y, _ := snapshot.ReadAll(b.Data)
		if b == nil || !bytes.Equal(x, y) {
			t.Errorf("array %s differs between the 2-rank and the 1-rank checkpoint", a.Name)
		}
	}
}
