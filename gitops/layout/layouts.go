package layout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// Layout stores a generation's WTXT in a generation directory (a tree)
// and, for Segments and Skeleton, a Blobs store, and reads it back.
type Layout interface {
	// Name is the layout's recorded name.
	Name() Name
	// Holds reports whether a generation directory's entries hold a WTXT
	// in this layout (Detect asks every layout and wants exactly one).
	Holds(has Has) bool
	// Write stores the WTXT src (size bytes) into tree and blobs.
	Write(ctx context.Context, src io.ReaderAt, size int64, tree TreeWriter, blobs Blobs, o WriteOptions) error
	// Assemble writes the stored WTXT to w with every piece checked
	// (sizes before anything is allocated for them, every part's and
	// piece's SHA-256, every chunk's sha256 and crc32c, every blob's
	// length and digest) and within b. On error, what was written to w
	// must be discarded.
	Assemble(ctx context.Context, tree fs.FS, blobs Blobs, w io.Writer, b Budget) error
	// Check checks the layout's structure in tree without reading the
	// WTXT's bytes: its entries exist with the kinds and sizes its
	// MANIFEST (if any) names.
	Check(ctx context.Context, tree fs.FS) error
}

// TreeWriter receives the files a Layout writes into a generation
// directory, by slash-separated path (e.g. "current.wtxt.parts/MANIFEST").
type TreeWriter interface {
	WriteFile(name string, data []byte) error
}

// WriteOptions sets the sizes a Layout writes with; zero values take the
// defaults.
type WriteOptions struct {
	PartLimit   int64  // Split: the largest part (DefaultPartLimit)
	SegmentSize int64  // Segments, Skeleton: target segment size (DefaultSegmentSize)
	File        string // names the WTXT in errors of its split ("": none)
}

// Budget bounds what Assemble reads and writes. Zero: no bound.
type Budget struct {
	// MaxBytes bounds the WTXT, and so every file and blob read for it.
	MaxBytes int64
}

// ErrBudget reports a layout whose WTXT, or one of whose pieces, is
// larger than the Budget.
var ErrBudget = errors.New("layout: size budget exceeded")

// All returns the four layouts.
func All() []Layout { return []Layout{single{}, split{}, segments{}, skeleton{}} }

// Lookup returns the layout named n.
func Lookup(n Name) (Layout, bool) {
	for _, l := range All() {
		if l.Name() == n {
			return l, true
		}
	}
	return nil, false
}

// over returns a Budget failure naming what is over it.
func (b Budget) over(what string, n int64) error {
	if b.MaxBytes > 0 && n > b.MaxBytes {
		return fmt.Errorf("%s: %w: %d bytes, budget %d", what, ErrBudget, n, b.MaxBytes)
	}
	return nil
}

// writer bounds w by the budget.
func (b Budget) writer(w io.Writer, what string) io.Writer {
	if b.MaxBytes <= 0 {
		return w
	}
	return &budgetWriter{w: w, left: b.MaxBytes, b: b, what: what}
}

type budgetWriter struct {
	w    io.Writer
	left int64
	b    Budget
	what string
}

func (w *budgetWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > w.left {
		return 0, fmt.Errorf("%s: %w: more than %d bytes assembled", w.what, ErrBudget, w.b.MaxBytes)
	}
	w.left -= int64(len(p))
	return w.w.Write(p)
}

// budgetBlobs refuses a blob larger than the budget before opening it.
type budgetBlobs struct {
	Blobs
	b Budget
}

func (s budgetBlobs) Get(ctx context.Context, d [32]byte, size int64) (io.ReadCloser, error) {
	if err := s.b.over(blobName(d), size); err != nil {
		return nil, err
	}
	return s.Blobs.Get(ctx, d, size)
}

// fileSize returns the size of the regular file name of tree.
func fileSize(tree fs.FS, name string) (int64, error) {
	st, err := fs.Stat(tree, name)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, notFound(err))
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s: not a regular file", name)
	}
	return st.Size(), nil
}

// checkManifest reads dir's MANIFEST and checks every part it names is a
// regular file of its size; it returns the manifest.
func checkManifest(tree fs.FS, dir string) (*Manifest, error) {
	mp := path.Join(dir, ManifestName)
	n, err := fileSize(tree, mp)
	if err != nil {
		return nil, err
	}
	if err := (Budget{MaxBytes: MaxManifestSize}).over(mp, n); err != nil {
		return nil, err
	}
	data, err := fs.ReadFile(tree, mp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", mp, err)
	}
	m, err := ParseManifest(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", mp, err)
	}
	for _, p := range m.Parts {
		pp := path.Join(dir, p.Name)
		size, err := fileSize(tree, pp)
		if err != nil {
			return nil, err
		}
		if size != p.Size {
			return nil, fmt.Errorf("%s: %w: %d bytes, the MANIFEST says %d", pp, ErrParts, size, p.Size)
		}
	}
	return m, nil
}

