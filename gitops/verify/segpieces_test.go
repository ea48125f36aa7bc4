package verify

import (
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
)

// TestSegmentsPiecesVerify: segments larger than gitops.DefaultSegmentPiece
// are stored as directories of pieces; verify-repo reads them (every
// piece counted as named, none reported as an unexpected file), and a
// damaged piece fails the generation.
func TestSegmentsPiecesVerify(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{Layout: gitops.LayoutSegments, SegmentSize: 64 << 10})
	var pieces []string
	for _, n := range lsTree(t, f.Dir, "snapshots", "snapshots") {
		if strings.Contains(n, ".seg/p0000") {
			pieces = append(pieces, n)
		}
	}
	if len(pieces) < 2 {
		t.Skipf("the fixture's segments are not larger than %d bytes: no pieces", gitops.DefaultSegmentPiece)
	}
	rep := run(t, f.Dir, Options{}, f.Key.Pub)
	if !rep.OK || len(rep.Generations) != 5 {
		t.Fatalf("report not OK:\n%s", dump(rep))
	}
	head := f.Gens[len(f.Gens)-1]
	repo := f.Dir
	b := verifytest.ReadBlob(t, repo, "snapshots", pieces[len(pieces)-1])
	b = append([]byte(nil), b...)
	b[0] ^= 1
	verifytest.EditHead(t, repo, head.Tag, map[string][]byte{pieces[len(pieces)-1]: b}, f.Key.PrivFile)
	rep = run(t, f.Dir, Options{}, f.Key.Pub)
	seg := pieces[len(pieces)-1][:strings.LastIndex(pieces[len(pieces)-1], "/")]
	if rep.OK || !strings.Contains(dump(rep), seg) {
		t.Fatalf("a flipped byte in piece %s: report does not fail naming %s:\n%s", pieces[len(pieces)-1], seg, dump(rep))
	}
}

// TestSegmentsPieceBaseChecked: every piece has its base blob beside it
// (layout.PieceOfBase), which verify-repo accepts without reading it
// only while its ID is the one its piece's gives: a base with other
// content is reported as a file the writer does not put there.
func TestSegmentsPieceBaseChecked(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{Layout: gitops.LayoutSegments, SegmentSize: 64 << 10})
	var pieces, bases []string
	for _, n := range lsTree(t, f.Dir, "snapshots", "snapshots") {
		switch {
		case strings.Contains(n, ".seg/p0000"):
			pieces = append(pieces, n)
		case strings.Contains(n, ".seg/b0000"):
			bases = append(bases, n)
		}
	}
	if len(pieces) < 2 || len(bases) != len(pieces) {
		t.Fatalf("%d pieces, %d base blobs", len(pieces), len(bases))
	}
	head := f.Gens[len(f.Gens)-1]
	victim := bases[len(bases)/2]
	verifytest.EditHead(t, f.Dir, head.Tag, map[string][]byte{victim: []byte("blob 0000000000000000000000000000000000000000\n")}, f.Key.PrivFile)
	rep := run(t, f.Dir, Options{}, f.Key.Pub)
	if rep.OK || !strings.Contains(dump(rep), victim) || !strings.Contains(dump(rep), "neither the MANIFEST nor the skeleton names this file") {
		t.Fatalf("a base blob with other content: report does not fail naming %s:\n%s", victim, dump(rep))
	}
}
