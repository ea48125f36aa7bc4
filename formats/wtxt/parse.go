package wtxt

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/snapshot"
)

// lineReader reads LF-terminated lines with line numbers and text-rule
// checks, never holding more than MaxLineLen bytes of one line.
type lineReader struct {
	r    *bufio.Reader
	n    int   // number of the last line returned
	off  int64 // file offset of the next line
	file string
	// last is the offset at which the last returned line started.
	last int64
}

func newLineReader(r io.Reader, file string) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 2*MaxLineLen), file: file}
}

func (lr *lineReader) errf(check Check, format string, a ...any) *Error {
	return &Error{File: lr.file, Line: lr.n, Chunk: -1, Check: check, Msg: fmt.Sprintf(format, a...)}
}

// raw returns the next line without its LF and without text checks. The
// slice is valid until the next call. At a clean end of input it returns
// io.EOF.
func (lr *lineReader) raw() ([]byte, error) {
	line, err := lr.r.ReadSlice('\n')
	if err == bufio.ErrBufferFull || (err == nil && len(line) > MaxLineLen+1) {
		lr.n++
		return nil, lr.errf(CheckText, "line longer than %d bytes", MaxLineLen)
	}
	if err == io.EOF {
		if len(line) == 0 {
			return nil, io.EOF
		}
		lr.n++
		return nil, lr.errf(CheckText, "last line does not end with LF")
	}
	if err != nil {
		return nil, err
	}
	lr.n++
	lr.last = lr.off
	lr.off += int64(len(line))
	return line[:len(line)-1], nil
}

// fullLines consumes up to max consecutive base64 lines of the full shape
// (76 characters of the standard alphabet, a space, the right parity digit,
// LF) that are already in the read buffer, decoding them into dst (57 bytes
// each; at most len(dst)/57 lines). It never reads, so read errors surface
// through raw as usual. It stops before the first line that does not have
// exactly that form and returns how many it consumed; the caller reads that
// one with raw and reports what is wrong. Skipping raw's per-line
// ReadSlice, text checks and base64 call saved about 0.25 CPU-s per GiB
// (verify went from 3.1 to 2.85 CPU-s per GiB on the 256 MiB benchmark).
func (lr *lineReader) fullLines(dst []byte, max int64) int64 {
	m := min(max, int64(len(dst)/rawPerLine), int64(lr.r.Buffered()/lineOut))
	if m <= 0 {
		return 0
	}
	buf, err := lr.r.Peek(int(m) * lineOut) // buffered: cannot fail
	if err != nil {
		return 0
	}
	var i int64
	for ; i < m; i++ {
		l := buf[i*lineOut : (i+1)*lineOut]
		if l[B64Width] != ' ' || l[lineOut-1] != '\n' {
			break
		}
		p, ok := decodeFullLine(dst[i*rawPerLine:], l)
		if !ok || p != l[B64Width+1] {
			break
		}
	}
	if i == 0 {
		return 0
	}
	lr.r.Discard(int(i) * lineOut)
	lr.n += int(i)
	lr.last = lr.off + (i-1)*lineOut
	lr.off += i * lineOut
	return i
}

// next returns the next line after checking the text rules.
func (lr *lineReader) next() ([]byte, error) {
	line, err := lr.raw()
	if err == io.EOF {
		lr.n++
		return nil, lr.errf(CheckTruncated, "unexpected end of file (no endwtxt)")
	}
	if err != nil {
		return nil, err
	}
	if err := checkText(line); err != "" {
		return nil, lr.errf(CheckText, "%s", err)
	}
	return line, nil
}

// checkText applies profile section 1 to one line (without LF).
func checkText(line []byte) string {
	if len(line) == 0 {
		return "empty line"
	}
	for i, c := range line {
		if c < 0x20 || c > 0x7e {
			switch c {
			case '\r':
				return fmt.Sprintf("CR at column %d: lines must end with LF only", i+1)
			case '\t':
				return fmt.Sprintf("tab at column %d", i+1)
			}
			return fmt.Sprintf("byte 0x%02x at column %d is not printable ASCII", c, i+1)
		}
	}
	if line[len(line)-1] == ' ' {
		return "trailing space"
	}
	return ""
}