// writeParts writes the parts emitted into dir, then their manifest,
// which it returns; a PartsWriter tree takes them as such.
func writeParts(tree TreeWriter, dir string, cut func(emit func(Part, []byte) error) (*Manifest, error)) (*Manifest, error) {
	if pw, ok := tree.(PartsWriter); ok {
		m, err := cut(func(p Part, data []byte) error { return pw.WritePart(dir, p, data) })
		if err != nil {
			return nil, err
		}
		return m, pw.WriteManifest(dir, m)
	}
	m, err := cut(func(p Part, data []byte) error { return tree.WriteFile(path.Join(dir, p.Name), data) })
	if err != nil {
		return nil, err
	}
	return m, tree.WriteFile(path.Join(dir, ManifestName), m.Encode())
}

// single: FileWTXT.
type single struct{}

func (single) Name() Name         { return Single }
func (single) Holds(has Has) bool { return has(FileWTXT) }
func (single) Check(_ context.Context, tree fs.FS) error {
	_, err := fileSize(tree, FileWTXT)
	return err
}

func (single) Write(ctx context.Context, src io.ReaderAt, size int64, tree TreeWriter, _ Blobs, _ WriteOptions) error {
	if fw, ok := tree.(FileWriter); ok {
		return fw.WriteFrom(ctx, FileWTXT, src, size)
	}
	var b bytes.Buffer
	if _, err := io.Copy(&b, io.NewSectionReader(src, 0, size)); err != nil {
		return fmt.Errorf("%s: %w", FileWTXT, err)
	}
	return tree.WriteFile(FileWTXT, b.Bytes())
}

func (single) Assemble(ctx context.Context, tree fs.FS, _ Blobs, w io.Writer, b Budget) error {
	n, err := fileSize(tree, FileWTXT)
	if err != nil {
		return err
	}
	if err := b.over(FileWTXT, n); err != nil {
		return err
	}
	f, err := tree.Open(FileWTXT)
	if err != nil {
		return fmt.Errorf("%s: %w", FileWTXT, notFound(err))
	}
	defer f.Close()
	if _, err := io.Copy(w, io.LimitReader(f, n)); err != nil {
		return fmt.Errorf("%s: %w", FileWTXT, err)
	}
	return nil
}

// split: DirWTXTParts, MANIFEST + parts.
type split struct{}

func (split) Name() Name         { return Split }
func (split) Holds(has Has) bool { return has(DirWTXTParts) }
func (split) Check(_ context.Context, tree fs.FS) error {
	_, err := checkManifest(tree, DirWTXTParts)
	return err
}

func (split) Write(ctx context.Context, src io.ReaderAt, size int64, tree TreeWriter, _ Blobs, o WriteOptions) error {
	limit := o.PartLimit
	if limit == 0 {
		limit = DefaultPartLimit
	}
	_, err := WriteParts(ctx, src, size, tree, DirWTXTParts, limit)
	return err
}

func (split) Assemble(ctx context.Context, tree fs.FS, _ Blobs, w io.Writer, b Budget) error {
	m, err := checkManifest(tree, DirWTXTParts)
	if err != nil {
		return err
	}
	if err := b.over(DirWTXTParts, m.Bytes); err != nil {
		return err
	}
	if err := AssembleFS(tree, DirWTXTParts, b.writer(w, DirWTXTParts)); err != nil {
		return fmt.Errorf("%s: %w", DirWTXTParts, err)
	}
	return nil
}

