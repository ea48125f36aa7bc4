package gitops

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout"
)

// The segments layout (Layout "segments", doc.go): the WTXT's structure
// as text pieces and its tensor bytes as raw segment blobs.

const (
	// DirWTXTSegs is the segments layout's directory inside Config.Path.
	DirWTXTSegs = layout.DirWTXTSegs
	// skelSegDir is the subdirectory of segment blobs, fanned out by the
	// first two hex digits of their SHA-256: seg/<hh>/<hex64>.seg.
	skelSegDir = "seg"
	// DefaultSegmentSize is the skeleton layout's default target segment
	// size (raw bytes): a chunk at least this large is a segment of its
	// own, smaller chunks of one array are grouped up to it.
	DefaultSegmentSize = 64 << 10
	// DefaultSegmentPiece is the default Config.SegmentPiece: a segment
	// larger than this is stored as a tree of raw pieces of this size.
	DefaultSegmentPiece = 16 << 10
	// segPieceFmt names the pieces of a segment stored as a tree.
	segPieceFmt = "p%06d"
	// segBaseFmt names the small blob beside each piece (pieceBase):
	// the base of the piece's literal delta in a pack (packw.go).
	// Readers ignore it.
	segBaseFmt = "b%06d"
	// segsPerPiece is the number of segments per skeleton piece.
	segsPerPiece = 64
	// maxSkeleton bounds the skeleton text Commit holds in memory (about
	// 230 bytes per chunk: 256 MiB is over a million chunks).
	maxSkeleton = 256 << 20
)

// ErrSkeleton reports a skeleton layout that cannot be written or read.
var ErrSkeleton = errors.New("gitops: skeleton layout")

// segName returns the path of a segment blob inside DirWTXTSegs.
func segName(d [32]byte) (dir, name string) {
	h := hex.EncodeToString(d[:])
	return path.Join(skelSegDir, h[:2]), h + ".seg"
}

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
		return plumbing.ZeroHash, fileInfo{}, fmt.Errorf("%w: %w", ErrSkeleton, err)
	}
	prevSegs := map[string]*object.Tree{} // fan-out dir -> previous subtree
	if prev != nil {
		if t, err := prev.Tree(skelSegDir); err == nil {
			for _, e := range t.Entries {
				if e.Mode == filemode.Dir {
					if st, err := object.GetTree(b.st, e.Hash); err == nil {
						prevSegs[path.Join(skelSegDir, e.Name)] = st
					}
				}
			}
		}
	}
	segTrees := map[string]*treeBuilder{}
	var reused int
	put := func(d [32]byte) (*treeBuilder, string, bool) {
		dir, name := segName(d)
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
		dir, name := segName(d)
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
	skel.limit = maxSkeleton
	segs, keys, err := wtxt.SplitIndexed(b.ctx, f, size, &skel, sink, known,
		wtxt.SplitOptions{SegmentSize: segSize, MaxSegment: MaxPartLimit, File: f.Name()})
	if err != nil {
		return plumbing.ZeroHash, fileInfo{}, fmt.Errorf("%w: %w", ErrSkeleton, err)
	}
	if skel.over {
		return plumbing.ZeroHash, fileInfo{}, fmt.Errorf("%w: skeleton larger than %d bytes", ErrSkeleton, maxSkeleton)
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
			return plumbing.ZeroHash, fileInfo{}, fmt.Errorf("%w: segment %s was neither written nor found in the previous tree", ErrSkeleton, name)
		}
		t.set(name, mode, h)
		reused++
	}
	dir := newTreeBuilder(nil)
	var prevPieces map[Part]plumbing.Hash
	if prev != nil {
		prevPieces = manifestBlobs(prev)
	}
	m, err := cutSkeleton(skel.buf.Bytes(), x, segs, b.storePart(dir, prevPieces))
	if err != nil {
		return plumbing.ZeroHash, fileInfo{}, err
	}
	mh, err := b.blob(m.Encode())
	if err != nil {
		return plumbing.ZeroHash, fileInfo{}, err
	}
	dir.set(ManifestName, filemode.Regular, mh)
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
		dir.set(skelSegDir, filemode.Dir, h)
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
		bh, err := b.blobAs(pieceBase(ph), repr{asBase: true})
		if err != nil {
			return plumbing.ZeroHash, 0, err
		}
		if err := b.blobHashed(ph, data[off:end], repr{literal: true, base: bh}); err != nil {
			return plumbing.ZeroHash, 0, err
		}
		t.set(fmt.Sprintf(segPieceFmt, k), filemode.Regular, ph)
		t.set(fmt.Sprintf(segBaseFmt, k), filemode.Regular, bh)
		off = end
	}
	h, err := b.writeTree(t)
	return h, filemode.Dir, err
}

// pieceBase is the content of the base blob of the piece whose blob ID
// is h: "blob <hex40>\n".
func pieceBase(h plumbing.Hash) []byte { return []byte("blob " + h.String() + "\n") }

// PieceOfBase returns, for the path of a piece's base blob inside
// DirWTXTSegs (seg/<hh>/<hex64>.seg/b000003), the path of its piece
// (seg/<hh>/<hex64>.seg/p000003); ok is false for any other path.
func PieceOfBase(name string) (piece string, ok bool) {
	dir, file := path.Split(name)
	// segBaseFmt: "b" and six digits (verify-repo asks this of every
	// file of a generation, so no Sscanf).
	if len(file) != 7 || file[0] != 'b' || strings.Trim(file[1:], "0123456789") != "" ||
		!strings.HasPrefix(dir, skelSegDir+"/") || !strings.HasSuffix(dir, ".seg/") {
		return "", false
	}
	return dir + "p" + file[1:], true
}