// fields splits "kw k1=v1 k2=v2" and checks kw and the keys, in order.
// Values are plain (no quotes, spaces) unless quotedLast is set, in which
// case the last field's value is a quoted string (spaces allowed).
func fields(line []byte, kw string, keys []string, quotedLast bool) ([]string, string) {
	s := string(line)
	if !strings.HasPrefix(s, kw+" ") {
		return nil, fmt.Sprintf("want %q line", kw)
	}
	s = s[len(kw)+1:]
	vals := make([]string, len(keys))
	for i, k := range keys {
		if !strings.HasPrefix(s, k+"=") {
			return nil, fmt.Sprintf("%s line: field %d must be %s=", kw, i+1, k)
		}
		s = s[len(k)+1:]
		last := i == len(keys)-1
		if last && quotedLast {
			if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' || strings.Contains(s[1:len(s)-1], `"`) {
				return nil, fmt.Sprintf("%s line: %s must be a quoted value", kw, k)
			}
			vals[i] = s
			s = ""
			break
		}
		end := strings.IndexByte(s, ' ')
		if last {
			if end >= 0 {
				return nil, fmt.Sprintf("%s line: unexpected text after %s", kw, k)
			}
			end = len(s)
		} else if end < 0 {
			return nil, fmt.Sprintf("%s line: missing fields after %s", kw, k)
		}
		v := s[:end]
		if strings.Contains(v, `"`) {
			return nil, fmt.Sprintf("%s line: %s: quote in a plain value", kw, k)
		}
		vals[i] = v
		if last {
			s = ""
		} else {
			s = s[end+1:]
		}
	}
	return vals, ""
}

// parseDec parses a canonical decimal (no sign, no leading zeros) or, with
// width > 0, one zero-padded to exactly max(width, digits) digits.
func parseDec(s string, width int) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	want := strconv.FormatInt(v, 10)
	if len(want) < width {
		want = strings.Repeat("0", width-len(want)) + want
	}
	return v, s == want
}

func parseHex(s string, n int) ([]byte, bool) {
	if len(s) != 2*n {
		return nil, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return nil, false
		}
	}
	b, err := hex.DecodeString(s)
	return b, err == nil
}

func parseHex32(s string) ([32]byte, bool) {
	var out [32]byte
	b, ok := parseHex(s, 32)
	copy(out[:], b)
	return out, ok
}

// Header is a parsed WTXT header.
type Header struct {
	Meta snapshot.Meta
	// Root holds gen, ts and build exactly as written (they enter the
	// Merkle hash as text) and the root line's hashes (zero with Pending:
	// see Complete).
	Root
	Caps      []string
	TensorExt bool
	// Pending is set for a streamed snapshot (root_pending, no sign line).
	Pending bool
	Fastxor uint64
	// Signature and KeyID come from the sign line (nil/"" when absent).
	Signature []byte
	KeyID     string
	// Signed holds the bytes the signature covers: from "WTXT 1" through
	// the LF of the root (or root_pending) line.
	Signed []byte
	// Lines is the number of header lines (4, or 5 with a sign line).
	Lines int
}

var metaKeys = []string{"schema", "gen", "ts", "build", "endian", "host", "cuda"}

