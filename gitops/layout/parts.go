package layout

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// The split ("git-scale") layout is described in doc.go.

const (
	// ManifestName is the name of the part list inside a parts directory.
	ManifestName  = "MANIFEST"
	manifestMagic = "WTXT-PARTS 1"
	// MinPartLimit is the smallest accepted part limit.
	MinPartLimit = 64 << 10
	// MaxPartLimit stays below GitHub's 100 MiB hard file limit.
	MaxPartLimit = 95 << 20
	// DefaultPartLimit is small so that a changed chunk rewrites little:
	// a part is rewritten whole when any chunk in it changes, so the
	// repository grows by about (changed chunks) × (part size). 256 KiB
	// parts keep growth within ~3× the changed raw bytes for clustered
	// row changes (gitops/bench_test.go); a 256 MiB snapshot is ~1,500
	// parts, which Git handles easily.
	DefaultPartLimit = 256 << 10
	// MaxManifestSize bounds the MANIFEST file a reader accepts.
	MaxManifestSize = 16 << 20
	// maxLine is the longest WTXT line the structured splitter accepts.
	maxLine = 64 << 10
	// chunkSlack bounds the `ch` line + `endch` + `endarr` bytes in a part
	// holding lines of one oversized chunk.
	chunkSlack = 512
	// b64LineMax is the longest base64 line: 76 characters, space, parity, LF.
	b64LineMax = 79
	// maxPartName bounds part names (validPartName).
	maxPartName = 200
)

// ErrParts reports a malformed part directory, MANIFEST or WTXT structure.
var ErrParts = errors.New("gitops: parts")

// Part is one MANIFEST entry.
type Part struct {
	Name   string // file name inside the parts directory
	Size   int64  // bytes
	SHA256 string // lowercase hex SHA-256 of the part's bytes
}

// Manifest describes a split file: the parts in concatenation order, and
// the size and SHA-256 of the whole.
type Manifest struct {
	Bytes  int64
	SHA256 string
	Parts  []Part
}

// Encode renders the MANIFEST file (canonical: ParseManifest accepts
// exactly the bytes Encode produces).
func (m *Manifest) Encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s bytes=%d sha256=%s parts=%d\n", manifestMagic, m.Bytes, m.SHA256, len(m.Parts))
	for _, p := range m.Parts {
		fmt.Fprintf(&b, "%s %d %s\n", p.Name, p.Size, p.SHA256)
	}
	return b.Bytes()
}

// ParseManifest parses a MANIFEST file. It accepts only the canonical form
// written by Manifest.Encode and checks that part names are safe file names
// (no path separators, no leading dot), unique, and that the part sizes add
// up to the declared total.
func ParseManifest(data []byte) (*Manifest, error) {
	if len(data) > MaxManifestSize {
		return nil, fmt.Errorf("%w: MANIFEST: %d bytes exceeds limit %d", ErrParts, len(data), MaxManifestSize)
	}
	if len(data) == 0 || data[len(data)-1] != '\n' {
		return nil, fmt.Errorf("%w: MANIFEST: missing final LF", ErrParts)
	}
	lines := strings.Split(string(data[:len(data)-1]), "\n")
	var m Manifest
	f := strings.Split(lines[0], " ")
	if len(f) != 5 || f[0]+" "+f[1] != manifestMagic {
		return nil, fmt.Errorf("%w: MANIFEST line 1: want a %q header", ErrParts, manifestMagic)
	}
	bytesV, ok1 := strings.CutPrefix(f[2], "bytes=")
	shaV, ok2 := strings.CutPrefix(f[3], "sha256=")
	partsV, ok3 := strings.CutPrefix(f[4], "parts=")
	total, err1 := parseDec(bytesV)
	n, err2 := parseDec(partsV)
	if !ok1 || !ok2 || !ok3 || err1 != nil || err2 != nil || !wtxt.IsHex64(shaV) {
		return nil, fmt.Errorf("%w: MANIFEST line 1: bad header (want bytes=<dec> sha256=<hex64> parts=<dec>)", ErrParts)
	}
	if n != int64(len(lines)-1) {
		return nil, fmt.Errorf("%w: MANIFEST: header says %d parts, file lists %d", ErrParts, n, len(lines)-1)
	}
	m.Bytes, m.SHA256 = total, shaV
	m.Parts = make([]Part, 0, len(lines)-1)
	seen := make(map[string]bool, len(lines)-1)
	var sum int64
	for i, l := range lines[1:] {
		f := strings.Split(l, " ")
		if len(f) != 3 {
			return nil, fmt.Errorf("%w: MANIFEST line %d: want 3 fields, got %d", ErrParts, i+2, len(f))
		}
		size, err := parseDec(f[1])
		switch {
		case !validPartName(f[0]):
			return nil, fmt.Errorf("%w: MANIFEST line %d: bad part name (want [A-Za-z0-9_.-]+.part, at most %d bytes, no leading dot)", ErrParts, i+2, maxPartName)
		case seen[f[0]]:
			return nil, fmt.Errorf("%w: MANIFEST line %d: duplicate part %s", ErrParts, i+2, f[0])
		case err != nil:
			return nil, fmt.Errorf("%w: MANIFEST line %d: bad size (want a canonical decimal)", ErrParts, i+2)
		case !wtxt.IsHex64(f[2]):
			return nil, fmt.Errorf("%w: MANIFEST line %d: bad sha256 (want 64 lowercase hex digits)", ErrParts, i+2)
		}
		seen[f[0]] = true
		if sum += size; sum < 0 || sum > total {
			return nil, fmt.Errorf("%w: MANIFEST line %d: part sizes exceed total %d", ErrParts, i+2, total)
		}
		m.Parts = append(m.Parts, Part{Name: f[0], Size: size, SHA256: f[2]})
	}
	if sum != total {
		return nil, fmt.Errorf("%w: MANIFEST: part sizes add up to %d, header says %d", ErrParts, sum, total)
	}
	return &m, nil
}