// splitSegments splits the WTXT src into its skeleton (returned) and
// segments, putting every segment blobs lacks; a GenerationBlobs store is
// asked which segments it knows and told every segment the WTXT holds.
func splitSegments(ctx context.Context, src io.ReaderAt, size int64, blobs Blobs, o WriteOptions) ([]byte, *wtxt.Index, []wtxt.Segment, error) {
	segSize := o.SegmentSize
	if segSize == 0 {
		segSize = DefaultSegmentSize
	}
	gb, _ := blobs.(GenerationBlobs)
	var known wtxt.KnownSegment
	if gb != nil {
		known = gb.Known
	}
	x, err := wtxt.ReadIndex(ctx, "", src, size)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrSkeleton, err)
	}
	var skel limitedBuffer
	skel.limit = MaxSkeleton
	sink := func(ctx context.Context, s wtxt.Segment, data []byte) error {
		if s.Size == 0 {
			return nil
		}
		if ok, err := blobs.Has(ctx, s.Digest); err != nil || ok {
			return err
		}
		return blobs.Put(ctx, s.Digest, data)
	}
	segs, keys, err := wtxt.SplitIndexed(ctx, src, size, &skel, sink, known, wtxt.SplitOptions{SegmentSize: segSize, MaxSegment: MaxPartLimit, File: o.File})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrSkeleton, err)
	}
	if gb != nil {
		for i, s := range segs {
			if err := gb.Hold(ctx, s, keys[i]); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	return skel.buf.Bytes(), x, segs, nil
}

// limitedBuffer buffers up to limit bytes.
type limitedBuffer struct {
	buf   bytes.Buffer
	limit int
}

func (w *limitedBuffer) Write(p []byte) (int, error) {
	if w.buf.Len()+len(p) > w.limit {
		return 0, fmt.Errorf("%w: skeleton larger than %d bytes", ErrSkeleton, w.limit)
	}
	return w.buf.Write(p)
}

// segments: DirWTXTSegs, MANIFEST + skeleton pieces; the segment blobs
// in Blobs (in a Git commit: seg/ of the same directory, GitBlobs).
type segments struct{}

func (segments) Name() Name         { return Segments }
func (segments) Holds(has Has) bool { return has(DirWTXTSegs) }
func (segments) Check(_ context.Context, tree fs.FS) error {
	_, err := checkManifest(tree, DirWTXTSegs)
	return err
}

func (segments) Write(ctx context.Context, src io.ReaderAt, size int64, tree TreeWriter, blobs Blobs, o WriteOptions) error {
	skel, x, segs, err := splitSegments(ctx, src, size, blobs, o)
	if err != nil {
		return err
	}
	_, err = writeParts(tree, DirWTXTSegs, func(emit func(Part, []byte) error) (*Manifest, error) {
		return CutSkeleton(skel, x, segs, emit)
	})
	return err
}

func (segments) Assemble(ctx context.Context, tree fs.FS, blobs Blobs, w io.Writer, b Budget) error {
	m, err := checkManifest(tree, DirWTXTSegs)
	if err != nil {
		return err
	}
	if err := b.over(DirWTXTSegs+"/"+ManifestName, m.Bytes); err != nil {
		return err
	}
	sub, err := fs.Sub(tree, DirWTXTSegs)
	if err != nil {
		return err
	}
	_, err = ReadSegmentsFrom(ctx, sub, budgetBlobs{blobs, b}, b.writer(w, DirWTXTSegs))
	return err
}

// skeleton: FileSkeleton; the segment blobs in Blobs (an OCI registry).
type skeleton struct{}

func (skeleton) Name() Name { return Skeleton }
func (skeleton) Holds(has Has) bool {
	return has(FileSkeleton) || has(FileSkeleton+PartsSuffix)
}

func (skeleton) Check(_ context.Context, tree fs.FS) error {
	f, err := tree.Open(FileSkeleton)
	if err != nil {
		return fmt.Errorf("%s: %w", FileSkeleton, notFound(err))
	}
	defer f.Close()
	if !hasPrefix(f, wtxt.SkeletonMagic+"\n") {
		return fmt.Errorf("%s: %w: does not start with %s", FileSkeleton, ErrSkeleton, wtxt.SkeletonMagic)
	}
	return nil
}

func (skeleton) Write(ctx context.Context, src io.ReaderAt, size int64, tree TreeWriter, blobs Blobs, o WriteOptions) error {
	skel, _, _, err := splitSegments(ctx, src, size, blobs, o)
	if err != nil {
		return err
	}
	return tree.WriteFile(FileSkeleton, skel)
}

func (skeleton) Assemble(ctx context.Context, tree fs.FS, blobs Blobs, w io.Writer, b Budget) error {
	n, err := fileSize(tree, FileSkeleton)
	if err != nil {
		return err
	}
	if err := b.over(FileSkeleton, n); err != nil {
		return err
	}
	f, err := tree.Open(FileSkeleton)
	if err != nil {
		return fmt.Errorf("%s: %w", FileSkeleton, notFound(err))
	}
	defer f.Close()
	_, err = wtxt.AssembleNamed(ctx, f, FileSkeleton, Source(budgetBlobs{blobs, b}), b.writer(w, FileSkeleton))
	return err
}

// MapTree is a TreeWriter in memory whose Files read back as an fs.FS
// (tests, and staging a generation before it is committed). WriteFile
// refuses a path fs.ValidPath refuses (absolute, "..", empty elements),
// one with a NUL or backslash, and one longer than MaxPathLen.
type MapTree struct {
	Files map[string][]byte
}

// MaxPathLen bounds a path a MapTree accepts.
const MaxPathLen = 4096

// ErrName reports a path a layout must not write.
var ErrName = errors.New("layout: bad path")

// WriteFile implements TreeWriter.
func (t *MapTree) WriteFile(name string, data []byte) error {
	if len(name) > MaxPathLen {
		return fmt.Errorf("%w: a path of %d bytes (limit %d)", ErrName, len(name), MaxPathLen)
	}
	if !fs.ValidPath(name) || name == "." || strings.ContainsAny(name, "\x00\\") {
		return fmt.Errorf("%w: %q", ErrName, name)
	}
	if t.Files == nil {
		t.Files = map[string][]byte{}
	}
	t.Files[name] = bytes.Clone(data)
	return nil
}