// readHeader parses the header lines. The line after the header (the first
// arr line, audit or endwtxt) is returned unconsumed as next.
func readHeader(lr *lineReader) (h *Header, next []byte, err error) {
	h = &Header{}
	var signed bytes.Buffer
	line, err := lr.next()
	if err != nil {
		return nil, nil, err
	}
	if string(line) != magicLine {
		return nil, nil, lr.errf(CheckGrammar, "first line must be %q", magicLine)
	}
	signed.Write(line)
	signed.WriteByte('\n')

	if line, err = lr.next(); err != nil {
		return nil, nil, err
	}
	v, msg := fields(line, "meta", metaKeys, false)
	if msg != "" {
		return nil, nil, lr.errf(CheckGrammar, "%s", msg)
	}
	for _, i := range []int{0, 3, 5, 6} {
		if !IsToken(v[i]) {
			return nil, nil, lr.errf(CheckGrammar, "meta %s: want one or more of A-Z a-z 0-9 . _ - / : + (got %d bytes, not a token)", metaKeys[i], len(v[i]))
		}
	}
	gen, ok := parseDec(v[1], 6)
	if !ok {
		return nil, nil, lr.errf(CheckGrammar, "meta gen: want a decimal zero-padded to 6 digits (got %d bytes)", len(v[1]))
	}
	ts, terr := ParseTS(v[2])
	if terr != nil {
		return nil, nil, lr.errf(CheckGrammar, "meta ts: %v", terr)
	}
	if v[4] != "LE" {
		return nil, nil, lr.errf(CheckGrammar, "meta endian: only LE is defined (got %d bytes)", len(v[4]))
	}
	h.Meta = snapshot.Meta{Schema: v[0], Gen: uint64(gen), TS: ts, Build: v[3], Host: v[5], Cuda: v[6]}
	h.Gen, h.TS, h.Build = v[1], v[2], v[3]
	signed.Write(line)
	signed.WriteByte('\n')

	if line, err = lr.next(); err != nil {
		return nil, nil, err
	}
	v, msg = fields(line, "cap", []string{"ext"}, false)
	if msg != "" {
		return nil, nil, lr.errf(CheckGrammar, "%s", msg)
	}
	h.Caps = strings.Split(v[0], ",")
	if !strings.HasPrefix(v[0]+",", baseCaps+",") {
		return nil, nil, lr.errf(CheckGrammar, "cap ext must start with %s", baseCaps)
	}
	for _, c := range h.Caps {
		if c == "" {
			return nil, nil, lr.errf(CheckGrammar, "cap ext: empty item")
		}
		if c == capTensorExt {
			h.TensorExt = true
		}
	}
	signed.Write(line)
	signed.WriteByte('\n')

	if line, err = lr.next(); err != nil {
		return nil, nil, err
	}
	if bytes.HasPrefix(line, []byte("root_pending ")) {
		v, msg = fields(line, "root_pending", []string{"sha256_all", "note"}, true)
		if msg != "" {
			return nil, nil, lr.errf(CheckGrammar, "%s", msg)
		}
		if v[0] != strings.Repeat("0", 64) || "note="+v[1] != pendingNote {
			return nil, nil, lr.errf(CheckGrammar, "root_pending must be exactly `root_pending sha256_all=<64 zeros> %s`", pendingNote)
		}
		h.Pending = true
	} else {
		v, msg = fields(line, "root", []string{"sha256_all", "merkle_prev", "merkle_this", "fastxor"}, false)
		if msg != "" {
			return nil, nil, lr.errf(CheckGrammar, "%s", msg)
		}
		var ok1, ok2, ok3 bool
		h.SHA256All, ok1 = parseHex32(v[0])
		h.MerklePrev, ok2 = parseHex32(v[1])
		h.MerkleThis, ok3 = parseHex32(v[2])
		fx, ok4 := parseHex(v[3], 8)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, nil, lr.errf(CheckGrammar, "root: values must be lowercase hex (64, 64, 64, 16 digits)")
		}
		for _, b := range fx {
			h.Fastxor = h.Fastxor<<8 | uint64(b)
		}
	}
	signed.Write(line)
	signed.WriteByte('\n')
	h.Signed = signed.Bytes()
	h.Lines = 4

	if line, err = lr.next(); err != nil {
		return nil, nil, err
	}
	if bytes.HasPrefix(line, []byte("sign ")) {
		if h.Pending {
			return nil, nil, lr.errf(CheckGrammar, "a streamed snapshot (root_pending) has no sign line: the signature goes into the WSUM")
		}
		v, msg = fields(line, "sign", []string{"ed25519", "keyid"}, false)
		if msg != "" {
			return nil, nil, lr.errf(CheckGrammar, "%s", msg)
		}
		sig, derr := base64.StdEncoding.Strict().DecodeString(v[0])
		if derr != nil || len(sig) != 64 || len(v[0]) != 88 {
			return nil, nil, lr.errf(CheckGrammar, "sign ed25519: want base64 of 64 bytes (88 chars)")
		}
		if _, ok := parseHex(v[1], 8); !ok {
			return nil, nil, lr.errf(CheckGrammar, "sign keyid: want 16 lowercase hex digits")
		}
		h.Signature, h.KeyID = sig, v[1]
		h.Lines = 5
		if line, err = lr.next(); err != nil {
			return nil, nil, err
		}
	}
	return h, line, nil
}

// ReadHeader reads and checks only the header of a WTXT file.
func ReadHeader(r io.Reader) (*Header, error) {
	h, _, err := readHeader(newLineReader(r, ""))
	return h, err
}

// arrHead is a parsed arr (+ idx) line.
type arrHead struct {
	name   string
	dt     snapshot.DType
	shape  []int64
	nbytes int64
	sha    [32]byte
	mac    [32]byte
	salt   [8]byte
	line   string
	geo    geometry
	ext    bool // needs tensor_ext
	lineNo int
}

var arrKeys = []string{"name", "dtype", "shape", "order", "bytes", "sha256", "hmac", "salt"}

