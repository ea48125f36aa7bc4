package fold

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// openZip opens an in-memory zip archive with a member-count bound.
func openZip(payload []byte) (*zip.Reader, error) {
	zr, err := zip.NewReader(bytes.NewReader(payload), int64(len(payload)))
	if err != nil {
		return nil, fmt.Errorf("zip: %w", err)
	}
	if len(zr.File) > MaxZipMembers {
		return nil, fmt.Errorf("zip: %d members exceed limit %d", len(zr.File), MaxZipMembers)
	}
	return zr, nil
}

// memberBytes returns a zip member's uncompressed bytes. For a STORED
// member it returns the slice of payload and its offset (zero-copy);
// DEFLATED members are inflated with the declared size as cap and their
// CRC-32 checked. Other methods return ok=false.
func memberBytes(payload []byte, f *zip.File, budget *formats.Budget) (data []byte, off int64, stored, ok bool, err error) {
	switch f.Method {
	case zip.Store:
		doff, err := f.DataOffset()
		if err != nil {
			return nil, 0, false, false, fmt.Errorf("member %q: %w", f.Name, err)
		}
		n := f.CompressedSize64
		if f.UncompressedSize64 != n {
			return nil, 0, false, false, fmt.Errorf("member %q: stored with compressed size %d != size %d", f.Name, n, f.UncompressedSize64)
		}
		if doff < 0 || uint64(doff) > uint64(len(payload)) || n > uint64(len(payload))-uint64(doff) {
			return nil, 0, false, false, fmt.Errorf("member %q: data at %d + %d exceeds archive size %d", f.Name, doff, n, len(payload))
		}
		d := payload[doff : doff+int64(n)]
		if crc := crc32.ChecksumIEEE(d); crc != f.CRC32 {
			return nil, 0, false, false, fmt.Errorf("member %q: crc32 %08x, zip says %08x", f.Name, crc, f.CRC32)
		}
		return d, doff, true, true, nil
	case zip.Deflate:
		// Deflate expands at most ~1032:1; a larger declared size is a lie.
		if f.UncompressedSize64 > MaxChunkSize || f.UncompressedSize64 > f.CompressedSize64*1040+1024 {
			return nil, 0, false, false, fmt.Errorf("member %q: declared size %d is implausible for %d compressed bytes", f.Name, f.UncompressedSize64, f.CompressedSize64)
		}
		rc, err := f.Open()
		if err != nil {
			return nil, 0, false, false, fmt.Errorf("member %q: %w", f.Name, err)
		}
		defer rc.Close()
		// The declared size is charged to the file's decode budget first,
		// then the buffer grows with the real output.
		if err := budget.Take(int64(f.UncompressedSize64), fmt.Sprintf("member %q: inflated size", f.Name)); err != nil {
			return nil, 0, false, false, err
		}
		w := bytes.NewBuffer(make([]byte, 0, min(f.UncompressedSize64, 4*f.CompressedSize64+4096)))
		if _, err := io.Copy(w, io.LimitReader(rc, int64(f.UncompressedSize64)+1)); err != nil {
			return nil, 0, false, false, fmt.Errorf("member %q: inflate: %w", f.Name, err)
		}
		if uint64(w.Len()) != f.UncompressedSize64 {
			return nil, 0, false, false, fmt.Errorf("member %q: inflated %d bytes, zip says %d", f.Name, w.Len(), f.UncompressedSize64)
		}
		return w.Bytes(), 0, false, true, nil
	}
	return nil, 0, false, false, nil
}

// npyDType maps a numpy descr to a snapshot dtype; swap is the element
// size when the data is big-endian.
func npyDType(descr string) (dt snapshot.DType, swap int, ok bool) {
	if len(descr) < 2 {
		return 0, 0, false
	}
	order, code := descr[0], descr[1:]
	switch order {
	case '<', '|', '=':
	case '>':
	default:
		return 0, 0, false
	}
	m := map[string]snapshot.DType{
		"f2": snapshot.F16, "f4": snapshot.F32, "f8": snapshot.F64,
		"i1": snapshot.I8, "i2": snapshot.I16, "i4": snapshot.I32, "i8": snapshot.I64,
		"u1": snapshot.U8, "u2": snapshot.U16, "u4": snapshot.U32, "u8": snapshot.U64,
		"b1": snapshot.Bool,
	}
	dt, ok = m[code]
	if !ok {
		return 0, 0, false
	}
	if order == '>' && dt.Size() > 1 {
		swap = dt.Size()
	}
	return dt, swap, true
}

// npyHeader is the parsed header dict of a .npy file.
type npyHeader struct {
	descr   string
	fortran bool
	shape   []int64
	dataOff int // offset of the data from the start of the member
}

