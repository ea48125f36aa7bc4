package gitops

import (
	"bufio"
	"bytes"
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
		return nil, fmt.Errorf("%w: MANIFEST line 1: want %q header, got %q", ErrParts, manifestMagic, truncate([]byte(lines[0])))
	}
	bytesV, ok1 := strings.CutPrefix(f[2], "bytes=")
	shaV, ok2 := strings.CutPrefix(f[3], "sha256=")
	partsV, ok3 := strings.CutPrefix(f[4], "parts=")
	total, err1 := parseDec(bytesV)
	n, err2 := parseDec(partsV)
	if !ok1 || !ok2 || !ok3 || err1 != nil || err2 != nil || !wtxt.IsHex64(shaV) {
		return nil, fmt.Errorf("%w: MANIFEST line 1: bad header %q", ErrParts, truncate([]byte(lines[0])))
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
			return nil, fmt.Errorf("%w: MANIFEST line %d: bad part name %q", ErrParts, i+2, truncate([]byte(f[0])))
		case seen[f[0]]:
			return nil, fmt.Errorf("%w: MANIFEST line %d: duplicate part %q", ErrParts, i+2, f[0])
		case err != nil:
			return nil, fmt.Errorf("%w: MANIFEST line %d: bad size %q", ErrParts, i+2, truncate([]byte(f[1])))
		case !wtxt.IsHex64(f[2]):
			return nil, fmt.Errorf("%w: MANIFEST line %d: bad sha256 %q", ErrParts, i+2, truncate([]byte(f[2])))
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

// arrayPartPrefix maps an array name to the prefix of its part names: the
// name with bytes outside [A-Za-z0-9_.-] replaced by '_', cut to 64 bytes,
// a leading '.' replaced by '_', then '.' and the first 8 hex digits of
// SHA-256(name).
func arrayPartPrefix(name string) string {
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

// Split cuts the file read from r into parts of at most limit bytes (see
// doc.go for the naming and cutting rules) and calls emit for each part in
// concatenation order. emit must not retain data after it returns. Split
// returns the manifest; the caller stores it as MANIFEST next to the parts.
//
// Input starting with the line "WTXT 1" is cut at array/chunk boundaries
// and must be structurally valid (arr/idx/ch/endch/endarr/endwtxt lines,
// base64 line counts matching `lines=`); anything else (a DELTA, an
// age-armored WTXT) is cut after the last LF that fits in a part, or at the
// limit when a part holds no LF.
func Split(r io.Reader, limit int64, emit func(name string, data []byte) error) (*Manifest, error) {
	if limit < MinPartLimit || limit > MaxPartLimit {
		return nil, fmt.Errorf("%w: part limit %d outside [%d, %d]", ErrParts, limit, MinPartLimit, MaxPartLimit)
	}
	s := &splitter{br: bufio.NewReaderSize(r, maxLine), limit: limit, emit: emit, all: sha256.New(), names: map[string]bool{}}
	head, err := s.br.Peek(len("WTXT 1\n"))
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("gitops: split: read: %w", err)
	}
	if string(head) == "WTXT 1\n" {
		err = s.structured()
	} else {
		err = s.generic()
	}
	if err != nil {
		return nil, err
	}
	s.m.SHA256 = hex.EncodeToString(s.all.Sum(nil))
	return &s.m, nil
}

type splitter struct {
	br     *bufio.Reader
	limit  int64
	emit   func(string, []byte) error
	all    hash.Hash
	names  map[string]bool
	m      Manifest
	buf    bytes.Buffer
	name   string
	lineNo int
	peeked []byte
}

func (s *splitter) peekLine() ([]byte, error) {
	if s.peeked != nil {
		return s.peeked, nil
	}
	l, err := s.br.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull:
		return nil, fmt.Errorf("%w: line %d longer than %d bytes", ErrParts, s.lineNo+1, maxLine)
	case err == io.EOF && len(l) > 0:
		return nil, fmt.Errorf("%w: line %d: missing final LF", ErrParts, s.lineNo+1)
	case err == io.EOF:
		return nil, io.EOF
	case err != nil:
		return nil, fmt.Errorf("gitops: split: read line %d: %w", s.lineNo+1, err)
	}
	s.peeked = l
	return l, nil
}

// next returns the next line (valid until the following read) or io.EOF.
func (s *splitter) next() ([]byte, error) {
	l, err := s.peekLine()
	if err != nil {
		return nil, err
	}
	s.peeked = nil
	s.lineNo++
	return l, nil
}