// IsPieceBase reports whether h is the base blob the writer stores
// beside the piece whose blob ID is piece: verify-repo accepts it without
// reading it (its content follows from its ID).
func IsPieceBase(h, piece plumbing.Hash) bool {
	return h == plumbing.ComputeHash(plumbing.BlobObject, pieceBase(piece))
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
func manifestBlobs(prev *object.Tree) map[Part]plumbing.Hash {
	reuse := map[Part]plumbing.Hash{}
	mf, err := prev.File(ManifestName)
	if err != nil || mf.Size > MaxManifestSize {
		return reuse
	}
	data, err := mf.Contents()
	if err != nil {
		return reuse
	}
	pm, err := ParseManifest([]byte(data))
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
		return 0, fmt.Errorf("%w: skeleton larger than %d bytes", ErrSkeleton, w.limit)
	}
	return w.buf.Write(p)
}

// cutSkeleton cuts a skeleton into pieces and calls emit for each, in
// order (concatenated, they are the skeleton): 0000-header.part (every
// line before the first arr line), <A>.head.part (arr and idx lines),
// <A>.s<ix6>.part (segsPerPiece seg blocks from the segment whose first
// chunk is ix; the array's last piece ends with endarr), and
// 9999-trailer.part (audit and endwtxt). <A> is arrayPartPrefix of the
// array name. The cuts are where wtxt.ReadSkeletonIndex finds the arr and
// seg lines and the trailer (the skeleton's grammar is checked there);
// the i-th array must be x.Arrays[i] and the k-th seg line segs[k], both
// from the same WTXT as the skeleton.
func cutSkeleton(skel []byte, x *wtxt.Index, segs []wtxt.Segment, emit func(Part, []byte) error) (*Manifest, error) {
	sx, err := wtxt.ReadSkeletonIndex(context.Background(), "skeleton", bytes.NewReader(skel), wtxt.IndexOptions{NoChunks: true})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSkeleton, err)
	}
	if len(sx.Arrays) != len(x.Arrays) || len(sx.Segs) != len(segs) {
		return nil, fmt.Errorf("%w: skeleton does not match the WTXT (%d of %d arrays, %d of %d segments)", ErrSkeleton, len(sx.Arrays), len(x.Arrays), len(sx.Segs), len(segs))
	}
	var m Manifest
	all := sha256.New()
	names := map[string]bool{}
	name, start := "", int64(0)
	flush := func(end int64) error {
		if name == "" {
			return nil
		}
		data := skel[start:end]
		sum := sha256.Sum256(data)
		all.Write(data)
		p := Part{Name: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
		m.Parts = append(m.Parts, p)
		m.Bytes += p.Size
		name = ""
		return emit(p, data)
	}
	begin := func(n string, at int64) error {
		if err := flush(at); err != nil {
			return err
		}
		if names[n] {
			return fmt.Errorf("%w: skeleton offset %d: piece name %s produced twice (array names collide after sanitizing)", ErrSkeleton, at, n)
		}
		names[n] = true
		name, start = n, at
		return nil
	}
	if err := begin("0000-header.part", 0); err != nil {
		return nil, err
	}
	si := 0
	for ai, a := range sx.Arrays {
		if a.Name != x.Arrays[ai].Name {
			return nil, fmt.Errorf("%w: skeleton line %d: array %d is not the WTXT index's", ErrSkeleton, a.Line, ai)
		}
		prefix := arrayPartPrefix(a.Name)
		if err := begin(prefix+".head.part", a.Start); err != nil {
			return nil, err
		}
		for segInArr := 0; si < len(sx.Segs) && sx.Segs[si].Array == ai; segInArr++ {
			if segs[si].Array != a.Name || segs[si].FirstChunk != sx.Segs[si].Chunk {
				return nil, fmt.Errorf("%w: skeleton line %d: seg line does not match segment %d of the split", ErrSkeleton, sx.Segs[si].Line, si)
			}
			if segInArr%segsPerPiece == 0 {
				if err := begin(fmt.Sprintf("%s.s%06d.part", prefix, segs[si].FirstChunk), sx.Segs[si].Start); err != nil {
					return nil, err
				}
			}
			si++
		}
	}
	if err := begin("9999-trailer.part", sx.TrailerStart); err != nil {
		return nil, err
	}
	if err := flush(int64(len(skel))); err != nil {
		return nil, err
	}
	m.SHA256 = hex.EncodeToString(all.Sum(nil))
	return &m, nil
}

// AssembleSkeletonFS writes the WTXT stored in the segments-layout
// directory dir of fsys to w (ReadSegments: every piece's size and
// SHA-256 and the whole skeleton's checked against the MANIFEST, then
// wtxt.Assemble with the segment blobs, every chunk's sha256 and crc32c
// and every blob's length and digest checked). On error what was written
// to w must be discarded.
func AssembleSkeletonFS(ctx context.Context, fsys fs.FS, dir string, w io.Writer) error {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSkeleton, err)
	}
	_, err = ReadSegments(ctx, sub, w)
	return err
}