func parseArr(line []byte) (*arrHead, string) {
	v, msg := fields(line, "arr", arrKeys, false)
	if msg != "" {
		return nil, msg
	}
	a := &arrHead{name: v[0], line: string(line)}
	ext, ok := NameNeedsExt(a.name)
	if !ok {
		return nil, fmt.Sprintf("arr name: want 1..%d bytes of A-Z a-z 0-9 _ . : / - (got %d bytes)", MaxNameLen, len(a.name))
	}
	dt, err := snapshot.ParseDType(v[1])
	if err != nil {
		return nil, fmt.Sprintf("arr name=%s: %v", a.name, err)
	}
	a.dt = dt
	if v[2] != "" {
		parts := strings.Split(v[2], ",")
		if len(parts) > MaxRank {
			return nil, fmt.Sprintf("arr name=%s: rank %d exceeds %d", a.name, len(parts), MaxRank)
		}
		for _, p := range parts {
			d, ok := parseDec(p, 0)
			if !ok {
				return nil, fmt.Sprintf("arr name=%s: shape: dims must be canonical decimals joined by ',' (got %d bytes)", a.name, len(v[2]))
			}
			a.shape = append(a.shape, d)
		}
	}
	if v[3] != "C" {
		return nil, fmt.Sprintf("arr name=%s: order: only C is defined (got %d bytes)", a.name, len(v[3]))
	}
	n, ok := parseDec(v[4], 0)
	if !ok {
		return nil, fmt.Sprintf("arr name=%s: bytes: not a canonical decimal (got %d bytes)", a.name, len(v[4]))
	}
	arr := snapshot.Array{Name: a.name, DType: dt, Shape: a.shape}
	want, err := arr.NumBytes()
	if err != nil || want != n {
		return nil, fmt.Sprintf("arr name=%s: bytes=%d but shape %s × %s needs %d", a.name, n, v[2], dt, want)
	}
	a.nbytes = n
	var ok1, ok2 bool
	a.sha, ok1 = parseHex32(v[5])
	a.mac, ok2 = parseHex32(v[6])
	salt, ok3 := parseHex(v[7], 8)
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Sprintf("arr name=%s: sha256, hmac, salt must be lowercase hex (64, 64, 16 digits)", a.name)
	}
	copy(a.salt[:], salt)
	a.ext = ext || arrayNeedsExt(a.name, dt, a.shape, n)
	return a, ""
}

// parseIdx parses an idx line for array a and sets its geometry.
func parseIdx(line []byte, a *arrHead) string {
	v, msg := fields(line, "idx", []string{"rows_per_chunk", "row_size", "row_blocking"}, false)
	if msg != "" {
		return msg
	}
	rpc, ok1 := parseDec(v[0], 0)
	rs, ok2 := parseDec(v[1], 0)
	if !ok1 || !ok2 || rpc < 1 {
		return "idx: rows_per_chunk (>= 1) and row_size must be canonical decimals"
	}
	if v[2] != "on" {
		return fmt.Sprintf("idx: row_blocking: an idx line is written only for row-blocked arrays (on) (got %d bytes)", len(v[2]))
	}
	if len(a.shape) == 0 || a.nbytes == 0 {
		return "idx: rank-0 and zero-size arrays are not row-blocked"
	}
	if want := rowSizeOf(a.dt, a.shape); rs != want {
		return fmt.Sprintf("idx: row_size=%d, but the shape gives %d", rs, want)
	}
	if want := canonicalRowsPerChunk(rs, a.nbytes, rpc); want != rpc {
		return fmt.Sprintf("idx: rows_per_chunk=%d makes one chunk of all %d rows; the only value accepted for that is %d (docs/FORMAT.md: rows_per_chunk)", rpc, a.nbytes/rs, want)
	}
	a.geo = geometry{blocked: true, rowsPerChunk: rpc, rowSize: rs, nbytes: a.nbytes, chunkLen: geometryChunkLen(rpc, rs, a.nbytes)}
	return ""
}

// idxPresence checks that a has an idx line exactly when it is
// row-blocked: every array of rank >= 1 with bytes > 0 is (the writer
// blocks them all), rank-0 and zero-size arrays are not. Accepting a
// missing idx line would let it be deleted from a signed file unnoticed
// (no hash covers it), read as the 32768-byte default geometry.
func idxPresence(a *arrHead) string {
	if len(a.shape) > 0 && a.nbytes > 0 && !a.geo.blocked {
		return "idx line missing: every array of rank >= 1 with bytes > 0 is row-blocked"
	}
	return ""
}

// chHead is a parsed ch line.
type chHead struct {
	ix, off, n int64
	sha        [32]byte
	crc        uint32
	lines      int64
}

var chKeys = []string{"ix", "off", "len", "sha256", "crc32c", "b64", "width", "lines"}