// parseNPYHeader parses the magic, version, and the Python dict literal
// {'descr': ..., 'fortran_order': ..., 'shape': (...)}. A descr that is
// not a plain string (structured dtypes) yields descr == "".
func parseNPYHeader(b []byte) (npyHeader, error) {
	var h npyHeader
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		return h, errors.New("not a .npy file (bad magic)")
	}
	var hlen, start int
	switch b[6] {
	case 1:
		hlen, start = int(binary.LittleEndian.Uint16(b[8:])), 10
	case 2, 3:
		if len(b) < 12 {
			return h, errors.New("truncated .npy header")
		}
		v := binary.LittleEndian.Uint32(b[8:])
		if uint64(v) > uint64(len(b)) {
			return h, fmt.Errorf(".npy header length field (offset 8) exceeds the member size %d", len(b))
		}
		hlen, start = int(v), 12
	default:
		return h, errors.New("unsupported .npy version (offset 6): want major version 1, 2 or 3")
	}
	if start+hlen > len(b) {
		return h, fmt.Errorf(".npy header length field (offset 8) exceeds the member size %d", len(b))
	}
	h.dataOff = start + hlen
	p := &pyLit{s: string(b[start : start+hlen])}
	seen := map[string]bool{}
	p.ws()
	if !p.eat('{') {
		return h, errors.New(".npy header is not a dict")
	}
	for {
		p.ws()
		if p.eat('}') {
			break
		}
		key, err := p.str()
		if err != nil {
			return h, err
		}
		p.ws()
		if !p.eat(':') {
			return h, errors.New(".npy header: expected ':'")
		}
		p.ws()
		switch key {
		case "descr":
			if p.peek() == '\'' || p.peek() == '"' {
				if h.descr, err = p.str(); err != nil {
					return h, err
				}
			} else if err := p.skipValue(0); err != nil {
				return h, err
			}
		case "fortran_order":
			switch {
			case p.word("True"):
				h.fortran = true
			case p.word("False"):
			default:
				return h, errors.New(".npy header: fortran_order is not a bool")
			}
		case "shape":
			if !p.eat('(') {
				return h, errors.New(".npy header: shape is not a tuple")
			}
			h.shape = []int64{}
			for {
				p.ws()
				if p.eat(')') {
					break
				}
				n, err := p.int()
				if err != nil {
					return h, err
				}
				h.shape = append(h.shape, n)
				if len(h.shape) > 64 {
					return h, errors.New(".npy header: more than 64 dimensions")
				}
				p.ws()
				p.eat(',')
			}
		default:
			return h, fmt.Errorf(".npy header: unexpected key (%d bytes): want descr, fortran_order, shape", len(key))
		}
		seen[key] = true
		p.ws()
		if !p.eat(',') {
			p.ws()
			if !p.eat('}') {
				return h, errors.New(".npy header: expected ',' or '}'")
			}
			break
		}
	}
	if !seen["descr"] || !seen["fortran_order"] || !seen["shape"] {
		return h, errors.New(".npy header lacks descr, fortran_order or shape")
	}
	return h, nil
}

// pyLit is a tiny scanner for the Python literals in .npy headers.
type pyLit struct {
	s   string
	pos int
}

func (p *pyLit) ws() {
	for p.pos < len(p.s) && strings.IndexByte(" \t\n\r", p.s[p.pos]) >= 0 {
		p.pos++
	}
}
func (p *pyLit) peek() byte {
	if p.pos < len(p.s) {
		return p.s[p.pos]
	}
	return 0
}
func (p *pyLit) eat(c byte) bool {
	if p.peek() == c {
		p.pos++
		return true
	}
	return false
}
func (p *pyLit) word(w string) bool {
	if strings.HasPrefix(p.s[p.pos:], w) {
		p.pos += len(w)
		return true
	}
	return false
}
func (p *pyLit) str() (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", errors.New(".npy header: expected a string")
	}
	end := strings.IndexByte(p.s[p.pos+1:], q)
	if end < 0 {
		return "", errors.New(".npy header: unterminated string")
	}
	v := p.s[p.pos+1 : p.pos+1+end]
	p.pos += end + 2
	return v, nil
}
func (p *pyLit) int() (int64, error) {
	start := p.pos
	for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
		p.pos++
	}
	n, err := strconv.ParseInt(p.s[start:p.pos], 10, 64)
	if err != nil {
		return 0, fmt.Errorf(".npy header: dimension at byte %d: not a decimal int64 (%d digits)", start, p.pos-start)
	}
	p.eat('L')
	return n, nil
}

// skipValue skips a nested list/tuple/string literal (structured descr).
func (p *pyLit) skipValue(depth int) error {
	if depth > 32 {
		return errors.New(".npy header: descr nested too deeply")
	}
	p.ws()
	switch c := p.peek(); c {
	case '\'', '"':
		_, err := p.str()
		return err
	case '[', '(':
		closer := byte(']')
		if c == '(' {
			closer = ')'
		}
		p.pos++
		for {
			p.ws()
			if p.eat(closer) {
				return nil
			}
			if err := p.skipValue(depth + 1); err != nil {
				return err
			}
			p.ws()
			if !p.eat(',') {
				p.ws()
				if !p.eat(closer) {
					return errors.New(".npy header: malformed descr")
				}
				return nil
			}
		}
	default:
		start := p.pos
		for p.pos < len(p.s) && (p.s[p.pos] >= '0' && p.s[p.pos] <= '9') {
			p.pos++
		}
		if p.pos == start {
			return errors.New(".npy header: malformed descr")
		}
		return nil
	}
}

