package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
)

// TestAssembleSegmentsDir: `snapd assemble` of a segments-layout directory
// taken out of Git with git archive rebuilds the WTXT byte for byte, and a
// damaged segment makes it fail naming the segment, with nothing at OUT.
func TestAssembleSegmentsDir(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{Gens: []uint64{1, 2}, Layout: gitops.LayoutSegments, SegmentSize: 4096})
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", "git --git-dir '"+f.Dir+"' archive gen-000002 snapshots/"+gitops.DirWTXTSegs+" | tar -x -C '"+dir+"'")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git archive: %v\n%s", err, out)
	}
	segs := filepath.Join(dir, "snapshots", gitops.DirWTXTSegs)
	out := filepath.Join(dir, "gen2.wtxt")
	mustRun(t, "assemble", segs, out)
	if b, _ := os.ReadFile(out); !bytes.Equal(b, f.Gens[1].WTXT) {
		t.Fatalf("assembled %d bytes, not the committed WTXT (%d bytes)", len(b), len(f.Gens[1].WTXT))
	}
	seg, _ := filepath.Glob(filepath.Join(segs, "seg", "*", "*.seg"))
	if len(seg) == 0 {
		t.Fatal("no segments")
	}
	b, _ := os.ReadFile(seg[0])
	b[0] ^= 1
	if err := os.WriteFile(seg[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.wtxt")
	code, _, errs := snapd(t, nil, "assemble", segs, bad)
	rel, _ := filepath.Rel(segs, seg[0])
	if code != 1 || !bytes.Contains([]byte(errs), []byte(gitops.DirWTXTSegs+"/"+filepath.ToSlash(rel))) {
		t.Fatalf("damaged segment: exit %d\n%s", code, errs)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Fatalf("OUT written on failure: %v", err)
	}
}
