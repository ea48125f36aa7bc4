package verify

import (
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
)

// TestOCIKeysOutsideSkeletonLayout: a plain (single-layout) generation
// whose generation.txt carries oci_repository, oci_manifest and oci_tag
// fails the summary check, naming each key, at that commit only.
func TestOCIKeysOutsideSkeletonLayout(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{})
	repo := f.Copy(t)
	files := f.Gens[4].Files
	files.OCI = &gitops.OCIRef{Repository: "127.0.0.1:5000/snapd/model", Manifest: "sha256:" + strings.Repeat("ab", 32), Tag: "gen-000005-r1"}
	commit := verifytest.HandCommit(t, repo, f.Gens[3].Commit, files, f.Key.PrivFile, f.Key.PrivFile)
	rep := run(t, repo, Options{}, f.Key.Pub)
	fs := rep.AllFailures()
	if rep.OK || len(fs) != 3 {
		t.Fatalf("%s", dump(rep))
	}
	for i, k := range []string{"oci_repository", "oci_manifest", "oci_tag"} {
		x := fs[i]
		if x.Commit != commit || x.File != "snapshots/generation.txt" || x.Check != CheckSummary || !strings.Contains(x.Message, k+" is set but the generation is not in the skeleton layout") {
			t.Fatalf("failure %d: %v\n%s", i, x, dump(rep))
		}
	}
}
