package pipeline

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/wal"
)

// sealStateFullFS fails, once each, the write of the first WTXT seal, the
// first delta seal and the chain state of a chosen generation with a full
// disk (fullFile: ENOSPC after some bytes).
type sealStateFullFS struct {
	mu     sync.Mutex
	state  string // the chain state file's path
	failed map[string]bool
	fs     fullFS
}

func (f *sealStateFullFS) Create(path string, perm os.FileMode) (AtomicFile, error) {
	af, err := OSFS{}.Create(path, perm)
	if err != nil {
		return nil, err
	}
	var kind string
	switch {
	case strings.HasSuffix(path, ExtWTXT+ExtSeal):
		kind = "wtxt seal"
	case strings.HasSuffix(path, ExtDelta+ExtSeal):
		kind = "delta seal"
	case path == f.state:
		kind = "state"
	default:
		return af, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed[kind] {
		return af, nil
	}
	f.failed[kind] = true
	return &fullFile{AtomicFile: af, fs: &f.fs, left: 16}, nil
}

// Seals and the chain state are written through the FS
// seam, so a full disk while writing them is a transient failure like any
// other ring write: retried, no partial file left, the chain intact.
func TestDiskFullOnSealAndChainState(t *testing.T) {
	f := newFixture(t)
	rcp, err := keys.LoadAgeRecipients(f.keys.gen.AgePub)
	if err != nil {
		t.Fatal(err)
	}
	ffs := &sealStateFullFS{state: filepath.Join(f.dir, StateFile), failed: map[string]bool{}}
	f.start(t, func(c *Config, d *Deps) { c.Recipients, d.FS = rcp, ffs })
	for g := uint64(1); g <= 2; g++ {
		request(t, f.dir, g, publish(t, f.dir, g))
	}
	for g := uint64(1); g <= 2; g++ {
		if r := f.wait(t, g); r.State != wal.Done || r.Seal == "" || (g == 2 && r.Delta == "") {
			t.Fatalf("gen %d: %+v", g, r)
		}
	}
	ffs.mu.Lock()
	failed := len(ffs.failed)
	ffs.mu.Unlock()
	ffs.fs.mu.Lock()
	fails := ffs.fs.fails
	ffs.fs.mu.Unlock()
	if failed != 3 || fails != 3 {
		t.Fatalf("injected %d full-disk failures on %d kinds of file, want 3 on 3", fails, failed)
	}
	if n := metric(t, f.reg, "snapd_retries_total", "stage", "build"); n < 3 {
		t.Fatalf("build retried %v times, want >= 3", n)
	}
	head, err := ReadChainState(f.dir)
	if err != nil || head.Gen != 2 {
		t.Fatalf("chain state: %+v %v", head, err)
	}
	f.stop(t)
	noLeftovers(t, f.dir)
	for _, ext := range []string{ExtWTXT + ExtSeal, ExtDelta + ExtSeal} {
		if _, err := os.Stat(ringPath(filepath.Join(f.dir, RingDir), 2, ext)); err != nil {
			t.Fatalf("gen 2 %s: %v", ext, err)
		}
	}
}
