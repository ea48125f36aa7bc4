package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/pipeline"
)

// checkProfile asserts that path holds a gzipped pprof profile of CPU
// samples (its string table names the sample type's unit).
func checkProfile(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("profile %s is not gzip: %v", path, err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("profile %s: %v", path, err)
	}
	for _, want := range []string{"samples", "cpu", "nanoseconds"} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Fatalf("profile %s (%d bytes) lacks %q: not a CPU profile", path, len(raw), want)
		}
	}
}

func TestStartCPUProfile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cpu.pprof")
	stop, err := startCPUProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("profile visible before stop: %v", err)
	}
	// A second profiler cannot start while one runs, and leaves no file.
	if _, err := startCPUProfile(filepath.Join(dir, "second.pprof")); err == nil || !strings.Contains(err.Error(), "cpuprofile") {
		t.Fatalf("second profile: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkProfile(t, p)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != "cpu.pprof" { // no second profile, no atomicfile temp
			t.Fatalf("unexpected file %s", e.Name())
		}
	}
	// Nowhere to write: refused at start.
	if _, err := startCPUProfile(filepath.Join(dir, "missing", "cpu.pprof")); err == nil {
		t.Fatal("profile into a missing directory started")
	}
	// "" profiles nothing.
	stop, err = startCPUProfile("")
	if err != nil || stop() != nil {
		t.Fatalf("empty path: %v", err)
	}
}

// TestRunCPUProfile: snapd run --cpuprofile writes the profile when the
// daemon stops, and refuses to start when the file cannot be created.
func TestRunCPUProfile(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	prof := filepath.Join(dir, "daemon.pprof")

	code, _, errs := snapd(t, nil, "run", "--state-dir", state, "--no-git", "--metrics-addr", "off", "--cpuprofile", filepath.Join(dir, "no", "such", "dir", "p"))
	if code != exitUsage || !strings.Contains(errs, "cpuprofile") {
		t.Fatalf("unwritable profile: exit %d\n%s", code, errs)
	}

	var stdout, stderr testutil.SyncBuffer
	e := newEnv(&stdout, &stderr)
	e.getenv = func(string) string { return "" }
	root := newRootCommand(e)
	root.SetArgs([]string{"run", "--state-dir", state, "--no-git", "--metrics-addr", "off", "--cpuprofile", prof})
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	publishAndRequest(t, state, 1)
	waitStatus(t, state, "gen 1 done", func(s *pipeline.Status) bool { return s.Chain.Gen == 1 && s.Done == 1 })
	if _, err := os.Stat(prof); !os.IsNotExist(err) {
		t.Fatalf("profile written before the daemon stopped: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, stderr.String())
		}
	case <-time.After(testutil.Guard): // a guard, not a timing assertion
		t.Fatal("run did not stop")
	}
	checkProfile(t, prof)
}
