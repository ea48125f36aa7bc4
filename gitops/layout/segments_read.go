package layout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// Reading the segments layout (DirWTXTSegs, doc.go "Segments layout"):
// the one reader `snapd checkout` (Repo.WriteWTXT), AssembleSkeletonFS and
// `snapd verify-repo` (gitops/verify) use.

// SegmentsError is a located failure of ReadSegments. Path is the file
// inside the segments directory that is at fault: ManifestName, a piece
// ("<A>.s000064.part"), or a segment blob ("seg/ab/<hex64>.seg"); "" when
// the failure is about the directory as a whole (the MANIFEST's total).
// Line is a line of the piece named by Path (0 when Path is not a piece
// or no line is concerned). Layout is true when the directory's structure
// is wrong (no or a malformed MANIFEST, e.g. one naming a path outside the
// directory, or an entry that is not a regular file), false when a file's
// content is (a piece or segment missing, of the wrong size or SHA-256, a
// chunk whose bytes do not match its ch line, a malformed skeleton line).
// The message never quotes file content. It wraps ErrSkeleton and the
// cause (a *wtxt.Error when the assembler found it).
type SegmentsError struct {
	Path   string
	Line   int
	Layout bool
	Err    error
}

func (e *SegmentsError) Error() string {
	p := DirWTXTSegs
	if e.Path != "" {
		p += "/" + e.Path
	}
	if e.Line > 0 {
		p += fmt.Sprintf(":%d", e.Line)
	}
	return p + ": " + e.Err.Error()
}

// Unwrap exposes ErrSkeleton and the cause.
func (e *SegmentsError) Unwrap() []error { return []error{ErrSkeleton, e.Err} }

// SegmentsInfo summarises a ReadSegments.
type SegmentsInfo struct {
	Pieces   int   // skeleton pieces read (MANIFEST entries)
	Segments int   // segment blobs read
	Bytes    int64 // raw bytes read from segment blobs
	Written  int64 // WTXT bytes written
	// Paths holds every file read (ManifestName, the pieces, the segment
	// blobs), relative to the directory.
	Paths map[string]bool
}

// ReadSegments writes the WTXT stored in a segments-layout directory (fsys
// is DirWTXTSegs of one generation, e.g. TreeFS of that tree or
// os.DirFS of a checkout) to w, streaming, with memory bounded
// independently of the generation's size: the MANIFEST (ParseManifest:
// canonical, names that cannot leave the directory), then the skeleton
// pieces in MANIFEST order, each one's size and SHA-256 and the whole
// skeleton's checked, fed to wtxt.AssembleNamed, which reads every segment
// blob (seg/<hh>/<hex64>.seg, its size checked from its header before it
// is read) and checks every chunk's sha256 and crc32c and every blob's
// length and digest. Everything is read in the calling goroutine, one file
// at a time, so fsys need not allow concurrent use (go-git's trees do
// not). When fsys has a Prefetch(names ...string) method (GitTreeFS),
// the segments named by the skeleton text read so far, ahead of the
// assembler, are passed to it in order (each a blob or a directory of
// pieces), so their contents can be requested before they are opened;
// what is read is checked all the same. Failures are *SegmentsError
// naming the piece (and its line) or the segment at fault; when the
// assembler fails inside a piece whose own SHA-256 is wrong, the piece is
// named. On error what was written to w must be discarded.
func ReadSegments(ctx context.Context, fsys fs.FS, w io.Writer) (*SegmentsInfo, error) {
	return readSegments(ctx, fsys, nil, w)
}

// ReadSegmentsFrom is ReadSegments with the segment blobs read from blobs
// instead of the directory's seg/ (the Segments layout over another
// Blobs store); failures name a blob by its seg/ path all the same.
func ReadSegmentsFrom(ctx context.Context, fsys fs.FS, blobs Blobs, w io.Writer) (*SegmentsInfo, error) {
	return readSegments(ctx, fsys, blobs, w)
}

