package gitops

import (
	"context"
	"fmt"
	"io"
	"path"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout"
)

// The segments layout (Layout "segments", doc.go): the WTXT's structure
// as text pieces and its tensor bytes as raw segment blobs. The layout
// (gitops/layout) cuts the WTXT; this file is where its segment blobs
// live in a commit (gitSegs, one blob or a tree of pieces each).

// gitSegs is the layout.GenerationBlobs of a segments directory's seg/
// tree in a commit. Put stores a segment's raw bytes through the
// builder (segment: one blob, or a tree of pieces) unless this
// generation already holds the same bytes; Has and Known find a segment
// this generation holds or the previous generation's seg/ tree holds
// (by digest, or by the key of its chunks: Repo.segKeys), which Hold
// then enters without hashing it for Git or writing it. tree writes the
// seg/ tree. Get serves only segments of the previous generation (this
// generation's new blobs wait in the commit's pack until it is
// installed); the segments layout's Write never asks.
type gitSegs struct {
	b     *builder
	piece int64                   // Config.SegmentPiece: segments larger are stored as pieces
	prev  map[string]*object.Tree // fan-out dir -> previous subtree
	trees map[string]*treeBuilder // fan-out dir -> this generation's
	// reused counts segments taken from the previous tree; keys are
	// this generation's segment keys (the next Commit's Repo.segKeys).
	reused int
	keys   map[wtxt.SegmentKey][32]byte
}

// segStore returns the segment store of a segments directory whose
// previous version is prev (nil: none).
func (b *builder) segStore(prev *object.Tree, piece int64) *gitSegs {
	g := &gitSegs{b: b, piece: piece, prev: map[string]*object.Tree{}, trees: map[string]*treeBuilder{},
		keys: map[wtxt.SegmentKey][32]byte{}}
	if prev != nil {
		if t, err := prev.Tree(layout.SegDir); err == nil {
			for _, e := range t.Entries {
				if e.Mode == filemode.Dir {
					if st, err := object.GetTree(b.st, e.Hash); err == nil {
						g.prev[path.Join(layout.SegDir, e.Name)] = st
					}
				}
			}
		}
	}
	return g
}

// held returns the tree a segment's entry goes in, its name there, and
// whether this generation holds it already.
func (g *gitSegs) held(d [32]byte) (*treeBuilder, string, bool) {
	dir, name := layout.SegName(d)
	t := g.trees[dir]
	if t != nil {
		_, have := t.entries[name]
		return t, name, have
	}
	return nil, name, false
}

// enter enters a segment's entry into its fan-out tree.
func (g *gitSegs) enter(d [32]byte, mode filemode.FileMode, h plumbing.Hash) {
	dir, name := layout.SegName(d)
	t := g.trees[dir]
	if t == nil {
		t = newTreeBuilder(nil)
		g.trees[dir] = t
	}
	t.set(name, mode, h)
}

// prevSeg finds a segment in the previous tree: a blob, or a tree of
// pieces (mode Dir).
func (g *gitSegs) prevSeg(d [32]byte) (plumbing.Hash, filemode.FileMode, bool) {
	dir, name := layout.SegName(d)
	if pt := g.prev[dir]; pt != nil {
		if e, err := pt.FindEntry(name); err == nil && (e.Mode == filemode.Regular || e.Mode == filemode.Dir) {
			return e.Hash, e.Mode, true
		}
	}
	return plumbing.ZeroHash, 0, false
}

// Has implements layout.Blobs.
func (g *gitSegs) Has(_ context.Context, d [32]byte) (bool, error) {
	if _, _, have := g.held(d); have {
		return true, nil
	}
	_, _, ok := g.prevSeg(d)
	return ok, nil
}

// Get implements layout.Blobs for a segment of the previous tree stored
// as one blob.
func (g *gitSegs) Get(_ context.Context, d [32]byte, size int64) (io.ReadCloser, error) {
	dir, name := layout.SegName(d)
	h, mode, ok := g.prevSeg(d)
	if !ok || mode != filemode.Regular {
		return nil, fmt.Errorf("gitops: %s/%s: not a blob of the previous generation: %w", dir, name, wtxt.ErrBlobNotFound)
	}
	o, err := g.b.st.EncodedObject(plumbing.BlobObject, h)
	if err != nil {
		return nil, fmt.Errorf("gitops: %s/%s: object %s: %w", dir, name, h, err)
	}
	if o.Size() != size {
		return nil, fmt.Errorf("gitops: %s/%s: %d bytes, the seg line says %d", dir, name, o.Size(), size)
	}
	return o.Reader()
}

