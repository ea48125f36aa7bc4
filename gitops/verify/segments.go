package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout"
)

// The segments layout in Git (gitops.DirWTXTSegs, Snapd-Layout: segments):
// skeleton pieces and raw segment blobs, rebuilt into the WTXT by
// layout.ReadSegments — the reader `snapd checkout` uses — and then
// verified like any plaintext WTXT.

// maxExtraReports bounds the unexpected entries of one segments directory
// reported one by one.
const maxExtraReports = 10

// emptySegment is the path of the blob of a segment with no bytes (an
// empty array): the writer may store it although no reader opens it.
var emptySegment = func() string {
	h := hex.EncodeToString(func() []byte { s := sha256.Sum256(nil); return s[:] }())
	return path.Join("seg", h[:2], h+".seg")
}()

// readSegments writes the WTXT of the segments directory entry se of dir
// to w. On failure it returns the error, its check ("layout" for the
// directory's structure: a MANIFEST that does not parse or names a path
// outside the directory, an entry of the wrong kind; "parts" for content:
// a piece or segment missing, of the wrong size or SHA-256, a chunk that
// does not match its ch line) and the repository path and line of the
// file at fault. Entries of the directory that the MANIFEST and the
// skeleton do not name are reported as "layout" failures (at most
// maxExtraReports, then a count) without stopping the verification of
// the WTXT, which is sound without them.
func (v *verifier) readSegments(x *gv, dir *object.Tree, se object.TreeEntry, w io.Writer) (check, file string, line int, err error) {
	base := path.Join(x.dir, gitops.DirWTXTSegs)
	if se.Mode != filemode.Dir {
		return CheckLayout, base, 0, fmt.Errorf("%s is not a directory", gitops.DirWTXTSegs)
	}
	t, err := dir.Tree(gitops.DirWTXTSegs)
	if err != nil {
		return CheckObject, base, 0, err
	}
	fsys := gitops.TreeFS(t)
	if v.gitDir != "" {
		var done func()
		fsys, done = gitops.GitTreeFS(v.ctx, v.gitDir, t)
		defer done()
	}
	info, err := layout.ReadSegments(v.ctx, fsys, w)
	if err != nil {
		var serr *layout.SegmentsError
		if !errors.As(err, &serr) {
			return CheckParts, base, 0, err
		}
		check = CheckParts
		if serr.Layout {
			check = CheckLayout
		}
		return check, path.Join(base, serr.Path), serr.Line, serr.Err
	}
	extras, err := unexpectedEntries(t, info.Paths)
	if err != nil {
		return CheckObject, base, 0, fmt.Errorf("list %s: %w", gitops.DirWTXTSegs, err)
	}
	for i, p := range extras {
		if i == maxExtraReports {
			x.fail(base, 0, CheckLayout, "%d more entries that neither the MANIFEST nor the skeleton names", len(extras)-i)
			break
		}
		x.fail(path.Join(base, p), 0, CheckLayout, "neither the MANIFEST nor the skeleton names this file (gitops writes only what they name)")
	}
	return "", "", 0, nil
}

// unexpectedEntries lists the files of t (recursively, without reading
// any blob) that are not in used, sorted. A piece's base blob
// (b000003 beside p000003, layout.PieceOfBase) is expected when its
// piece is in used and its ID is the one that piece's gives
// (layout.IsPieceBase).
func unexpectedEntries(t *object.Tree, used map[string]bool) ([]string, error) {
	var out []string
	pieces := map[string]plumbing.Hash{} // used files by path
	bases := map[string]plumbing.Hash{}  // base blobs by path
	w := object.NewTreeWalker(t, true, nil)
	defer w.Close()
	for {
		name, e, err := w.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch _, isBase := layout.PieceOfBase(name); {
		case e.Mode == filemode.Dir || name == emptySegment:
		case used[name]:
			pieces[name] = e.Hash
		case isBase:
			bases[name] = e.Hash
		default:
			out = append(out, name)
		}
	}
	for name, h := range bases {
		p, _ := layout.PieceOfBase(name)
		if ph, ok := pieces[p]; !ok || !layout.IsPieceBase(h, ph) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}