func readSegments(ctx context.Context, fsys fs.FS, blobs Blobs, w io.Writer) (*SegmentsInfo, error) {
	info := &SegmentsInfo{Paths: map[string]bool{ManifestName: true}}
	mf, err := fsys.Open(ManifestName)
	if err != nil {
		return nil, &SegmentsError{Path: ManifestName, Layout: true, Err: notFound(err)}
	}
	data, err := io.ReadAll(io.LimitReader(mf, MaxManifestSize+1))
	mf.Close()
	if err != nil {
		return nil, &SegmentsError{Path: ManifestName, Err: err}
	}
	m, err := ParseManifest(data)
	if err != nil {
		return nil, &SegmentsError{Path: ManifestName, Layout: true, Err: err}
	}
	pr := &pieceReader{ctx: ctx, fsys: fsys, m: m, all: sha256.New(), info: info}
	pr.pf, _ = fsys.(Prefetcher)
	src := &segBlobs{fsys: fsys, info: info, blobs: blobs}
	ai, err := wtxt.AssembleNamed(ctx, pr, DirWTXTSegs, src, w)
	if src.open != nil {
		src.open.Close()
		src.open = nil
	}
	if src.pieces != nil {
		src.pieces.Close()
		src.pieces = nil
	}
	if pr.f != nil && err == nil {
		// Sound skeletons end with endwtxt, after which the assembler reads
		// to EOF: every piece was checked. Anything else is an error.
		err = fmt.Errorf("%w: the skeleton pieces were not read to their end", ErrParts)
	}
	if err != nil {
		return nil, pr.locate(err, src)
	}
	info.Pieces, info.Segments, info.Bytes, info.Written = len(m.Parts), ai.Segments, ai.Bytes, ai.Written
	return info, nil
}

// notFound turns fs errors into short messages without the fs's own path
// decoration (the SegmentsError names the file).
func notFound(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return errors.New("missing")
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// pieceReader concatenates the MANIFEST's pieces, checking each one's size
// and SHA-256 at its end and the whole skeleton's after the last. A Read
// never returns bytes of two pieces, so lines are counted per piece.
type pieceReader struct {
	ctx  context.Context
	fsys fs.FS
	m    *Manifest
	all  hash.Hash
	info *SegmentsInfo

	i     int       // index of the open piece (or the next one)
	f     fs.File   // the open piece
	h     hash.Hash // its SHA-256 so far
	n     int64     // its bytes read so far
	lines []int     // newlines per piece read so far (index = piece)
	err   error     // sticky

	pf    Prefetcher // nil: fsys cannot read ahead
	scan  segScan    // finds the seg lines in what is read
	names []string   // reused for the names passed to pf
}

// Prefetcher is a file system that can read files ahead of their Open
// (gitops.GitTreeFS): names are those about to be opened, in order.
type Prefetcher interface{ Prefetch(names ...string) }

func (p *pieceReader) Read(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	n, err := p.read(b)
	if err != nil && err != io.EOF {
		p.err = err
	}
	return n, err
}

func (p *pieceReader) read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		if err := p.ctx.Err(); err != nil {
			return 0, err
		}
		if p.f == nil {
			if p.i >= len(p.m.Parts) {
				if got := hex.EncodeToString(p.all.Sum(nil)); got != p.m.SHA256 {
					return 0, &SegmentsError{Path: ManifestName, Err: fmt.Errorf("%w: the pieces are sound but their concatenation has sha256 %s, the MANIFEST header says %s", ErrParts, got, p.m.SHA256)}
				}
				return 0, io.EOF
			}
			if err := p.open(); err != nil {
				return 0, err
			}
		}
		part := p.m.Parts[p.i]
		buf := b
		if left := part.Size - p.n; int64(len(buf)) > left {
			buf = buf[:left]
		}
		if len(buf) == 0 {
			// The piece's declared size is read: it must end here.
			var one [1]byte
			if k, _ := p.f.Read(one[:]); k > 0 {
				return 0, &SegmentsError{Path: part.Name, Err: fmt.Errorf("%w: longer than the %d bytes the MANIFEST says", ErrParts, part.Size)}
			}
			if err := p.closePiece(); err != nil {
				return 0, err
			}
			continue
		}
		k, err := p.f.Read(buf)
		if p.pf != nil && k > 0 {
			if p.names = p.scan.feed(buf[:k], p.names[:0]); len(p.names) > 0 {
				p.pf.Prefetch(p.names...)
			}
		}
		p.h.Write(buf[:k])
		p.all.Write(buf[:k])
		p.n += int64(k)
		for _, c := range buf[:k] {
			if c == '\n' {
				p.lines[p.i]++
			}
		}
		if err == io.EOF && p.n < part.Size {
			return k, &SegmentsError{Path: part.Name, Err: fmt.Errorf("%w: %d bytes, the MANIFEST says %d", ErrParts, p.n, part.Size)}
		}
		if err != nil && err != io.EOF {
			return k, &SegmentsError{Path: part.Name, Err: err}
		}
		if k > 0 {
			return k, nil
		}
	}
}

