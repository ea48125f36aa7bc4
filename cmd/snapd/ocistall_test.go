package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

// TestOCIRegistryStallCLI: assemble --oci-repository and gc --remote
// against a registry that never answers, and assemble against one that
// trickles its blob a byte at a time, end with exit 2 (I/O), the stall
// named and a hint, within the --oci-timeout / --oci-stall-timeout given
// (no failure guard is needed: a hang would be the test timing out).
func TestOCIRegistryStallCLI(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	env := map[string]string{"HOME": t.TempDir()}
	d := t.TempDir()
	in := filepath.Join(d, "g.wtxt")
	b, err := os.ReadFile(filepath.Join(vectors, "v2-ext-signed.wtxt"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(in, b, 0o644)
	if code, out, errs := snapd(t, env, "oci", "push", in, "--oci-repository", reg.Host+"/snapd/stall", "--segment-size", "65536"); code != 0 {
		t.Fatalf("push: exit %d\n%s%s", code, out, errs)
	}
	silent := registrytest.StartSilent(t)
	trickle := registrytest.StartTrickle(t, 0, 20e6)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"assemble, silent", []string{"assemble", "--oci-repository", silent + "/snapd/stall", "--oci-timeout", "200ms", in + ".skel", filepath.Join(d, "a.wtxt")}},
		{"gc --remote, silent", []string{"gc", "--remote", "--keep", "1", "--oci-repository", silent + "/snapd/stall", "--oci-timeout", "200ms"}},
		{"assemble, trickle", []string{"assemble", "--oci-repository", trickle.Host + "/snapd/stall", "--oci-stall-timeout", "300ms", in + ".skel", filepath.Join(d, "b.wtxt")}},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb)
		errs := errb.String()
		if code != 2 || !strings.Contains(errs, "registry stalled") || !strings.Contains(errs, "hint:") || !strings.Contains(errs, "--oci-stall-timeout") {
			t.Errorf("%s: exit %d, want 2 with the stall and a hint\n%s", c.name, code, errs)
		}
	}
	if _, err := os.Stat(filepath.Join(d, "a.wtxt")); err == nil {
		t.Error("a stalled assemble left its output")
	}
}

// TestOCIRegistryStallReadCommands: verify-repo and checkout of a
// skeleton-layout repository whose registry never answers, or trickles
// its blobs, end with exit 2 and the stall named instead of waiting.
func TestOCIRegistryStallReadCommands(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	repo, err := oci.Open(reg.Host+"/snapd/model", oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := verifytest.BuildSkeleton(t, repo, []uint64{1, 2}, 8<<10)
	silent := registrytest.StartSilent(t)
	trickle := registrytest.StartTrickle(t, 0, 20e6)
	out := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
	}{
		{"verify-repo, silent", []string{"verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--oci-repository", silent + "/snapd/model", "--oci-timeout", "200ms"}},
		{"verify-repo, trickle", []string{"verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--oci-repository", trickle.Host + "/snapd/model", "--oci-stall-timeout", "300ms"}},
		{"checkout, silent", []string{"checkout", "2", filepath.Join(out, "a.wtxt"), "--repo", f.Dir, "--oci-repository", silent + "/snapd/model", "--oci-timeout", "200ms"}},
		{"checkout, trickle", []string{"checkout", "2", filepath.Join(out, "b.wtxt"), "--repo", f.Dir, "--oci-repository", trickle.Host + "/snapd/model", "--oci-stall-timeout", "300ms"}},
	} {
		var o, errb bytes.Buffer
		code := run(context.Background(), c.args, &o, &errb)
		if code != 2 || !strings.Contains(errb.String(), "registry stalled") {
			t.Errorf("%s: exit %d, want 2 naming the stall\n%s%s", c.name, code, o.String(), errb.String())
		}
	}
}
