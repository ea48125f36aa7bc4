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
)

// TestCloneCheckout: generations committed (split layout) to a bare
// remote come back with snapd clone (depth 1) + snapd checkout, as WTXT
// byte for byte and as safetensors equal to the source.
func TestCloneCheckout(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	sh := func(args ...string) {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, args, &out, &errb); code != 0 {
			t.Fatalf("snapd %v: exit %d: %s", args, code, errb.String())
		}
	}
	sh("keygen", filepath.Join(dir, "keys"))
	repo, err := gitops.OpenRepo(filepath.Join(dir, "remote.git"), gitops.Config{Layout: gitops.LayoutSplit, PartLimit: gitops.MinPartLimit})
	if err != nil {
		t.Fatal(err)
	}
	var wtxts, sts []string
	for g := uint64(1); g <= 3; g++ {
		st := filepath.Join(dir, "g"+string(rune('0'+g))+".safetensors")
		var b bytes.Buffer
		if err := safetensors.New().Encode(ctx, &b, tinyGen(g), formats.EncodeOptions{}); err != nil {
			t.Fatal(err)
		}
		gittest.WriteFile(t, dir, filepath.Base(st), b.Bytes())
		w := filepath.Join(dir, "g"+string(rune('0'+g))+".wtxt")
		args := []string{"convert", st, w, "--gen", string(rune('0' + g)), "--ts", "2026-01-01T00:00:00Z", "--sign-key", filepath.Join(dir, "keys", "sign_ed25519")}
		if g > 1 {
			args = append(args, "--prev", wtxts[g-2])
		}
		sh(args...)
		if _, err := repo.Commit(ctx, gitops.Generation{WTXT: w}); err != nil {
			t.Fatal(err)
		}
		wtxts, sts = append(wtxts, w), append(sts, st)
	}
	clone := filepath.Join(dir, "clone")
	sh("clone", "file://"+repo.Dir(), clone)
	if n := gittest.Git(t, clone, "rev-list", "--count", "HEAD"); n != "1\n" {
		t.Fatalf("clone holds %q commits, want 1 (shallow)", n)
	}
	out := filepath.Join(dir, "latest.wtxt")
	sh("checkout", "latest", out, "--repo", clone)
	want, _ := os.ReadFile(wtxts[2])
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Fatal("checked-out WTXT differs from the committed one")
	}
	outST := filepath.Join(dir, "latest.safetensors")
	sh("checkout", "3", outST, "--repo", clone)
	want, _ = os.ReadFile(sts[2])
	if got, _ := os.ReadFile(outST); !bytes.Equal(got, want) {
		t.Fatal("checked-out safetensors differs from the source")
	}
	// A generation the shallow clone lacks: a clear error, nothing written.
	var errb bytes.Buffer
	if code := run(ctx, []string{"checkout", "1", filepath.Join(dir, "g1out.safetensors"), "--repo", clone}, &bytes.Buffer{}, &errb); code == 0 {
		t.Fatal("checkout of a generation outside the shallow clone succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "g1out.safetensors")); err == nil {
		t.Fatal("output written on failure")
	}
	// The bare repository itself (as the daemon keeps it), any generation.
	sh("checkout", "1", outST, "--repo", repo.Dir())
	want, _ = os.ReadFile(sts[0])
	if got, _ := os.ReadFile(outST); !bytes.Equal(got, want) {
		t.Fatal("gen 1 from the bare repository differs")
	}
}

// TestCloneArgs: the git command line snapd clone runs. By default the
// fetched pack is not fsynced (core.fsync=none applies to this git
// invocation only, not to the clone's config); --fsync keeps git's default.
func TestCloneArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    cloneOptions
		want string
	}{
		{"default", cloneOptions{branch: "snapshots", depth: 1},
			"-c core.fsync=none clone --single-branch --branch snapshots --no-checkout --depth 1 --no-tags -- U D"},
		{"fsync", cloneOptions{branch: "snapshots", depth: 1, fsync: true},
			"clone --single-branch --branch snapshots --no-checkout --depth 1 --no-tags -- U D"},
		{"gen, full, worktree", cloneOptions{branch: "snapshots", tagPrfx: "gen-", gen: 7, depth: 1, full: true, worktree: true},
			"-c core.fsync=none clone --single-branch --branch gen-000007 -- U D"},
		{"partial", cloneOptions{branch: "b", depth: 1, partial: true},
			"-c core.fsync=none clone --single-branch --branch b --filter=blob:none -- U D"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.url, tc.o.dir = "U", "D"
			args, err := tc.o.cloneArgs()
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(args, " "); got != tc.want {
				t.Fatalf("git %s\nwant git %s", got, tc.want)
			}
		})
	}
	// The setting is not written into the clone: later fetches there
	// fsync as git does.
	dir := t.TempDir()
	remote := filepath.Join(dir, "r.git")
	gittest.Git(t, dir, "init", "-q", "--bare", "-b", "snapshots", remote)
	work := filepath.Join(dir, "w")
	gittest.Git(t, dir, "init", "-q", "-b", "snapshots", work)
	gittest.WriteFile(t, work, "f", []byte("x\n"))
	gittest.Git(t, work, "add", "f")
	gittest.Git(t, work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
	gittest.Git(t, work, "push", "-q", remote, "snapshots")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"clone", "file://" + remote, filepath.Join(dir, "c")}, &out, &errb); code != 0 {
		t.Fatalf("snapd clone: exit %d: %s", code, errb.String())
	}
	if cfg, _ := os.ReadFile(filepath.Join(dir, "c", ".git", "config")); bytes.Contains(cfg, []byte("fsync")) {
		t.Fatalf("the clone's config holds an fsync setting:\n%s", cfg)
	}
	if !strings.Contains(out.String(), "cloned snapshots") {
		t.Fatalf("output: %q", out.String())
	}
}