// parseDec parses a canonical non-negative decimal (no sign, no leading zeros).
func parseDec(s string) (int64, error) {
	if s == "" || (len(s) > 1 && s[0] == '0') || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("not a canonical decimal: %q", s)
	}
	return strconv.ParseInt(s, 10, 64)
}

func validPartName(s string) bool {
	if !strings.HasSuffix(s, ".part") || len(s) > maxPartName || s[0] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !safeByte(s[i]) {
			return false
		}
	}
	return true
}

func safeByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// ArrayPartPrefix maps an array name to the prefix of its part names: the
// name with bytes outside [A-Za-z0-9_.-] replaced by '_', cut to 64 bytes,
// a leading '.' replaced by '_', then '.' and the first 8 hex digits of
// SHA-256(name).
func ArrayPartPrefix(name string) string {
	b := []byte(name)
	if len(b) > 64 {
		b = b[:64]
	}
	for i, c := range b {
		if !safeByte(c) {
			b[i] = '_'
		}
	}
	if len(b) > 0 && b[0] == '.' {
		b[0] = '_'
	}
	sum := sha256.Sum256([]byte(name))
	return string(b) + "." + hex.EncodeToString(sum[:4])
}

// SplitParts cuts the file r of the given size into parts of at most limit
// bytes (gitops/doc.go has the naming and cutting rules) and calls emit for
// each part in concatenation order, with its MANIFEST entry. emit must not
// retain data after it returns. SplitParts returns the manifest; the caller
// stores it as MANIFEST next to the parts.
//
// Input starting with the line "WTXT 1" is cut at array/chunk boundaries
// found by wtxt.ReadIndex (the one reading of the WTXT structure), so it
// must be structurally valid WTXT; anything else (a DELTA, an age-armored
// WTXT) is cut after the last LF that fits in a part, or at the limit when
// a part holds no LF. Every part is a contiguous byte range of r, read once.
func SplitParts(ctx context.Context, r io.ReaderAt, size, limit int64, emit func(p Part, data []byte) error) (*Manifest, error) {
	if limit < MinPartLimit || limit > MaxPartLimit {
		return nil, fmt.Errorf("%w: part limit %d outside [%d, %d]", ErrParts, limit, MinPartLimit, MaxPartLimit)
	}
	if size < 0 {
		return nil, fmt.Errorf("%w: negative size %d", ErrParts, size)
	}
	s := &splitter{ctx: ctx, r: r, limit: limit, emit: emit, all: sha256.New(), names: map[string]bool{}}
	var head [len(wtxtMagic)]byte
	n, err := r.ReadAt(head[:], 0)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("gitops: split: read: %w", err)
	}
	if string(head[:n]) == wtxtMagic {
		err = s.structured(size)
	} else {
		err = s.generic(size)
	}
	if err != nil {
		return nil, err
	}
	s.m.SHA256 = hex.EncodeToString(s.all.Sum(nil))
	return &s.m, nil
}

const wtxtMagic = "WTXT 1\n"

