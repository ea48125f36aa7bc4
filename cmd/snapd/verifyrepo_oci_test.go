package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

// TestVerifyRepoSkeletonLayout: `snapd verify-repo --oci-repository`
// verifies skeleton-layout generations from a registry that is read only
// (maintenance mode: every push is refused) with pull credentials from
// the environment, fully and sampled; a registry answering damaged,
// truncated or missing blobs makes verify-repo and assemble exit 1 with
// located errors, and assemble leaves no output.
func TestVerifyRepoSkeletonLayout(t *testing.T) {
	t.Parallel()
	const user, pass = "ci-reader", "pull-only-secret-42"
	reg := registrytest.Start(t, user, pass)
	repo, err := oci.Open(reg.Host+"/snapd/model", oci.Options{Username: user, Password: pass})
	if err != nil {
		t.Fatal(err)
	}
	f := verifytest.BuildSkeleton(t, repo, []uint64{1, 2, 3}, 8<<10)
	reg.SetReadOnly(t, true)
	env := map[string]string{"SNAPD_OCI_USERNAME": user, "SNAPD_OCI_PASSWORD": pass, "HOME": t.TempDir()}
	ref := reg.Host + "/snapd/model"

	// The registry is read only: a push with the same credentials fails.
	w := filepath.Join(t.TempDir(), "g.wtxt")
	os.WriteFile(w, f.Gens[2].WTXT, 0o644)
	if code, out, errs := snapd(t, env, "oci", "push", w, "--oci-repository", reg.Host+"/snapd/other"); code == 0 {
		t.Fatalf("push to a read-only registry succeeded:\n%s%s", out, errs)
	}

	code, out, errs := snapd(t, env, "verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--oci-repository", ref)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	n := f.Gens[0].Push.Segments
	for _, want := range []string{
		"registry " + ref + " (read only): full",
		"gen 000002 " + f.Gens[1].Commit[:12] + " skeleton ok       wtxt signature verified",
		"registry: full, " + itoa(n) + " of " + itoa(n) + " segment blob(s) read",
		"summary: 3 generation(s) 000001..000003",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out+errs, pass) {
		t.Fatal("password in the output")
	}

	// Sampled, reproducible: the same seed lists the same segments.
	args := []string{"verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--oci-repository", ref, "--sample", "0.3", "--seed", "11", "--json"}
	var reps [2]struct {
		OK          bool    `json:"ok"`
		Sample      float64 `json:"sample"`
		Seed        *uint64 `json:"seed"`
		Generations []struct {
			Verification    string `json:"verification"`
			SampledSegments []int  `json:"sampled_segments"`
			Segments        int    `json:"segments"`
		} `json:"generations"`
	}
	for i := range reps {
		code, out, errs = snapd(t, env, args...)
		if err := json.Unmarshal([]byte(out), &reps[i]); err != nil || code != 0 || !reps[i].OK || reps[i].Seed == nil || *reps[i].Seed != 11 || reps[i].Sample != 0.3 {
			t.Fatalf("exit %d, %v:\n%s%s", code, err, out, errs)
		}
	}
	for i, g := range reps[0].Generations {
		if g.Verification != "sample" || len(g.SampledSegments) == 0 || len(g.SampledSegments) >= g.Segments ||
			jsonOf(g.SampledSegments) != jsonOf(reps[1].Generations[i].SampledSegments) {
			t.Fatalf("gen %d: %+v vs %+v", i+1, g, reps[1].Generations[i])
		}
	}
	code, out, _ = snapd(t, env, "verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--oci-repository", ref, "--sample", "0.3")
	if code != 0 || !strings.Contains(out, "(read only): sample 0.3, seed ") || !strings.Contains(out, "registry: sampled ") {
		t.Fatalf("random seed: exit %d\n%s", code, out)
	}

	// A registry answering damaged bytes, a truncated blob, no blob.
	seg := f.Gens[2].Push.Generation.Segments[2]
	skel := filepath.Join(t.TempDir(), "g3.skel")
	os.WriteFile(skel, f.Gens[2].Skeleton, 0o644)
	for _, tc := range []struct {
		name   string
		damage registrytest.Damage
		check  string
	}{
		{"flipped byte", registrytest.FlipByte, "wtxt/" + string(wtxt.CheckChunkSHA)},
		{"truncated", registrytest.Truncate, "wtxt/" + string(wtxt.CheckBlob)},
		{"missing", registrytest.Missing, "wtxt/" + string(wtxt.CheckBlob)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := registrytest.StartProxy(t, reg.Host)
			proxy.Damage(seg.DigestString(), tc.damage)
			pref := proxy.Host + "/snapd/model"
			code, out, errs := snapd(t, env, "verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--oci-repository", pref)
			want := "gen 000003 snapshots/current.wtxt.skel:"
			if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "skeleton FAIL(1)  wtxt signature verified") || !strings.Contains(out, ": "+tc.check+": array "+seg.Array+": chunk ") ||
				!strings.Contains(out, seg.DigestString()) || !strings.Contains(errs, "verify-repo: ") {
				t.Fatalf("exit %d\n%s%s", code, out, errs)
			}
			dst := filepath.Join(t.TempDir(), "out.wtxt")
			code, out, errs = snapd(t, env, "assemble", "--oci-repository", pref, skel, dst)
			if code != 1 || !strings.Contains(errs, "g3.skel:") || !strings.Contains(errs, "array "+seg.Array) || !strings.Contains(errs, seg.DigestString()) {
				t.Fatalf("assemble: exit %d\n%s%s", code, out, errs)
			}
			if ents, _ := os.ReadDir(filepath.Dir(dst)); len(ents) != 0 {
				t.Fatalf("assemble left %d file(s) behind", len(ents))
			}
			for m := range proxy.Methods() {
				if m != "GET" && m != "HEAD" {
					t.Fatalf("verify-repo or assemble sent %s: %v", m, proxy.Methods())
				}
			}
		})
	}

	// No registry at that address: an I/O error, exit 2.
	if code, out, errs := snapd(t, env, "verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--oci-repository", "127.0.0.1:1/none/here"); code != 2 || !strings.Contains(errs, "registry") {
		t.Fatalf("unreachable registry: exit %d\n%s%s", code, out, errs)
	}

	// Usage errors: exit 2.
	for _, a := range [][]string{
		{"--sample", "0.5"},
		{"--oci-repository", ref, "--sample", "1.5"},
		{"--oci-repository", ref, "--sample", "-0.1"},
		{"--oci-repository", ref, "--seed", "3"},
	} {
		if code, out, errs := snapd(t, env, append([]string{"verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners}, a...)...); code != 2 {
			t.Fatalf("%v: exit %d\n%s%s", a, code, out, errs)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestVerifyRepoAfterRemoteGC: `snapd gc --remote --keep 2`, then the
// registry's garbage-collect --delete-untagged (read-only meanwhile): the
// kept generations still verify in full (--since the oldest kept one); a
// walk from the root passes, reporting the removed generations as content
// collected; with --require-content it fails exactly at the removed
// generations, naming the missing manifest.
func TestVerifyRepoAfterRemoteGC(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, "", "")
	repo, err := oci.Open(reg.Host+"/snapd/model", oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := verifytest.BuildSkeleton(t, repo, []uint64{1, 2, 3, 4}, 8<<10)
	env := map[string]string{"HOME": t.TempDir()}
	ref := reg.Host + "/snapd/model"
	code, out, errs := snapd(t, env, "gc", "--remote", "--keep", "2", "--oci-repository", ref, "--json")
	if code != 0 || !strings.Contains(compactJSON(out), `"removed":["gen-000001","gen-000002"]`) {
		t.Fatalf("gc --remote: exit %d\n%s%s", code, out, errs)
	}
	reg.GarbageCollectReadOnly(t, "--delete-untagged")
	code, out, errs = snapd(t, env, "verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--oci-repository", ref, "--since", "gen-000003")
	if code != 0 || !strings.Contains(out, "summary: 2 generation(s) 000003..000004") {
		t.Fatalf("kept generations: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = snapd(t, env, "verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--oci-repository", ref)
	if code != 0 || !strings.Contains(out, "summary: 4 generation(s) 000001..000004") || !strings.Contains(out, "content: 2 present, 2 collected") ||
		!strings.Contains(out, "registry: content collected (retention removed its tensor bytes: manifest gen-000002 not in the registry)") {
		t.Fatalf("whole history: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = snapd(t, env, "verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--oci-repository", ref, "--require-content")
	if code != 1 || !strings.Contains(out, "FAILED: ") || !strings.Contains(out, "gen 000001 snapshots/current.wtxt.skel: registry: ") ||
		!strings.Contains(out, "manifest gen-000001") || !strings.Contains(out, "gen 000002 snapshots/current.wtxt.skel: registry: ") ||
		strings.Contains(out, "gen 000003 snapshots/") || strings.Contains(out, "gen 000004 snapshots/") {
		t.Fatalf("whole history, --require-content: exit %d\n%s%s", code, out, errs)
	}
}

// TestCIVerifyScriptSkeletonLayout: scripts/ci-verify.sh passes
// SNAPD_OCI_REPOSITORY, SNAPD_SAMPLE and SNAPD_SEED to verify-repo.
func TestCIVerifyScriptSkeletonLayout(t *testing.T) {
	t.Parallel()
	bin := filepath.Dir(buildSnapd(t)) // holds only snapd
	script, err := filepath.Abs("../../scripts/ci-verify.sh")
	if err != nil {
		t.Fatal(err)
	}
	reg := registrytest.Start(t, "", "")
	repo, err := oci.Open(reg.Host+"/snapd/model", oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := verifytest.BuildSkeleton(t, repo, []uint64{1, 2}, 8<<10)
	report := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command("bash", script, f.Dir)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+t.TempDir(),
		"SNAPD_PUBKEY_FILE="+f.Key.AllowedSigners, "SNAPD_REPORT="+report,
		"SNAPD_OCI_REPOSITORY="+reg.Host+"/snapd/model", "SNAPD_SAMPLE=0.5", "SNAPD_SEED=3")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "2 generation(s) 000001..000002: OK") {
		t.Fatalf("%v\n%s", err, out)
	}
	var rep struct {
		Sample      float64 `json:"sample"`
		Seed        *uint64 `json:"seed"`
		Generations []struct {
			Layout          string `json:"layout"`
			SampledSegments []int  `json:"sampled_segments"`
		} `json:"generations"`
	}
	b, _ := os.ReadFile(report)
	if err := json.Unmarshal(b, &rep); err != nil || rep.Sample != 0.5 || rep.Seed == nil || *rep.Seed != 3 || len(rep.Generations) != 2 ||
		rep.Generations[0].Layout != "skeleton" || len(rep.Generations[0].SampledSegments) == 0 {
		t.Fatalf("%v: %s", err, b)
	}
}
