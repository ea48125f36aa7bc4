package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryElementMoves: between two generations every element of every
// array changes, by a small relative amount, and a generation's bytes do
// not depend on how they are read.
func TestEveryElementMoves(t *testing.T) {
	bound := [3]float64{2.5e-3, 2.5e-4, 5e-8} // per generation, by kind
	for k := range 3 {
		a1 := array{seed: uint64(k+1) << 56, kind: k, gen: 1, size: 4 * 4096}
		a2 := a1
		a2.gen = 2
		b1, b2 := make([]byte, a1.size), make([]byte, a2.size)
		a1.ReadAt(b1, 0)
		a2.ReadAt(b2, 0)
		for i := 0; i < len(b1); i += 4 {
			x := math.Float32frombits(binary.LittleEndian.Uint32(b1[i:]))
			y := math.Float32frombits(binary.LittleEndian.Uint32(b2[i:]))
			if x == y || math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) || math.Abs(float64(y-x)) > bound[k] {
				t.Fatalf("kind %d element %d: %g -> %g", k, i/4, x, y)
			}
		}
		// Unaligned pieces read the same bytes.
		var got []byte
		for off := int64(0); off < a1.size; off += 7 {
			p := make([]byte, min(7, a1.size-off))
			a1.ReadAt(p, off)
			got = append(got, p...)
		}
		if !bytes.Equal(got, b1) {
			t.Fatalf("kind %d: unaligned reads differ", k)
		}
	}
}

// TestDenseBenchScript runs scripts/dense-bench.sh at 1 MiB for two
// generations without the trainer part: snapd (Git only, and in the
// registry layout when docker-registry is installed) and git-lfs all time
// every generation and the medians of the times (also counting the sync
// after each window) and of the CPU seconds are printed. Skipped with -short (it
// builds snapd) and without git-lfs.
func TestDenseBenchScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds snapd and runs the daemon beside git-lfs")
	}
	if err := exec.Command("git", "lfs", "version").Run(); err != nil {
		t.Skip("git-lfs is not installed")
	}
	stores := []string{"git"}
	if _, err := exec.LookPath("docker-registry"); err == nil {
		stores = append(stores, "oci")
	}
	cmd := exec.Command("scripts/dense-bench.sh")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "SIZES=1048576", "GENS=2", "TRAINER=0", "BENCH_DIR="+t.TempDir(), "STORES="+strings.Join(stores, " "))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dense-bench.sh: %v\n%s", err, out)
	}
	want := []string{"dense-bench: ", "size 1048576 bytes", "git-lfs commit+push"}
	for _, st := range stores {
		want = append(want, "median over gens 2..2: snapd ("+st+") request->pushed ", "daemon ("+st+") stages of gen 2: prepare ")
	}
	for _, want := range want {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in the output:\n%s", want, out)
		}
	}
	// The durable line (each window and the sync after it): numbers for
	// every store.
	for _, st := range stores {
		re := regexp.MustCompile(`durable, median over gens 2\.\.2 [^\n]*: snapd \(` + st + `\) [0-9]+\.[0-9]+ s, git-lfs [0-9]+\.[0-9]+ s: [0-9]+\.[0-9]+x\n`)
		if !re.MatchString(string(out)) {
			t.Errorf("no durable line for %s in the output:\n%s", st, out)
		}
	}
	// The CPU line: a number for every store and for git-lfs.
	cpu := `CPU seconds per generation, median over gens 2\.\.2 [^\n]*:`
	for _, st := range stores {
		cpu += ` snapd \(` + st + `\) [0-9]+\.[0-9]+,`
	}
	cpu += ` git-lfs [0-9]+\.[0-9]+\n`
	if !regexp.MustCompile(cpu).Match(out) {
		t.Errorf("no CPU line (%s) in the output:\n%s", cpu, out)
	}
}