func parseCh(line []byte) (*chHead, string) {
	v, msg := fields(line, "ch", chKeys, false)
	if msg != "" {
		return nil, msg
	}
	c := &chHead{}
	var ok bool
	if c.ix, ok = parseDec(v[0], 6); !ok {
		return nil, fmt.Sprintf("ch ix: want a decimal zero-padded to 6 digits (got %d bytes)", len(v[0]))
	}
	if c.off, ok = parseDec(v[1], 12); !ok {
		return nil, fmt.Sprintf("ch off: want a decimal zero-padded to 12 digits (got %d bytes)", len(v[1]))
	}
	if c.n, ok = parseDec(v[2], 0); !ok {
		return nil, fmt.Sprintf("ch len: not a canonical decimal (got %d bytes)", len(v[2]))
	}
	if c.sha, ok = parseHex32(v[3]); !ok {
		return nil, "ch sha256: want 64 lowercase hex digits"
	}
	crc, ok := parseHex(v[4], 4)
	if !ok {
		return nil, "ch crc32c: want 8 lowercase hex digits"
	}
	c.crc = uint32(crc[0])<<24 | uint32(crc[1])<<16 | uint32(crc[2])<<8 | uint32(crc[3])
	if v[5] != "on" || v[6] != "76" {
		return nil, "ch: b64=on width=76 are the only defined values"
	}
	if c.lines, ok = parseDec(v[7], 0); !ok {
		return nil, fmt.Sprintf("ch lines: not a canonical decimal (got %d bytes)", len(v[7]))
	}
	return c, ""
}

// WSUM is a parsed streaming finalization line.
type WSUM struct {
	// Root holds the line's sha256_all, merkle_prev and merkle_this; its
	// Gen, TS and Build are empty (the line does not carry them:
	// Header.Complete joins the two).
	Root
	// Signature is nil when unsigned.
	Signature []byte
	// Unsigned is the line's bytes before " sign=" (the signed part).
	Unsigned []byte
}

// Complete is the root of a streamed file: h's gen, ts and build with the
// hashes of its WSUM w (nil: h's own root line's).
func (h *Header) Complete(w *WSUM) Root {
	r := h.Root
	if w != nil {
		r.SHA256All, r.MerklePrev, r.MerkleThis = w.SHA256All, w.MerklePrev, w.MerkleThis
	}
	return r
}

// ErrWSUM is wrapped by WSUM parse errors.
var ErrWSUM = errors.New("invalid WSUM")

// ParseWSUM parses a WSUM file: exactly one line and its LF.
func ParseWSUM(b []byte) (*WSUM, error) {
	fail := func(format string, a ...any) error {
		return &Error{Line: 1, Chunk: -1, Check: CheckWSUM, Msg: fmt.Sprintf(format, a...), Err: ErrWSUM}
	}
	if len(b) > 1024 {
		return nil, fail("%d bytes is too long for a WSUM line", len(b))
	}
	if len(b) == 0 || b[len(b)-1] != '\n' || bytes.IndexByte(b, '\n') != len(b)-1 {
		return nil, fail("want exactly one line ending in LF")
	}
	line := b[:len(b)-1]
	if msg := checkText(line); msg != "" {
		return nil, fail("%s", msg)
	}
	w := &WSUM{}
	keys := []string{"sha256_all", "merkle_prev", "merkle_this"}
	signed := bytes.Contains(line, []byte(" sign="))
	if signed {
		keys = append(keys, "sign")
	}
	if !bytes.HasPrefix(line, []byte("WSUM 1 ")) {
		return nil, fail("must start with \"WSUM 1 \"")
	}
	v, msg := fields(line, "WSUM 1", keys, false)
	if msg != "" {
		return nil, fail("%s", msg)
	}
	var ok1, ok2, ok3 bool
	w.SHA256All, ok1 = parseHex32(v[0])
	w.MerklePrev, ok2 = parseHex32(v[1])
	w.MerkleThis, ok3 = parseHex32(v[2])
	if !ok1 || !ok2 || !ok3 {
		return nil, fail("sha256_all, merkle_prev, merkle_this must be 64 lowercase hex digits")
	}
	if signed {
		sig, err := base64.StdEncoding.Strict().DecodeString(v[3])
		if err != nil || len(sig) != 64 || len(v[3]) != 88 {
			return nil, fail("sign: want base64 of a 64-byte Ed25519 signature")
		}
		w.Signature = sig
		w.Unsigned = line[:bytes.Index(line, []byte(" sign="))]
	} else {
		w.Unsigned = line
	}
	return w, nil
}
