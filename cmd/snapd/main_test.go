package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestMain turns on the pack check (gitops.EnvCheckPacks) for every test
// of the package: each pack a gitops Commit writes must pass git
// index-pack --strict before it is installed, or that Commit fails. It
// also owns the package's shared fixtures (see sharedFixtures), made at most
// once per test binary and removed after the last test.
//
// Tests that drive a real daemon, registry, git server or Python process
// call t.Parallel: most of their time is waiting on those processes, and
// go test runs them after every sequential test (those that change the
// process environment with t.Setenv stay sequential), -parallel at a time.
func TestMain(m *testing.M) {
	os.Setenv(gitops.EnvCheckPacks, "1")
	dir, err := os.MkdirTemp("", "snapd-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	shared = &sharedFixtures{dir: dir}
	code := m.Run()
	shared.cleanup()
	os.Exit(code)
}

// shared is set by TestMain before any test runs and not replaced.
var shared *sharedFixtures

// sharedFixtures are expensive things many tests only read: the snapd binary
// (a go build costs seconds of CPU) and the torch probe (importing torch
// costs seconds). Each is made on first use, once; a test must not
// modify what it gets (copy the binary to change it).
type sharedFixtures struct {
	dir string // removed by cleanup

	buildOnce sync.Once
	bin       string
	buildErr  error

	torchOnce    sync.Once
	torchPy, why string

	demoOnce sync.Once
	demoOut  string // stdout of `snapd demo --gens 3` (no --dir)
	demoDir  string // the directory it kept its files in
	demoErr  error

	mu   sync.Mutex
	dirs map[string]*onceDir
}

// onceDir is a fixture directory made by dirOnce.
type onceDir struct {
	once sync.Once
	dir  string
	ok   bool // fill returned: the directory is complete
}

// dirOnce returns the fixture directory name, made by fill in the first
// test that asks for it; fill fails that test with t when it cannot, and
// every later asker fails too. Tests only read the directory.
func (f *sharedFixtures) dirOnce(t *testing.T, name string, fill func(t *testing.T, dir string)) string {
	t.Helper()
	f.mu.Lock()
	if f.dirs == nil {
		f.dirs = map[string]*onceDir{}
	}
	e := f.dirs[name]
	if e == nil {
		e = &onceDir{}
		f.dirs[name] = e
	}
	f.mu.Unlock()
	e.once.Do(func() {
		dir := filepath.Join(f.dir, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		fill(t, dir)
		e.dir, e.ok = dir, true
	})
	if !e.ok {
		t.Fatalf("shared fixture %s could not be made (see the test that first asked for it)", name)
	}
	return e.dir
}

// snapdBinary returns the path of snapd built from this package, built on
// the first call.
func (f *sharedFixtures) snapdBinary(t *testing.T) string {
	t.Helper()
	f.buildOnce.Do(func() {
		bin := filepath.Join(f.dir, "bin", "snapd")
		out, err := testutil.GoBuild("", bin, ".").CombinedOutput()
		if err != nil {
			f.buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		f.bin = bin
	})
	if f.buildErr != nil {
		t.Fatal(f.buildErr)
	}
	return f.bin
}

// torchPython is findTorchPython's answer, asked once.
func (f *sharedFixtures) torchPython() (py, why string) {
	f.torchOnce.Do(func() { f.torchPy, f.why = findTorchPython(context.Background()) })
	return f.torchPy, f.why
}

// demo runs `snapd demo --gens 3` without --dir once (it keeps its files
// in a new directory under os.TempDir and says so) and returns its output
// and that directory. Tests read the directory and write elsewhere.
func (f *sharedFixtures) demo(t *testing.T) (out, dir string) {
	t.Helper()
	f.demoOnce.Do(func() {
		code, out, errs := runCLI("demo", "--gens", "3")
		f.demoOut = out
		if _, rest, ok := strings.Cut(out, "(files kept in "); ok {
			f.demoDir, _, _ = strings.Cut(rest, ";")
		}
		if code != 0 {
			f.demoErr = fmt.Errorf("demo: exit %d\n%s%s", code, out, errs)
		}
	})
	if f.demoErr != nil {
		t.Fatal(f.demoErr)
	}
	return f.demoOut, f.demoDir
}

func (f *sharedFixtures) cleanup() {
	if f.demoDir != "" {
		os.RemoveAll(f.demoDir)
	}
	os.RemoveAll(f.dir)
}
