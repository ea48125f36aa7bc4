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

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
)

// The segments layout (Layout "segments", doc.go): the WTXT's structure
// as text pieces and its tensor bytes as raw segment blobs.

const (
	// DirWTXTSegs is the segments layout's directory inside Config.Path.
	DirWTXTSegs = "current.wtxt.segs"
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
	// The whole file's SHA-256 (generation.txt's wtxt_sha256), on the
	// side: the split itself reads only the changed segments' lines.
	type sum struct {
		h   []byte
		err error
	}
	sumc := make(chan sum, 1)
	go func() {
		h := sha256.New()
		_, err := io.Copy(h, formats.ContextReader(b.ctx, io.NewSectionReader(f, 0, size)))
		sumc <- sum{h.Sum(nil), err}
	}()
	var skel limitedWriter
	skel.limit = maxSkeleton
	segs, keys, err := wtxt.SplitIndexed(b.ctx, f, size, &skel, sink, known,
		wtxt.SplitOptions{SegmentSize: segSize, MaxSegment: MaxPartLimit, File: f.Name()})
	whole := <-sumc
	if err == nil {
		err = whole.err
	}
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
	return h, fileInfo{size: size, sha256: hex.EncodeToString(whole.h)}, nil
}

// segment stores one segment's raw bytes: one blob when piece <= 0 or
// the segment is at most piece bytes, else a tree of blobs of piece
// bytes (the last one shorter) named p000000, p000001, ... in order
// (mode Dir). Unchanged rows of a partly changed chunk are then pieces
// the repository already has, so a change costs about its own bytes
// rounded to pieces instead of whole segments.
func (b *builder) segment(data []byte, piece int64) (plumbing.Hash, filemode.FileMode, error) {
	if piece <= 0 || int64(len(data)) <= piece {
		h, err := b.blob(data)
		return h, filemode.Regular, err
	}
	t := newTreeBuilder(nil)
	for k, off := 0, int64(0); off < int64(len(data)); k++ {
		end := min(off+piece, int64(len(data)))
		h, err := b.blob(data[off:end])
		if err != nil {
			return plumbing.ZeroHash, 0, err
		}
		t.set(fmt.Sprintf(segPieceFmt, k), filemode.Regular, h)
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

// isPlainWTXT reports whether the file at p starts with the WTXT magic
// line (an age-armored WTXT does not).
func isPlainWTXT(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [len(wtxtMagic)]byte
	n, _ := io.ReadFull(f, b[:])
	return string(b[:n]) == wtxtMagic
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
// array name. The i-th arr line is x.Arrays[i] and the k-th seg line
// segs[k]; both come from the same WTXT as the skeleton, and the lines are
// checked against them.
func cutSkeleton(skel []byte, x *wtxt.Index, segs []wtxt.Segment, emit func(Part, []byte) error) (*Manifest, error) {
	var m Manifest
	all := sha256.New()
	names := map[string]bool{}
	name, start := "", 0
	flush := func(end int) error {
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
	begin := func(n string, at int) error {
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
	ai, si, segInArr := -1, 0, 0
	prefix := ""
	trailer := false
	for off, lineNo := 0, 1; off < len(skel); lineNo++ {
		end := bytes.IndexByte(skel[off:], '\n')
		if end < 0 {
			return nil, fmt.Errorf("%w: skeleton line %d: no final LF", ErrSkeleton, lineNo)
		}
		end += off + 1
		line := skel[off:end]
		switch {
		case trailer:
		case bytes.HasPrefix(line, []byte("arr ")):
			ai++
			if ai >= len(x.Arrays) {
				return nil, fmt.Errorf("%w: skeleton line %d: more arrays than the WTXT index (%d)", ErrSkeleton, lineNo, len(x.Arrays))
			}
			prefix, segInArr = arrayPartPrefix(x.Arrays[ai].Name), 0
			if err := begin(prefix+".head.part", off); err != nil {
				return nil, err
			}
		case bytes.HasPrefix(line, []byte("seg ")):
			if ai < 0 || si >= len(segs) || segs[si].Array != x.Arrays[ai].Name {
				return nil, fmt.Errorf("%w: skeleton line %d: seg line does not match segment %d of the split", ErrSkeleton, lineNo, si)
			}
			if segInArr%segsPerPiece == 0 {
				if err := begin(fmt.Sprintf("%s.s%06d.part", prefix, segs[si].FirstChunk), off); err != nil {
					return nil, err
				}
			}
			si++
			segInArr++
		case bytes.HasPrefix(line, []byte("audit ")) || string(line) == "endwtxt\n":
			if err := begin("9999-trailer.part", off); err != nil {
				return nil, err
			}
			trailer = true
		}
		off = end
	}
	if !trailer || ai != len(x.Arrays)-1 || si != len(segs) {
		return nil, fmt.Errorf("%w: skeleton does not match the WTXT (%d of %d arrays, %d of %d segments, trailer %v)", ErrSkeleton, ai+1, len(x.Arrays), si, len(segs), trailer)
	}
	if err := flush(len(skel)); err != nil {
		return nil, err
	}
	m.SHA256 = hex.EncodeToString(all.Sum(nil))
	return &m, nil
}

// treeBlobs serves segment blobs from a skeleton directory.
type treeBlobs struct{ fsys fs.FS }

// OpenBlob implements wtxt.BlobSource; wtxt.Assemble checks size and
// digest. A segment is a blob seg/<hh>/<hex64>.seg or a directory of that
// name holding its pieces p000000, p000001, ... (read in order until the
// segment's size; a missing piece, an empty one or one past the size is
// an error naming the segment and the piece).
func (t treeBlobs) OpenBlob(_ context.Context, s wtxt.Segment) (io.ReadCloser, error) {
	dir, name := segName(s.Digest)
	p := path.Join(dir, name)
	f, err := t.fsys.Open(p)
	if err == nil {
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		if !st.IsDir() {
			return f, nil
		}
		f.Close() // a work tree's directory of pieces (os.DirFS)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	// Pieces (a Git tree's directory cannot be opened, only its files).
	first, err := t.fsys.Open(path.Join(p, fmt.Sprintf(segPieceFmt, 0)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("segment %s: %w", name, wtxt.ErrBlobNotFound)
	}
	if err != nil {
		return nil, err
	}
	return &pieceReader{fsys: t.fsys, dir: p, name: name, left: s.Size, cur: first}, nil
}

// pieceReader reads a segment stored as pieces, in order, up to its size.
type pieceReader struct {
	fsys fs.FS
	dir  string // the segment's directory
	name string // for errors
	left int64  // segment bytes not yet read
	k    int    // index of cur
	cur  fs.File
	got  int64 // bytes read from cur
}

func (r *pieceReader) Read(p []byte) (int, error) {
	for {
		if r.left == 0 {
			return 0, r.end()
		}
		if r.cur == nil {
			r.k++
			f, err := r.fsys.Open(path.Join(r.dir, fmt.Sprintf(segPieceFmt, r.k)))
			if errors.Is(err, fs.ErrNotExist) {
				return 0, fmt.Errorf("segment %s: piece %d missing (the pieces end %d bytes before the segment's size): %w", r.name, r.k, r.left, wtxt.ErrBlobNotFound)
			}
			if err != nil {
				return 0, fmt.Errorf("segment %s: piece %d: %w", r.name, r.k, err)
			}
			r.cur, r.got = f, 0
		}
		if int64(len(p)) > r.left {
			p = p[:r.left]
		}
		n, err := r.cur.Read(p)
		r.left -= int64(n)
		r.got += int64(n)
		switch {
		case err == io.EOF:
			r.cur.Close()
			r.cur = nil
			if r.got == 0 {
				return n, r.fail("empty")
			}
		case err != nil:
			return n, fmt.Errorf("segment %s: piece %d: %w", r.name, r.k, err)
		}
		if n > 0 {
			return n, nil
		}
	}
}

// end checks, once the segment's size has been read, that the current
// piece ends there and no further piece exists.
func (r *pieceReader) end() error {
	if r.cur != nil {
		var one [1]byte
		n, err := io.ReadFull(r.cur, one[:])
		r.cur.Close()
		r.cur = nil
		if n > 0 {
			return r.fail("longer than the segment's size")
		}
		if err != io.EOF {
			return fmt.Errorf("segment %s: piece %d: %w", r.name, r.k, err)
		}
	}
	if f, err := r.fsys.Open(path.Join(r.dir, fmt.Sprintf(segPieceFmt, r.k+1))); err == nil {
		f.Close()
		return r.fail("followed by a piece past the segment's size")
	}
	return io.EOF
}

// fail names the segment and the current piece.
func (r *pieceReader) fail(what string) error {
	return fmt.Errorf("%w: segment %s: piece %d: %s", ErrSkeleton, r.name, r.k, what)
}

func (r *pieceReader) Close() error {
	if r.cur != nil {
		return r.cur.Close()
	}
	return nil
}

// AssembleSkeletonFS writes the WTXT stored in the skeleton directory dir
// of fsys to w: the skeleton from its pieces (every piece's size and
// SHA-256 and the whole skeleton's checked against the MANIFEST), then
// wtxt.Assemble with the segment blobs (every chunk's sha256 and crc32c
// and every blob's length and digest checked). The pieces and the blobs
// are read concurrently, so fsys must allow that (os.DirFS and MapFS do).
// On error what was written to w must be discarded.
func AssembleSkeletonFS(ctx context.Context, fsys fs.FS, dir string, w io.Writer) error {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSkeleton, err)
	}
	return assembleSkeleton(ctx, sub, sub, w)
}

// assembleSkeleton reads the pieces from pieces and the segments from
// blobs (two views of one skeleton directory, used from two goroutines).
func assembleSkeleton(ctx context.Context, pieces, blobs fs.FS, w io.Writer) error {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := AssembleFS(pieces, ".", pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	_, err := wtxt.AssembleNamed(ctx, pr, DirWTXTSegs, treeBlobs{blobs}, w)
	if err == nil {
		// What follows endwtxt (nothing, for a sound skeleton), then the
		// MANIFEST's verdict on the whole skeleton.
		if n, cerr := io.Copy(io.Discard, pr); cerr == nil && n > 0 {
			err = fmt.Errorf("%d bytes after endwtxt", n)
		}
	}
	pr.CloseWithError(errors.New("assemble ended"))
	if perr := <-errc; err == nil {
		err = perr
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSkeleton, err)
	}
	return nil
}
