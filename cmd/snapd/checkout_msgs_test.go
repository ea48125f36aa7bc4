package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestCheckoutDirectoryAndLossy: checkout to OUT/ writes a checkpoint
// directory as convert does; a generation the target format cannot hold
// fails with a hint naming --lossy, and --lossy prints what it dropped.
func TestCheckoutDirectoryAndLossy(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := tinyGen(1)
	s.Arrays = append(s.Arrays, &snapshot.Array{Name: "h", DType: snapshot.BF16, Shape: []int64{2}, Data: snapshot.Bytes([]byte{0x80, 0x3f, 0x40, 0xc0})})
	var b bytes.Buffer
	if err := safetensors.New().Encode(ctx, &b, s, formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	st := gittest.WriteFile(t, dir, "g1.safetensors", b.Bytes())
	w := filepath.Join(dir, "g1.wtxt")
	mustRun(t, "convert", st, w, "--gen", "1", "--ts", "2026-01-01T00:00:00Z")
	repo, err := gitops.OpenRepo(filepath.Join(dir, "repo.git"), gitops.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Commit(ctx, gitops.Generation{WTXT: w}); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(dir, "out") + "/"
	mustRun(t, "checkout", "1", out, "--repo", repo.Dir())
	ents, err := os.ReadDir(out)
	if err != nil || len(ents) == 0 {
		t.Fatalf("checkout 1 out/: %v %v", ents, err)
	}
	mustRun(t, "convert", out, filepath.Join(dir, "back.wtxt"), "--gen", "1") // convert reads it back

	npz := filepath.Join(dir, "g1.npz")
	code, _, errs := runCLI("checkout", "1", npz, "--repo", repo.Dir())
	if code != exitInvalid || !strings.Contains(errs, `"h"`) || !strings.Contains(errs, "snapd: hint: use --lossy to drop it") {
		t.Fatalf("checkout to npz without --lossy: exit %d\n%s", code, errs)
	}
	if _, err := os.Stat(npz); err == nil {
		t.Fatal("output written on failure")
	}
	code, _, errs = runCLI("checkout", "1", npz, "--repo", repo.Dir(), "--lossy")
	if code != 0 || !strings.Contains(errs, `snapd: dropped: npz: array "h": `) {
		t.Fatalf("checkout --lossy: exit %d\n%s", code, errs)
	}
}

// TestCloneProgress: clone prints a line per phase with counts (not with
// --quiet), and asks git for --progress only when stderr is a terminal.
func TestCloneProgress(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	var b bytes.Buffer
	if err := safetensors.New().Encode(ctx, &b, tinyGen(1), formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	st := gittest.WriteFile(t, dir, "g1.safetensors", b.Bytes())
	w := filepath.Join(dir, "g1.wtxt")
	mustRun(t, "convert", st, w, "--gen", "1")
	repo, err := gitops.OpenRepo(filepath.Join(dir, "repo.git"), gitops.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Commit(ctx, gitops.Generation{WTXT: w}); err != nil {
		t.Fatal(err)
	}
	url := "file://" + repo.Dir()
	code, _, errs := runCLI("clone", url, filepath.Join(dir, "c1"), "--full", "--worktree")
	if code != 0 {
		t.Fatalf("clone: exit %d\n%s", code, errs)
	}
	for _, want := range []string{"snapd: fetching snapshots from " + url + " into " + filepath.Join(dir, "c1") + "\n", "snapd: fetched ", " objects (", "snapd: checked out "} {
		if !strings.Contains(errs, want) {
			t.Errorf("clone stderr lacks %q:\n%s", want, errs)
		}
	}
	if strings.Contains(errs, "checked out 0 files") {
		t.Errorf("no files counted:\n%s", errs)
	}
	code, _, errs = runCLI("clone", url, filepath.Join(dir, "c2"), "--quiet")
	if code != 0 || errs != "" {
		t.Fatalf("clone --quiet: exit %d, stderr %q", code, errs)
	}
	for _, c := range []struct {
		o    cloneOptions
		want string
	}{
		{cloneOptions{branch: "snapshots", depth: 1, fsync: true, progress: true}, "clone --progress --single-branch"},
		{cloneOptions{branch: "snapshots", depth: 1, fsync: true, progress: true, quiet: true}, "clone --quiet --single-branch"},
		{cloneOptions{branch: "snapshots", depth: 1, fsync: true}, "clone --single-branch"},
	} {
		c.o.url, c.o.dir = "U", "D"
		args, err := c.o.cloneArgs()
		if err != nil || !strings.HasPrefix(strings.Join(args, " "), c.want) {
			t.Errorf("%+v: %v %v", c.o, args, err)
		}
	}
}
