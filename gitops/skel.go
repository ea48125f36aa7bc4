package gitops

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout"
)

// The segments layout (Layout "segments", doc.go): the WTXT's structure
// as text pieces and its tensor bytes as raw segment blobs.

// storeSkeleton stores the WTXT file f (size bytes) in the skeleton
// layout: wtxt.Split checks every chunk (base64 shape, parity, sha256,
// crc32c) and yields the skeleton and the raw segments; a segment whose
// blob the previous generation's tree holds (same SHA-256, so same name)
// is reused without being hashed for Git or written. The skeleton is cut
// into pieces (cutSkeleton) stored like split parts, with a MANIFEST.
func (b *builder) storeSkeleton(f *os.File, size int64, prev *object.Tree, segSize, piece int64) (plumbing.Hash, fileInfo, error) {
	// The array names for cutting the skeleton (structure lines only:
	// cheap next to the split).
	x, err := wtxt.ReadIndex(b.ctx, "", f, size)
	if err != nil {
		return plumbing.ZeroHash, fileInfo{}, fmt.Errorf("%w: %w", layout.ErrSkeleton, err)
	}
	prevSegs := map[string]*object.Tree{} // fan-out dir -> previous subtree
	if prev != nil {
		if t, err := prev.Tree(layout.SegDir); err == nil {
			for _, e := range t.Entries {
				if e.Mode == filemode.Dir {
					if st, err := object.GetTree(b.st, e.Hash); err == nil {
						prevSegs[path.Join(layout.SegDir, e.Name)] = st
					}
				}
			}
		}
	}
	segTrees := map[string]*treeBuilder{}
	var reused int
	put := func(d [32]byte) (*treeBuilder, string, bool) {
		dir, name := layout.SegName(d)
		t := segTrees[dir]
		if t == nil {
			t = newTreeBuilder(nil)
			segTrees[dir] = t
		}
		_, have := t.entries[name]
		return t, name, have
	}
	// prevSeg finds a segment in the previous tree: a blob, or a tree of
	// pieces (mode Dir).
	prevSeg := func(d [32]byte) (plumbing.Hash, filemode.FileMode, bool) {
		dir, name := layout.SegName(d)
		if pt := prevSegs[dir]; pt != nil {
			if e, err := pt.FindEntry(name); err == nil && (e.Mode == filemode.Regular || e.Mode == filemode.Dir) {
				return e.Hash, e.Mode, true
			}
		}
		return plumbing.ZeroHash, 0, false
	}
	sink := func(ctx context.Context, s wtxt.Segment, data []byte) error {
		t, name, have := put(s.Digest)
		if have {
			return nil // the same bytes twice in this generation
		}
		if h, mode, ok := prevSeg(s.Digest); ok {
			t.set(name, mode, h)
			reused++
			return nil
		}
		h, mode, err := b.segment(data, piece)
		if err != nil {
			return err
		}
		t.set(name, mode, h)
		return nil
	}
	// A segment whose chunks the previous generation had is known by its
	// key: not read, not decoded, its blob taken from the previous tree.
	known := func(k wtxt.SegmentKey) ([32]byte, bool) {
		d, ok := b.knownSegs[k]
		if ok {
			_, _, ok = prevSeg(d)
		}
		return d, ok
	}
	var skel limitedWriter
	skel.limit = layout.MaxSkeleton
	segs, keys, err := wtxt.SplitIndexed(b.ctx, f, size, &skel, sink, known,
		wtxt.SplitOptions{SegmentSize: segSize, MaxSegment: MaxPartLimit, File: f.Name()})
	if err != nil {
		return plumbing.ZeroHash, fileInfo{}, fmt.Errorf("%w: %w", layout.ErrSkeleton, err)
	}
	if skel.over {
		return plumbing.ZeroHash, fileInfo{}, fmt.Errorf("%w: skeleton larger than %d bytes", layout.ErrSkeleton, layout.MaxSkeleton)
	}
	b.newSegKeys = make(map[wtxt.SegmentKey][32]byte, len(segs))
	for i, s := range segs {
		b.newSegKeys[keys[i]] = s.Digest
		t, name, have := put(s.Digest)
		if have {
			continue
		}
		h, mode, ok := prevSeg(s.Digest)
		if !ok {
			return plumbing.ZeroHash, fileInfo{}, fmt.Errorf("%w: segment %s was neither written nor found in the previous tree", layout.ErrSkeleton, name)
		}
		t.set(name, mode, h)
		reused++
	}
	dir := newTreeBuilder(nil)
	var prevPieces map[layout.Part]plumbing.Hash
	if prev != nil {
		prevPieces = manifestBlobs(prev)
	}
	m, err := layout.CutSkeleton(skel.buf.Bytes(), x, segs, b.storePart(dir, prevPieces))
	if err != nil {
		return plumbing.ZeroHash, fileInfo{}, err
	}
	mh, err := b.blob(m.Encode())
	if err != nil {
		return plumbing.ZeroHash, fileInfo{}, err
	}
	dir.set(layout.ManifestName, filemode.Regular, mh)
	segDir := newTreeBuilder(nil)
	for d, t := range segTrees {
		h, err := b.writeTree(t)
		if err != nil {
			return plumbing.ZeroHash, fileInfo{}, err
		}
		segDir.set(path.Base(d), filemode.Dir, h)
	}
	if len(segTrees) > 0 {
		h, err := b.writeTree(segDir)
		if err != nil {
			return plumbing.ZeroHash, fileInfo{}, err
		}
		dir.set(layout.SegDir, filemode.Dir, h)
	}
	h, err := b.writeTree(dir)
	if err != nil {
		return plumbing.ZeroHash, fileInfo{}, err
	}
	b.segsReused += reused
	// No wtxt_sha256 (generation.txt omits it): it would cost a second
	// pass over the whole file (about 1.5 CPU-s per GiB), and a reader
	// rebuilds the WTXT from the pieces and segments the signed commit
	// holds and checks it whole (structure, every chunk, sha256_all,
	// the signed root) anyway.
	return h, fileInfo{size: size}, nil
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

// storeSkeletonFile stores the WTXT at src as DirWTXTSegs in dir,
// removing the other layouts' entries. Segments larger than piece bytes
// are stored as trees of pieces (piece <= 0: never).
func (b *builder) storeSkeletonFile(dir *treeBuilder, prevDir *object.Tree, src string, segSize, piece int64) (fileInfo, error) {
	f, err := os.Open(src)
	if err != nil {
		return fileInfo{}, fmt.Errorf("gitops: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fileInfo{}, fmt.Errorf("gitops: %w", err)
	}
	var prev *object.Tree
	if prevDir != nil {
		if t, err := prevDir.Tree(DirWTXTSegs); err == nil {
			prev = t
		}
	}
	h, info, err := b.storeSkeleton(f, st.Size(), prev, segSize, piece)
	if err != nil {
		return fileInfo{}, fmt.Errorf("gitops: skeleton %s: %w", src, err)
	}
	dir.remove(FileWTXT)
	dir.remove(DirWTXTParts)
	dir.set(DirWTXTSegs, filemode.Dir, h)
	return info, nil
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

// limitedWriter buffers up to limit bytes and notes an overflow.
type limitedWriter struct {
	buf   bytes.Buffer
	limit int
	over  bool
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	if w.buf.Len()+len(p) > w.limit {
		w.over = true
		return 0, fmt.Errorf("%w: skeleton larger than %d bytes", layout.ErrSkeleton, w.limit)
	}
	return w.buf.Write(p)
}