// splitter accumulates the current part as the byte range [start, end) of
// r and reads it when the part is complete.
type splitter struct {
	ctx        context.Context
	r          io.ReaderAt
	limit      int64
	emit       func(Part, []byte) error
	all        hash.Hash
	names      map[string]bool
	m          Manifest
	buf        []byte
	name       string
	start, end int64
}

// fits reports whether n more bytes fit in the current part.
func (s *splitter) fits(n int64) bool { return s.end-s.start+n <= s.limit }

// extend adds the byte range [s.end, to) to the current part.
func (s *splitter) extend(to int64, what string) error {
	if to < s.end {
		return fmt.Errorf("%w: %s: range ends at %d before %d", ErrParts, what, to, s.end)
	}
	if !s.fits(to - s.end) {
		return fmt.Errorf("%w: %s: part %s would exceed %d bytes", ErrParts, what, s.name, s.limit)
	}
	s.end = to
	return nil
}

// begin flushes the current part and starts part name at offset at.
func (s *splitter) begin(name string, at int64) error {
	if err := s.flush(); err != nil {
		return err
	}
	if s.names[name] {
		return fmt.Errorf("%w: offset %d: part name %s produced twice (array names collide after sanitizing)", ErrParts, at, name)
	}
	s.names[name] = true
	s.name, s.start, s.end = name, at, at
	return nil
}

func (s *splitter) flush() error {
	if s.name == "" {
		return nil
	}
	if err := s.ctx.Err(); err != nil {
		return err
	}
	n := s.end - s.start
	if int64(cap(s.buf)) < n {
		s.buf = make([]byte, n)
	}
	data := s.buf[:n]
	if k, err := s.r.ReadAt(data, s.start); int64(k) != n {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("gitops: split: part %s: read %d bytes at offset %d: %w", s.name, n, s.start, err)
	}
	sum := sha256.Sum256(data)
	s.all.Write(data)
	p := Part{Name: s.name, Size: n, SHA256: hex.EncodeToString(sum[:])}
	s.m.Parts = append(s.m.Parts, p)
	s.m.Bytes += n
	err := s.emit(p, data)
	s.name = ""
	return err
}

// generic cuts arbitrary bytes: each part ends after the last LF that fits,
// or exactly at the limit when the part would hold no LF. The LF is looked
// for backwards from the limit in 64 KiB windows.
func (s *splitter) generic(size int64) error {
	w := make([]byte, min(64<<10, s.limit))
	for off, n := int64(0), 0; off < size; n++ {
		end := min(off+s.limit, size)
		if end < size {
			cut, found := end, false
			for hi := end; hi > off && !found; {
				lo := max(off, hi-int64(len(w)))
				b := w[:hi-lo]
				if k, err := s.r.ReadAt(b, lo); k != len(b) {
					return fmt.Errorf("gitops: split: read %d bytes at offset %d: %w", len(b), lo, err)
				}
				if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
					cut, found = lo+int64(i)+1, true
				}
				hi = lo
			}
			end = cut
		}
		if err := s.begin(fmt.Sprintf("blob.%06d.part", n), off); err != nil {
			return err
		}
		s.end = end
		off = end
	}
	return s.flush()
}

// b64LineBytes is one full base64 body line: 76 characters, space, parity
// digit, LF.
const b64LineBytes = wtxt.B64Width + 3

// structured cuts a WTXT along the structure wtxt.ReadIndex reports.
func (s *splitter) structured(size int64) error {
	x, err := wtxt.ReadIndex(s.ctx, "", s.r, size)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrParts, err)
	}
	// The index tiles the file (ReadIndex refuses bytes after endwtxt, as
	// the verifier does), so its offsets are the cuts.
	trailer, headerEnd := x.TrailerStart, x.BodyStart
	if err := s.begin("0000-header.part", 0); err != nil {
		return err
	}
	if err := s.extend(headerEnd, "header"); err != nil {
		return err
	}
	at := headerEnd
	for i := range x.Arrays {
		a := &x.Arrays[i]
		if a.Start != at || a.End < a.Start {
			return fmt.Errorf("%w: array %d at offset %d: index not contiguous (want offset %d)", ErrParts, i, a.Start, at)
		}
		if err := s.array(a); err != nil {
			return err
		}
		at = a.End
	}
	if at != trailer {
		return fmt.Errorf("%w: offset %d: trailer expected at offset %d", ErrParts, at, trailer)
	}
	if err := s.begin("9999-trailer.part", trailer); err != nil {
		return err
	}
	if err := s.extend(size, "trailer"); err != nil {
		return err
	}
	return s.flush()
}