// parseNPZ extracts the .npy members of a numpy .npz archive. Members
// whose descr has no snapshot dtype (complex, strings, objects,
// structured) are carried as u8 with their descr and shape in attrs;
// members not named *.npy stay inside the payload array.
func parseNPZ(payload []byte, budget *formats.Budget) ([]tensorOut, error) {
	zr, err := openZip(payload)
	if err != nil {
		return nil, err
	}
	var out []tensorOut
	for _, f := range zr.File {
		if !strings.HasSuffix(f.Name, ".npy") {
			continue
		}
		data, off, stored, ok, err := memberBytes(payload, f, budget)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // unknown zip method: kept opaque in the payload
		}
		h, err := parseNPYHeader(data)
		if err != nil {
			return nil, fmt.Errorf("member %q: %w", f.Name, err)
		}
		name := strings.TrimSuffix(f.Name, ".npy")
		body := data[h.dataOff:]
		t := tensorOut{name: name, spliced: stored, off: off + int64(h.dataOff)}
		dt, swap, known := npyDType(h.descr)
		if known {
			n, err := elemCount(h.shape, int64(len(body))/int64(dt.Size()))
			if err != nil {
				return nil, fmt.Errorf("member %q: shape %v: %w", f.Name, h.shape, err)
			}
			raw := body[:n*int64(dt.Size())]
			t.dtype, t.shape, t.n, t.swap, t.fortran = dt, h.shape, int64(len(raw)), swap, h.fortran && len(h.shape) > 1
			t.data = raw
			if t.swap > 0 || t.fortran {
				copies := int64(1)
				if t.fortran {
					copies = 2
				}
				if err := budget.Take(copies*int64(len(raw)), fmt.Sprintf("member %q: reordered copy", f.Name)); err != nil {
					return nil, err
				}
				t.data = append([]byte(nil), raw...)
				if t.fortran {
					t.data = fortranToC(t.data, h.shape, dt.Size())
				}
				if t.swap > 0 {
					byteSwap(t.data, t.swap)
				}
			}
		} else {
			descr := h.descr
			if descr == "" {
				descr = "structured"
			}
			shape := jsonInts(h.shape)
			t.dtype, t.shape, t.n = snapshot.U8, []int64{int64(len(body))}, int64(len(body))
			t.data = body
			t.attrs = map[string]string{AttrNPYDescr: descr, AttrNPYShape: shape}
			if h.fortran {
				t.attrs["fold.npy.fortran_order"] = "true"
			}
		}
		if t.n == 0 {
			t.spliced = false
		}
		out = append(out, t)
	}
	return out, nil
}

// jsonInts renders a shape as a compact JSON list ("[2,3]").
func jsonInts(v []int64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.FormatInt(x, 10)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// byteSwap reverses every size-byte element of b in place.
func byteSwap(b []byte, size int) {
	for i := 0; i+size <= len(b); i += size {
		for l, r := i, i+size-1; l < r; l, r = l+1, r-1 {
			b[l], b[r] = b[r], b[l]
		}
	}
}

// fortranToC reorders column-major elements into row-major order.
func fortranToC(src []byte, shape []int64, es int) []byte {
	return permute(src, shape, es, true)
}

// cToFortran reorders row-major elements into column-major order.
func cToFortran(src []byte, shape []int64, es int) []byte {
	return permute(src, shape, es, false)
}

// permute walks the C-order index space of shape; for each element it
// computes the Fortran-order offset and copies between the two layouts.
func permute(src []byte, shape []int64, es int, fToC bool) []byte {
	dst := make([]byte, len(src))
	rank := len(shape)
	fstride := make([]int64, rank)
	acc := int64(1)
	for i := 0; i < rank; i++ {
		fstride[i] = acc
		acc *= shape[i]
	}
	n := int64(len(src) / es)
	idx := make([]int64, rank)
	var foff int64
	for c := int64(0); c < n; c++ {
		if fToC {
			copy(dst[c*int64(es):(c+1)*int64(es)], src[foff*int64(es):(foff+1)*int64(es)])
		} else {
			copy(dst[foff*int64(es):(foff+1)*int64(es)], src[c*int64(es):(c+1)*int64(es)])
		}
		for d := rank - 1; d >= 0; d-- {
			idx[d]++
			foff += fstride[d]
			if idx[d] < shape[d] {
				break
			}
			foff -= idx[d] * fstride[d]
			idx[d] = 0
		}
	}
	return dst
}