// fits reports whether n more bytes fit in the current part.
func (s *splitter) fits(n int) bool { return int64(s.buf.Len()+n) <= s.limit }

// add appends a line to the current part.
func (s *splitter) add(l []byte) error {
	if !s.fits(len(l)) {
		return fmt.Errorf("%w: line %d: part %s would exceed %d bytes", ErrParts, s.lineNo, s.name, s.limit)
	}
	s.buf.Write(l)
	return nil
}

func (s *splitter) start(name string) error {
	if err := s.flush(); err != nil {
		return err
	}
	if s.names[name] {
		return fmt.Errorf("%w: line %d: part name %s produced twice (array names collide after sanitizing)", ErrParts, s.lineNo, name)
	}
	s.names[name] = true
	s.name = name
	return nil
}

func (s *splitter) flush() error {
	if s.name == "" {
		return nil
	}
	data := s.buf.Bytes()
	sum := sha256.Sum256(data)
	s.all.Write(data)
	s.m.Parts = append(s.m.Parts, Part{Name: s.name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])})
	s.m.Bytes += int64(len(data))
	err := s.emit(s.name, data)
	s.buf.Reset()
	s.name = ""
	return err
}

// generic cuts arbitrary bytes: each part ends after the last LF that fits,
// or exactly at the limit when the part would hold no LF.
func (s *splitter) generic() error {
	buf := make([]byte, 0, min(s.limit, 1<<20))
	carry := []byte(nil)
	n := 0
	eof := false
	for {
		// Fill the current part up to the limit.
		s.buf.Reset()
		s.buf.Write(carry)
		carry = carry[:0]
		for !eof && int64(s.buf.Len()) < s.limit {
			want := min(int64(cap(buf)), s.limit-int64(s.buf.Len()))
			k, err := io.ReadFull(s.br, buf[:want])
			s.buf.Write(buf[:k])
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				eof = true
			} else if err != nil {
				return fmt.Errorf("gitops: split: read: %w", err)
			}
		}
		if s.buf.Len() == 0 {
			return nil
		}
		data := s.buf.Bytes()
		if !eof {
			// More may follow: cut after the last LF if there is one.
			if i := bytes.LastIndexByte(data, '\n'); i >= 0 && i+1 < len(data) {
				carry = append(carry, data[i+1:]...)
				s.buf.Truncate(i + 1)
			}
		}
		name := fmt.Sprintf("blob.%06d.part", n)
		n++
		s.names[name] = true
		s.name = name
		if err := s.flush(); err != nil {
			return err
		}
		if eof && len(carry) == 0 {
			return nil
		}
	}
}

func fieldValue(line []byte, key string) (string, bool) {
	for _, f := range strings.Fields(string(line)) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v, true
		}
	}
	return "", false
}

func (s *splitter) structured() error {
	if err := s.start("0000-header.part"); err != nil {
		return err
	}
	for {
		l, err := s.peekLine()
		if err == io.EOF {
			return fmt.Errorf("%w: line %d: missing endwtxt", ErrParts, s.lineNo)
		}
		if err != nil {
			return err
		}
		switch {
		case bytes.HasPrefix(l, []byte("arr ")):
			if err := s.array(); err != nil {
				return err
			}
		case bytes.HasPrefix(l, []byte("audit ")) || string(l) == "endwtxt\n":
			return s.trailer()
		default:
			if s.name != "0000-header.part" {
				return fmt.Errorf("%w: line %d: unexpected %q between arrays", ErrParts, s.lineNo+1, truncate(l))
			}
			l, _ = s.next()
			if err := s.add(l); err != nil {
				return err
			}
		}
	}
}

// trailer consumes the optional audit line and endwtxt, which must be last.
func (s *splitter) trailer() error {
	if err := s.start("9999-trailer.part"); err != nil {
		return err
	}
	l, _ := s.next()
	if bytes.HasPrefix(l, []byte("audit ")) {
		if err := s.add(l); err != nil {
			return err
		}
		var err error
		if l, err = s.next(); err == io.EOF {
			return fmt.Errorf("%w: line %d: missing endwtxt after audit", ErrParts, s.lineNo)
		} else if err != nil {
			return err
		}
	}
	if string(l) != "endwtxt\n" {
		return fmt.Errorf("%w: line %d: want endwtxt, got %q", ErrParts, s.lineNo, truncate(l))
	}
	if err := s.add(l); err != nil {
		return err
	}
	if _, err := s.peekLine(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("%w: line %d: data after endwtxt", ErrParts, s.lineNo+1)
		}
		return err
	}
	return s.flush()
}

