package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

// TestContentCollected: three generations pushed to a real registry,
// `snapd gc --remote --keep 1`, the registry's own garbage-collect; then
// verify-repo passes (full, sampled, --json) reporting generations 1 and 2
// as content collected, --require-content fails them, checkout and
// assemble of a collected generation say "content collected" (exit 1)
// while the kept one checks out, a review of a collected base (and head)
// is a COMMENT saying so, and a ledger whose collected generation's
// skeleton was tampered with still fails.
func TestContentCollected(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, "", "")
	env := map[string]string{"HOME": t.TempDir()}
	open := func(name string) *oci.Repository {
		r, err := oci.Open(reg.Host+"/"+name, oci.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ref, tref := reg.Host+"/snapd/model", reg.Host+"/snapd/tampered"
	f := verifytest.BuildSkeleton(t, open("snapd/model"), []uint64{1, 2, 3}, 8<<10)
	// Another ledger whose generation 1 skeleton has a header byte changed
	// (its signature no longer verifies), committed by the trusted signer.
	tf := verifytest.BuildSkeleton(t, open("snapd/tampered"), nil, 8<<10)
	tf.AddTampered(t, 1, func(b []byte) []byte {
		i := bytes.Index(b, []byte("\nsign ed25519=")) + len("\nsign ed25519=")
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return b
	})
	tf.Extend(t, 2, 3)
	skel1 := verifytest.WriteFile(t, filepath.Join(t.TempDir(), "g1.wtxt.skel"), f.Gens[0].Skeleton)

	for _, r := range []string{ref, tref} {
		if code, out, errs := snapd(t, env, "gc", "--remote", "--keep", "1", "--oci-repository", r); code != 0 || !strings.Contains(out, "deleted 2 generation manifests") {
			t.Fatalf("gc --remote %s: exit %d\n%s%s", r, code, out, errs)
		}
	}
	t.Logf("garbage-collect:\n%.600s", reg.GarbageCollect(t))
	// The registry really freed generation 1's own blobs.
	kept := map[[32]byte]bool{}
	for _, s := range f.Gens[2].Push.Generation.Segments {
		kept[s.Digest] = true
	}
	freed := 0
	for _, s := range f.Gens[0].Push.Generation.Segments {
		if _, err := os.Stat(registrytest.BlobPath(reg, s.Digest)); s.Size > 0 && !kept[s.Digest] && os.IsNotExist(err) {
			freed++
		}
	}
	if freed == 0 {
		t.Fatal("garbage-collect freed none of generation 1's own blobs")
	}

	verifyArgs := []string{"verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--oci-repository", ref}
	for _, extra := range [][]string{nil, {"--sample", "0.5", "--seed", "4"}} {
		code, out, errs := snapd(t, env, append(verifyArgs, extra...)...)
		if code != 0 || !strings.Contains(out, "summary: 3 generation(s) 000001..000003 (head ") || !strings.Contains(out, ": all checks passed") ||
			!strings.Contains(out, "content: 1 present, 2 collected") ||
			!strings.Contains(out, "gen 000001 "+f.Gens[0].Commit[:12]+" skeleton ok       wtxt signature verified") ||
			!strings.Contains(out, "registry: content collected (retention removed its tensor bytes: manifest gen-000001 not in the registry)") {
			t.Fatalf("verify-repo %v: exit %d\n%s%s", extra, code, out, errs)
		}
		t.Logf("verify-repo %v:\n%s", extra, out)
	}
	code, out, errs := snapd(t, env, append(verifyArgs, "--json")...)
	var rep struct {
		OK               bool `json:"ok"`
		ContentPresent   int  `json:"content_present"`
		ContentCollected int  `json:"content_collected"`
		Generations      []struct {
			Content      string `json:"content"`
			Verification string `json:"verification"`
			Signature    string `json:"signature"`
			Chain        string `json:"chain"`
		} `json:"generations"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || !rep.OK || rep.ContentPresent != 1 || rep.ContentCollected != 2 || len(rep.Generations) != 3 {
		t.Fatalf("--json: exit %d, %v\n%s%s", code, err, out, errs)
	}
	for i, want := range []string{"collected", "collected", "present"} {
		g := rep.Generations[i]
		if g.Content != want || g.Signature != "verified" || (want == "collected") != (g.Verification == "skeleton") || i > 0 && g.Chain != "continues" {
			t.Fatalf("--json gen %d: %+v", i+1, g)
		}
	}
	code, out, errs = snapd(t, env, append(verifyArgs, "--require-content")...)
	if code != 1 || !strings.Contains(out, "gen 000001 snapshots/current.wtxt.skel: registry: ") || !strings.Contains(out, "--require-content asks for it") ||
		!strings.Contains(out, "FAILED: 2 check(s) in 2 generation(s)") {
		t.Fatalf("--require-content: exit %d\n%s%s", code, out, errs)
	}

	// checkout and assemble of a collected generation: the clear message.
	want := "content collected: generation 1's tensor bytes were removed from " + ref + " by retention"
	dst := filepath.Join(t.TempDir(), "out")
	os.MkdirAll(dst, 0o755)
	code, out, errs = snapd(t, env, "checkout", "1", filepath.Join(dst, "g1.wtxt"), "--repo", f.Dir, "--oci-repository", ref)
	if code != 1 || !strings.Contains(errs, want) || !strings.Contains(errs, "its skeleton in the ledger is intact") || strings.Contains(errs, "blob not found\n") {
		t.Fatalf("checkout 1: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("checkout 1:\n%s", errs)
	code, out, errs = snapd(t, env, "assemble", "--oci-repository", ref, skel1, filepath.Join(dst, "a1.wtxt"))
	if code != 1 || !strings.Contains(errs, want) {
		t.Fatalf("assemble: exit %d\n%s%s", code, out, errs)
	}
	if ents, _ := os.ReadDir(dst); len(ents) != 0 {
		t.Fatalf("checkout or assemble left %d file(s) behind", len(ents))
	}
	code, out, errs = snapd(t, env, "checkout", "3", filepath.Join(dst, "g3.wtxt"), "--repo", f.Dir, "--oci-repository", ref)
	if b, _ := os.ReadFile(filepath.Join(dst, "g3.wtxt")); code != 0 || !bytes.Equal(b, f.Gens[2].WTXT) {
		t.Fatalf("checkout 3: exit %d\n%s%s", code, out, errs)
	}

	// review of a collected base, and of a collected base and head: a
	// COMMENT that says why, exit 0, never "blob not found".
	dir := t.TempDir()
	skel2 := verifytest.WriteFile(t, filepath.Join(dir, "g2.wtxt.skel"), f.Gens[1].Skeleton)
	skel3 := verifytest.WriteFile(t, filepath.Join(dir, "g3.wtxt.skel"), f.Gens[2].Skeleton)
	for _, c := range []struct{ base, head, gens string }{{skel1, skel3, "000001"}, {skel1, skel2, "000001, 000002"}} {
		code, out, errs = snapd(t, env, "review", "--dry-run", "--base", c.base, "--head", c.head, "--oci-repository", ref, "--pubkey", f.Key.AllowedSigners, "--approve")
		if code != 0 || !strings.Contains(out, "snapd review: ℹ️ reviewed") || strings.Contains(out+errs, "blob not found") ||
			!strings.Contains(out, "A comment, neither an approval nor a request for changes: retention collected the content of generation(s) "+c.gens+" from the registry") ||
			!strings.Contains(out, "content collected: retention deleted manifest") || !strings.Contains(out, "- Rows not compared (the content of generation "+c.gens+" was collected) in ") ||
			!strings.Contains(out, "the metadata where its document survives.") {
			t.Fatalf("review %s: exit %d\n%s%s", c.gens, code, out, errs)
		}
	}
	t.Logf("review of a collected base:\n%s", out)

	// The tampered skeleton of a collected generation still fails.
	code, out, errs = snapd(t, env, "verify-repo", tf.Dir, "--pubkey", tf.Key.AllowedSigners, "--oci-repository", tref)
	if code != 1 || !strings.Contains(out, "gen 000001 snapshots/current.wtxt.skel:") || !strings.Contains(out, ": wtxt/signature: ") ||
		!strings.Contains(out, "content: 1 present, 2 collected") || !strings.Contains(out, "FAILED: ") || strings.Contains(out, "gen 000002 snapshots/") {
		t.Fatalf("tampered: exit %d\n%s%s", code, out, errs)
	}
}