func (p *pieceReader) open() error {
	part := p.m.Parts[p.i]
	p.info.Paths[part.Name] = true
	f, err := p.fsys.Open(part.Name)
	if err != nil {
		return &SegmentsError{Path: part.Name, Err: notFound(err)}
	}
	if st, err := f.Stat(); err != nil {
		f.Close()
		return &SegmentsError{Path: part.Name, Err: err}
	} else if !st.Mode().IsRegular() {
		f.Close()
		return &SegmentsError{Path: part.Name, Layout: true, Err: errors.New("not a regular file")}
	} else if st.Size() != part.Size {
		f.Close()
		return &SegmentsError{Path: part.Name, Err: fmt.Errorf("%w: %d bytes, the MANIFEST says %d", ErrParts, st.Size(), part.Size)}
	}
	p.f, p.h, p.n = f, sha256.New(), 0
	p.lines = append(p.lines, 0)
	return nil
}

// closePiece checks the open piece's SHA-256 and moves to the next.
func (p *pieceReader) closePiece() error {
	part := p.m.Parts[p.i]
	p.f.Close()
	p.f = nil
	p.i++
	if got := hex.EncodeToString(p.h.Sum(nil)); got != part.SHA256 {
		return &SegmentsError{Path: part.Name, Err: fmt.Errorf("%w: sha256 %s, the MANIFEST says %s", ErrParts, got, part.SHA256)}
	}
	return nil
}

// drain reads the rest of the open piece (at most its declared size) and
// returns its failure, if its size or SHA-256 is wrong.
func (p *pieceReader) drain() error {
	if p.f == nil || p.err != nil {
		return nil
	}
	part := p.m.Parts[p.i]
	k, err := io.Copy(io.MultiWriter(p.h, p.all), io.LimitReader(p.f, part.Size-p.n))
	p.n += k
	if err != nil {
		return nil // an I/O error says nothing about the piece's content
	}
	if p.n < part.Size {
		return &SegmentsError{Path: part.Name, Err: fmt.Errorf("%w: %d bytes, the MANIFEST says %d", ErrParts, p.n, part.Size)}
	}
	return p.closePiece()
}

// where maps a line of the skeleton to the piece holding it and the line
// within that piece.
func (p *pieceReader) where(line int) (string, int) {
	for i, n := range p.lines {
		if line <= n {
			return p.m.Parts[i].Name, line
		}
		line -= n
	}
	if len(p.lines) > 0 {
		return p.m.Parts[len(p.lines)-1].Name, 0
	}
	return "", 0
}