func truncate(l []byte) string {
	if len(l) > 40 {
		return string(l[:40]) + "..."
	}
	return strings.TrimSuffix(string(l), "\n")
}

// array consumes one `arr` ... `endarr` block.
func (s *splitter) array() error {
	l, _ := s.next()
	name, ok := fieldValue(l, "name")
	if !ok || name == "" {
		return fmt.Errorf("%w: line %d: arr line without name", ErrParts, s.lineNo)
	}
	prefix := arrayPartPrefix(name)
	if err := s.start(prefix + ".head.part"); err != nil {
		return err
	}
	if err := s.add(l); err != nil {
		return err
	}
	if l, err := s.peekLine(); err == nil && bytes.HasPrefix(l, []byte("idx ")) {
		l, _ = s.next()
		if err := s.add(l); err != nil {
			return err
		}
	}
	budget := s.limit - chunkSlack
	linesPerPart := budget / b64LineMax
	perPart := int64(-1) // chunks per part, fixed by the first chunk's size
	wantIx := int64(0)
	forceNew := false // the previous chunk was cut by lines
	for {
		l, err := s.next()
		if err == io.EOF {
			return fmt.Errorf("%w: array %q: missing endarr", ErrParts, name)
		}
		if err != nil {
			return err
		}
		if string(l) == "endarr\n" {
			if !s.fits(len(l)) { // only possible when the array has no chunk
				return fmt.Errorf("%w: line %d: array %q: endarr does not fit", ErrParts, s.lineNo, name)
			}
			return s.add(l)
		}
		if !bytes.HasPrefix(l, []byte("ch ")) {
			return fmt.Errorf("%w: line %d: array %q: expected ch or endarr, got %q", ErrParts, s.lineNo, name, truncate(l))
		}
		ixs, _ := fieldValue(l, "ix")
		ix, err1 := strconv.ParseInt(ixs, 10, 64)
		ls, _ := fieldValue(l, "lines")
		lines, err2 := strconv.ParseInt(ls, 10, 64)
		if err1 != nil || err2 != nil || ix != wantIx || lines < 0 || lines > 1<<40 {
			return fmt.Errorf("%w: line %d: array %q: bad ch line (want ix %d)", ErrParts, s.lineNo, name, wantIx)
		}
		wantIx++
		// Upper bound of this chunk's encoded size: ch line, base64 lines,
		// endch, and room for the endarr that may follow.
		enc := int64(len(l)) + lines*b64LineMax + int64(len("endch\nendarr\n"))
		if perPart < 0 {
			perPart = max(1, budget/enc)
		}
		chName := fmt.Sprintf("%s.c%06d.part", prefix, ix)
		if enc <= budget {
			// A run of perPart chunks per part, aligned on ix; a chunk
			// that does not fit (odd geometry) starts a part of its own.
			if ix%perPart == 0 || forceNew || !s.fits(int(enc)) {
				if err := s.start(chName); err != nil {
					return err
				}
			}
		} else if err := s.start(fmt.Sprintf("%s.c%06d.l%07d.part", prefix, ix, 0)); err != nil {
			return err
		}
		if err := s.add(l); err != nil {
			return err
		}
		for k := int64(0); ; k++ {
			l, err := s.next()
			if err == io.EOF {
				return fmt.Errorf("%w: array %q chunk %d: missing endch", ErrParts, name, ix)
			}
			if err != nil {
				return err
			}
			if string(l) == "endch\n" {
				if k != lines {
					return fmt.Errorf("%w: line %d: array %q chunk %d: %d base64 lines, ch says %d", ErrParts, s.lineNo, name, ix, k, lines)
				}
				if err := s.add(l); err != nil {
					return err
				}
				break
			}
			if len(l) > b64LineMax || k >= lines {
				return fmt.Errorf("%w: line %d: array %q chunk %d: base64 line %d too long or beyond lines=%d", ErrParts, s.lineNo, name, ix, k, lines)
			}
			if enc > budget && k > 0 && k%linesPerPart == 0 {
				if err := s.start(fmt.Sprintf("%s.c%06d.l%07d.part", prefix, ix, k)); err != nil {
					return err
				}
			}
			if err := s.add(l); err != nil {
				return err
			}
		}
		// After a chunk cut by lines the next chunk starts a part of its own.
		forceNew = enc > budget
	}
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