// array cuts one arr ... endarr block: a head part (arr + idx lines), then
// runs of chunks, a chunk larger than a part cut by base64 lines.
func (s *splitter) array(a *wtxt.IndexArray) error {
	prefix := ArrayPartPrefix(a.Name)
	where := func(ix int64) string { return fmt.Sprintf("array %d %q chunk %d", a.Line, prefix, ix) }
	if err := s.begin(prefix+".head.part", a.Start); err != nil {
		return err
	}
	if len(a.Chunks) == 0 {
		return s.extend(a.End, where(-1))
	}
	if err := s.extend(a.Chunks[0].Start, where(-1)); err != nil {
		return err
	}
	budget := s.limit - chunkSlack
	linesPerPart := budget / b64LineBytes
	perPart := int64(-1) // chunks per part, fixed by the first chunk's size
	forceNew := false    // the previous chunk was cut by lines
	for _, c := range a.Chunks {
		if c.Start != s.end || c.Data < c.Start || c.End < c.Data || c.Len < 0 {
			return fmt.Errorf("%w: %s: index not contiguous", ErrParts, where(c.IX))
		}
		lines := c.Lines // ReadIndex checked it is ceil(Len/57)
		// Upper bound of this chunk's encoded size: ch line, base64 lines,
		// endch, and room for the endarr that may follow.
		enc := (c.Data - c.Start) + lines*b64LineBytes + int64(len("endch\nendarr\n"))
		if perPart < 0 {
			perPart = max(1, budget/enc)
		}
		if enc <= budget {
			// A run of perPart chunks per part, aligned on ix; a chunk
			// that does not fit (odd geometry) starts a part of its own.
			if c.IX%perPart == 0 || forceNew || !s.fits(c.End-c.Start) {
				if err := s.begin(fmt.Sprintf("%s.c%06d.part", prefix, c.IX), c.Start); err != nil {
					return err
				}
			}
			if err := s.extend(c.End, where(c.IX)); err != nil {
				return err
			}
		} else {
			if err := s.begin(fmt.Sprintf("%s.c%06d.l%07d.part", prefix, c.IX, 0), c.Start); err != nil {
				return err
			}
			for k := linesPerPart; k < lines; k += linesPerPart {
				cut := c.Data + k*b64LineBytes
				if err := s.extend(cut, where(c.IX)); err != nil {
					return err
				}
				if err := s.begin(fmt.Sprintf("%s.c%06d.l%07d.part", prefix, c.IX, k), cut); err != nil {
					return err
				}
			}
			if err := s.extend(c.End, where(c.IX)); err != nil {
				return err
			}
		}
		// After a chunk cut by lines the next chunk starts a part of its own.
		forceNew = enc > budget
	}
	return s.extend(a.End, where(-1)+": endarr")
}

// Assemble writes the file stored in the parts directory dir to w: the parts
// in MANIFEST order, checking each part's size and SHA-256 and the whole
// file's size and SHA-256. On error, what was written to w must be
// discarded (a mismatch is only known after the part was written).
func Assemble(dir string, w io.Writer) error {
	return AssembleFS(os.DirFS(dir), ".", w)
}

// AssembleFS is Assemble for a directory dir (slash-separated, "." for the
// root) of fsys.
func AssembleFS(fsys fs.FS, dir string, w io.Writer) error {
	mf, err := fsys.Open(path.Join(dir, ManifestName))
	if err != nil {
		return fmt.Errorf("gitops: assemble: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(mf, MaxManifestSize+1))
	mf.Close()
	if err != nil {
		return fmt.Errorf("gitops: assemble: read MANIFEST: %w", err)
	}
	m, err := ParseManifest(data)
	if err != nil {
		return err
	}
	all := sha256.New()
	for _, p := range m.Parts {
		f, err := fsys.Open(path.Join(dir, p.Name))
		if err != nil {
			return fmt.Errorf("gitops: assemble: %w", err)
		}
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(w, h, all), io.LimitReader(f, p.Size+1))
		f.Close()
		if err != nil {
			return fmt.Errorf("gitops: assemble: part %s: %w", p.Name, err)
		}
		if n != p.Size {
			return fmt.Errorf("%w: part %s: %d bytes or more, MANIFEST says %d", ErrParts, p.Name, n, p.Size)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != p.SHA256 {
			return fmt.Errorf("%w: part %s: sha256 %s, MANIFEST says %s", ErrParts, p.Name, got, p.SHA256)
		}
	}
	if got := hex.EncodeToString(all.Sum(nil)); got != m.SHA256 {
		return fmt.Errorf("%w: assembled sha256 %s, MANIFEST says %s", ErrParts, got, m.SHA256)
	}
	return nil
}