// locate turns a failure of the assembly into a *SegmentsError: a piece's
// own failure first (also one found by reading the rest of the piece the
// assembler stopped in), then a segment blob's (the blob the assembler had
// open when a blob, chunk-sha256 or crc32c check failed), then the piece
// line the assembler stopped at.
func (p *pieceReader) locate(err error, src *segBlobs) error {
	var se *SegmentsError
	if errors.As(err, &se) || errors.As(p.err, &se) {
		return se // a piece's failure, maybe met by read-ahead past the line the assembler stopped at
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if perr := p.drain(); perr != nil {
		return perr
	}
	var we *wtxt.Error
	if !errors.As(err, &we) {
		return &SegmentsError{Err: err}
	}
	piece, line := p.where(we.Line)
	bare := *we
	bare.File, bare.Line = "", 0
	msg := bare.Error()
	switch we.Check {
	case wtxt.CheckBlob, wtxt.CheckChunkSHA, wtxt.CheckCRC32C:
		if src.last != "" {
			if piece != "" {
				msg = fmt.Sprintf("%s (skeleton piece %s line %d)", msg, piece, line)
			}
			return &SegmentsError{Path: src.last, Layout: src.layout, Err: &located{msg: msg, err: err}}
		}
	}
	return &SegmentsError{Path: piece, Line: line, Err: &located{msg: msg, err: err}}
}

// located is an error whose message is msg and whose chain is err's.
type located struct {
	msg string
	err error
}

func (l *located) Error() string { return l.msg }
func (l *located) Unwrap() error { return l.err }

// segBlobs serves segment blobs from the directory (wtxt.BlobSource) and
// remembers the last one opened, which the assembler's blob failures are
// about.
type segBlobs struct {
	fsys fs.FS
	// blobs, when set, serves the blobs instead of fsys's seg/.
	blobs  Blobs
	info   *SegmentsInfo
	open   fs.File
	pieces io.Closer // the last segment opened as pieces
	last   string
	layout bool // the last one is not a regular file
}

// OpenBlob implements wtxt.BlobSource; wtxt.Assemble checks the length
// and digest of what it reads.
func (s *segBlobs) OpenBlob(ctx context.Context, seg wtxt.Segment) (io.ReadCloser, error) {
	dir, name := SegName(seg.Digest)
	p := path.Join(dir, name)
	s.last, s.layout = p, false
	s.info.Paths[p] = true
	if s.blobs != nil {
		return s.blobs.Get(ctx, seg.Digest, seg.Size)
	}
	var f fs.File
	var err error
	if d, ok := s.fsys.(treeDirs); ok && d.IsDir(p) {
		err = fs.ErrNotExist // what Open says, without go-git reading the tree as a blob
	} else {
		f, err = s.fsys.Open(p)
	}
	var st fs.FileInfo
	isDir := false
	if err == nil {
		if st, err = f.Stat(); err != nil || st.IsDir() {
			f.Close()
			if err == nil { // a checkout's directory of pieces (os.DirFS)
				err, isDir = fs.ErrNotExist, true
			}
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		// A segment stored as pieces (segpieces.go; a Git tree's
		// directory cannot be opened, only its files).
		r, perr := openSegPieces(s.fsys, p, seg.Size, s.info.Paths)
		if isDir && errors.Is(perr, wtxt.ErrBlobNotFound) {
			s.layout = true
			return nil, errors.New("not a regular file, nor a directory of pieces (no p000000)")
		}
		if perr != nil {
			return nil, perr
		}
		s.pieces = r
		return r, nil
	}
	if err != nil {
		return nil, notFound(err)
	}
	switch {
	case !st.Mode().IsRegular():
		f.Close()
		s.layout = true
		return nil, errors.New("not a regular file")
	case st.Size() != seg.Size:
		f.Close()
		return nil, fmt.Errorf("%d bytes, the seg line says %d", st.Size(), seg.Size)
	}
	s.open = f
	return &closeOnce{f: f, s: s}, nil
}

// treeDirs is a file system whose Open fails with fs.ErrNotExist for a
// directory (gitops.GitTreeFS) and that can say cheaply whether a name is one.
type treeDirs interface{ IsDir(name string) bool }

// closeOnce closes a blob once, whether the assembler or ReadSegments does.
type closeOnce struct {
	f fs.File
	s *segBlobs
}

func (c *closeOnce) Read(b []byte) (int, error) { return c.f.Read(b) }

func (c *closeOnce) Close() error {
	if c.s.open == c.f {
		c.s.open = nil
		return c.f.Close()
	}
	return nil
}
