package main

import (
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
)

// TestVerifyRepoSegmentsLayout: `snapd verify-repo` of a history in the
// segments layout passes (exit 0); a segment damaged in a commit signed by
// the trusted key fails with exit 1 and names the segment file and check.
func TestVerifyRepoSegmentsLayout(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{Gens: []uint64{1, 2, 3}, Layout: gitops.LayoutSegments, SegmentSize: 4096})
	code, out, errs := snapd(t, nil, "verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners)
	if code != 0 || !strings.Contains(out, "gen 000003 "+f.Gens[2].Commit[:12]+" segments ok") ||
		!strings.Contains(out, "all checks passed") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	repo := f.Copy(t)
	var seg string
	for _, p := range strings.Fields(verifytest.Git(t, repo, "ls-tree", "-r", "--name-only", "snapshots", "--", "snapshots/"+gitops.DirWTXTSegs+"/seg")) {
		seg = p
		break
	}
	b := verifytest.ReadBlob(t, repo, "snapshots", seg)
	b[len(b)/3] ^= 0x80
	commit := verifytest.EditHead(t, repo, f.Gens[2].Tag, map[string][]byte{seg: b}, f.Key.PrivFile)
	code, out, errs = snapd(t, nil, "verify-repo", repo, "--pubkey", f.Key.AllowedSigners)
	want := "FAIL commit " + commit[:12] + " gen 000003 " + seg + ": parts: "
	if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "chunk-sha256") {
		t.Fatalf("exit %d, want 1 and %q\n%s%s", code, want, out, errs)
	}
}