// Put implements layout.Blobs. The digest is the split's (wtxt checked
// every chunk's sha256 and hashed the segment): it is not hashed again.
func (g *gitSegs) Put(_ context.Context, d [32]byte, data []byte) error {
	if _, _, have := g.held(d); have {
		return nil // the same bytes twice in this generation
	}
	h, mode, err := g.b.segment(data, g.piece)
	if err != nil {
		return err
	}
	g.enter(d, mode, h)
	return nil
}

// Known implements layout.GenerationBlobs: a segment whose chunks the
// previous generation had is known by its key when the previous tree
// still holds its blob; it is not read, not decoded.
func (g *gitSegs) Known(k wtxt.SegmentKey) ([32]byte, bool) {
	d, ok := g.b.knownSegs[k]
	if ok {
		_, _, ok = g.prevSeg(d)
	}
	return d, ok
}

// Hold implements layout.GenerationBlobs.
func (g *gitSegs) Hold(_ context.Context, s wtxt.Segment, k wtxt.SegmentKey) error {
	g.keys[k] = s.Digest
	_, name, have := g.held(s.Digest)
	if have {
		return nil
	}
	if h, mode, ok := g.prevSeg(s.Digest); ok {
		g.enter(s.Digest, mode, h)
		g.reused++
		return nil
	}
	if s.Size == 0 { // never put: the empty blob
		h, mode, err := g.b.segment(nil, g.piece)
		if err != nil {
			return err
		}
		g.enter(s.Digest, mode, h)
		return nil
	}
	return fmt.Errorf("%w: segment %s was neither written nor found in the previous tree", layout.ErrSkeleton, name)
}

// tree writes the seg/ tree (fanned out by SegName) and returns its ID;
// ZeroHash when the generation holds no segment.
func (g *gitSegs) tree() (plumbing.Hash, error) {
	if len(g.trees) == 0 {
		return plumbing.ZeroHash, nil
	}
	segDir := newTreeBuilder(nil)
	for d, t := range g.trees {
		h, err := g.b.writeTree(t)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		segDir.set(path.Base(d), filemode.Dir, h)
	}
	return g.b.writeTree(segDir)
}

// segment stores one segment's raw bytes: one blob when piece <= 0 or
// the segment is at most piece bytes, else a tree of blobs of piece
// bytes (the last one shorter) named p000000, p000001, ... in order,
// each with its base blob b000000, b000001, ... (mode Dir). Unchanged
// rows of a partly changed chunk are then pieces the repository already
// has, so a change costs about its own bytes rounded to pieces instead
// of whole segments.
//
// A piece's base blob (pieceBase: it names the piece, so it is new
// exactly when the piece is, and it sits beside the piece in every
// segment that holds it) is what the piece is a literal delta against in
// a pack. git keeps a delta it finds stored when the base goes into the
// same pack: a thin push of a later generation sends a new piece's base
// with it, and a clone of any tree holding the piece gets the base too,
// so neither the pushing git nor a server serving a clone runs its delta
// search over the pieces. A blob segment has no directory to hold a
// base: it is a literal delta against the pack's default base
// (.gitattributes), kept only when that travels with it (a first push,
// a full clone).
func (b *builder) segment(data []byte, piece int64) (plumbing.Hash, filemode.FileMode, error) {
	if piece <= 0 || int64(len(data)) <= piece {
		h, err := b.rawBlob(data)
		return h, filemode.Regular, err
	}
	t := newTreeBuilder(nil)
	for k, off := 0, int64(0); off < int64(len(data)); k++ {
		end := min(off+piece, int64(len(data)))
		ph := plumbing.ComputeHash(plumbing.BlobObject, data[off:end])
		bh, err := b.blobAs(layout.PieceBase(ph), repr{asBase: true})
		if err != nil {
			return plumbing.ZeroHash, 0, err
		}
		if err := b.blobHashed(ph, data[off:end], repr{literal: true, base: bh}); err != nil {
			return plumbing.ZeroHash, 0, err
		}
		t.set(fmt.Sprintf(layout.SegPieceFmt, k), filemode.Regular, ph)
		t.set(fmt.Sprintf(layout.SegBaseFmt, k), filemode.Regular, bh)
		off = end
	}
	h, err := b.writeTree(t)
	return h, filemode.Dir, err
}

// manifestBlobs maps the previous MANIFEST's entries to their blobs.
func manifestBlobs(prev *object.Tree) map[layout.Part]plumbing.Hash {
	reuse := map[layout.Part]plumbing.Hash{}
	mf, err := prev.File(layout.ManifestName)
	if err != nil || mf.Size > layout.MaxManifestSize {
		return reuse
	}
	data, err := mf.Contents()
	if err != nil {
		return reuse
	}
	pm, err := layout.ParseManifest([]byte(data))
	if err != nil {
		return reuse
	}
	for _, p := range pm.Parts {
		if e, err := prev.FindEntry(p.Name); err == nil && e.Mode == filemode.Regular {
			reuse[p] = e.Hash
		}
	}
	return reuse
}
