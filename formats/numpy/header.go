package numpy

import (
	"fmt"
	"strconv"
	"strings"
)

const npyMagic = "\x93NUMPY"

// arrayAlign is what NumPy pads magic + length + header to (ARRAY_ALIGN).
const arrayAlign = 64

// growthAxisMaxDigits is NumPy's GROWTH_AXIS_MAX_DIGITS: since 1.24 the
// header leaves room to rewrite the growth axis' length in place.
const growthAxisMaxDigits = 21

// header is a parsed .npy header dict.
type header struct {
	dtype   dtypeInfo
	big     bool // '>' byte order of a multi-byte dtype
	fortran bool
	shape   []int64
}

// headerError is a header parse failure at byte pos of the header text.
type headerError struct {
	pos         int
	msg         string
	unsupported bool
}

func (e *headerError) Error() string { return fmt.Sprintf("header byte %d: %s", e.pos, e.msg) }

// prefixLen returns the length of magic + version + length field.
func prefixLen(major byte) int {
	if major == 1 {
		return 10
	}
	return 12
}

// parseHeader parses the header text of a .npy file: the Python dict
// literal NumPy writes, restricted to this grammar (white space is space,
// tab, CR and LF; quotes are ' or " with no backslash inside):
//
//	dict  = ws "{" ws [ item { ws "," ws item } [ ws "," ] ] ws "}" ws
//	item  = str ws ":" ws value
//	value = str | "True" | "False" | tuple
//	tuple = "(" ws ")" | "(" ws int ws "," ws ")" | "(" ws int { ws "," ws int }+ [ ws "," ] ws ")"
//	int   = "0" | [1-9][0-9]*            (at most int64)
//
// The keys must be exactly descr (a string <kind><size> with byte order
// <, > or |), fortran_order (a bool) and shape (a tuple of at most MaxDims
// ints), each once. A list descr (structured dtype) and dtypes snapd does
// not hold are unsupported; anything else is corrupt.
//
// For versions 1.0 and 2.0 an int may end in 'L' (Python 2's long, which
// old NumPy wrote and NumPy still reads); such a header is kept verbatim.
func parseHeader(text []byte, major byte) (*header, error) {
	for i, c := range text {
		if c >= 0x80 {
			return nil, &headerError{pos: i, msg: "non-ASCII byte in the header (only structured dtypes need one; not supported)", unsupported: true}
		}
		if (c < 0x20 || c == 0x7f) && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return nil, &headerError{pos: i, msg: "control byte in the header"}
		}
	}
	p := &hparser{b: text, longOK: major <= 2}
	h := &header{}
	p.ws()
	if !p.eat('{') {
		return nil, p.fail("header does not start with '{'")
	}
	var seenDescr, seenOrder, seenShape bool
	for {
		p.ws()
		if p.eat('}') {
			break
		}
		keyPos := p.i
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		p.ws()
		if !p.eat(':') {
			return nil, p.fail("expected ':' after a key")
		}
		p.ws()
		switch key {
		case "descr":
			if seenDescr {
				return nil, &headerError{pos: keyPos, msg: "duplicate key descr"}
			}
			seenDescr = true
			if p.peek() == '[' {
				return nil, &headerError{pos: p.i, msg: "descr is a list: structured dtypes are not supported", unsupported: true}
			}
			vpos := p.i
			s, err := p.str()
			if err != nil {
				return nil, err
			}
			if err := parseDescr(s, h); err != nil {
				err.pos = vpos
				return nil, err
			}
		case "fortran_order":
			if seenOrder {
				return nil, &headerError{pos: keyPos, msg: "duplicate key fortran_order"}
			}
			seenOrder = true
			switch {
			case p.word("True"):
				h.fortran = true
			case p.word("False"):
			default:
				return nil, p.fail("fortran_order is not True or False")
			}
		case "shape":
			if seenShape {
				return nil, &headerError{pos: keyPos, msg: "duplicate key shape"}
			}
			seenShape = true
			shape, err := p.tuple()
			if err != nil {
				return nil, err
			}
			h.shape = shape
		default:
			return nil, &headerError{pos: keyPos, msg: "key is not one of descr, fortran_order, shape"}
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		p.ws()
		if p.eat('}') {
			break
		}
		return nil, p.fail("expected ',' or '}' after a value")
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, p.fail("text after the closing '}'")
	}
	switch {
	case !seenDescr:
		return nil, &headerError{pos: p.i, msg: "key descr missing"}
	case !seenOrder:
		return nil, &headerError{pos: p.i, msg: "key fortran_order missing"}
	case !seenShape:
		return nil, &headerError{pos: p.i, msg: "key shape missing"}
	}
	return h, nil
}

// parseDescr checks a descr string and sets h.dtype and h.big.
func parseDescr(s string, h *header) *headerError {
	if len(s) < 2 {
		return &headerError{msg: "descr is not of the form <byte order><kind><size>"}
	}
	order, kind, size := s[0], s[1], s[2:]
	if order != '<' && order != '>' && order != '|' {
		if kindNames[order] != "" && order != 'f' && order != 'i' && order != 'u' && order != 'b' {
			return &headerError{msg: "dtype kind " + kindNames[order] + " is not supported", unsupported: true}
		}
		return &headerError{msg: "descr has no explicit byte order (<, > or |)"}
	}
	n, err := strconv.Atoi(size)
	if err != nil || size == "" || size[0] == '0' || size[0] == '+' || size[0] == '-' {
		if name, ok := kindNames[kind]; ok && kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b' {
			return &headerError{msg: "dtype kind " + name + " is not supported", unsupported: true}
		}
		return &headerError{msg: "descr is not of the form <byte order><kind><size>"}
	}
	for _, d := range dtypeTable {
		if d.kind == kind && d.size == n {
			if order == '|' && n > 1 {
				return &headerError{msg: "byte order '|' given for a multi-byte dtype"}
			}
			h.dtype = d
			h.big = order == '>' && n > 1
			return nil
		}
	}
	if name, ok := kindNames[kind]; ok {
		return &headerError{msg: "dtype kind " + name + " is not supported", unsupported: true}
	}
	return &headerError{msg: "unknown dtype kind", unsupported: true}
}

type hparser struct {
	b      []byte
	i      int
	longOK bool // accept a Python 2 'L' after an int
}

func (p *hparser) fail(msg string) *headerError { return &headerError{pos: p.i, msg: msg} }

func (p *hparser) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *hparser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *hparser) eat(c byte) bool {
	if p.peek() == c && p.i < len(p.b) {
		p.i++
		return true
	}
	return false
}

// word consumes w when it is followed by a byte that cannot continue a
// Python identifier.
func (p *hparser) word(w string) bool {
	if !strings.HasPrefix(string(p.b[p.i:]), w) {
		return false
	}
	if j := p.i + len(w); j < len(p.b) {
		c := p.b[j]
		if c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			return false
		}
	}
	p.i += len(w)
	return true
}

// str parses a quoted string without escapes.
func (p *hparser) str() (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", p.fail("expected a quoted string")
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch p.b[j] {
		case q:
			p.i = j + 1
			return string(p.b[start:j]), nil
		case '\\':
			return "", &headerError{pos: j, msg: "backslash in a string"}
		case '\n', '\r':
			return "", &headerError{pos: j, msg: "line break in a string"}
		}
	}
	return "", p.fail("unterminated string")
}

// tuple parses a tuple of non-negative ints.
func (p *hparser) tuple() ([]int64, error) {
	if !p.eat('(') {
		return nil, p.fail("shape is not a tuple")
	}
	p.ws()
	shape := []int64{}
	if p.eat(')') {
		return shape, nil
	}
	for {
		if len(shape) == MaxDims {
			return nil, &headerError{pos: p.i, msg: fmt.Sprintf("shape has more than %d dimensions", MaxDims)}
		}
		v, err := p.int()
		if err != nil {
			return nil, err
		}
		shape = append(shape, v)
		p.ws()
		if p.eat(',') {
			p.ws()
			if p.eat(')') {
				return shape, nil
			}
			continue
		}
		if p.eat(')') {
			if len(shape) == 1 {
				return nil, p.fail("shape (n) is an int, not a tuple: a 1-tuple needs a trailing comma")
			}
			return shape, nil
		}
		return nil, p.fail("expected ',' or ')' in shape")
	}
}

// int parses a non-negative decimal int64 without leading zeros.
func (p *hparser) int() (int64, error) {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	s := string(p.b[start:p.i])
	if s == "" {
		return 0, p.fail("shape element is not a non-negative integer")
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, &headerError{pos: start, msg: "shape element has a leading zero"}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, &headerError{pos: start, msg: "shape element overflows int64"}
	}
	if p.longOK && p.peek() == 'L' {
		p.i++
	}
	if c := p.peek(); c == '_' || c == '.' || c == 'e' || c == 'E' || c == 'j' || c == 'L' || c == 'l' || c == 'x' {
		return 0, p.fail("shape element is not a plain decimal integer")
	}
	return v, nil
}

// descrString returns the descr NumPy writes for d and byte order.
func descrString(d dtypeInfo, big bool) string {
	o := byte('<')
	switch {
	case d.size == 1:
		o = '|'
	case big:
		o = '>'
	}
	return string(o) + string(d.kind) + strconv.Itoa(d.size)
}

// canonicalText returns the header dict text NumPy >= 1.24 writes for h
// (before padding): keys sorted, repr() values, ", " after each item, and
// room for the growth axis to grow to growthAxisMaxDigits digits.
func canonicalText(h *header) string {
	var b strings.Builder
	b.WriteString("{'descr': '")
	b.WriteString(descrString(h.dtype, h.big))
	b.WriteString("', 'fortran_order': ")
	if h.fortran {
		b.WriteString("True")
	} else {
		b.WriteString("False")
	}
	b.WriteString(", 'shape': (")
	for i, d := range h.shape {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	if len(h.shape) == 1 {
		b.WriteByte(',')
	}
	b.WriteString("), }")
	if len(h.shape) > 0 {
		g := h.shape[0]
		if h.fortran {
			g = h.shape[len(h.shape)-1]
		}
		if pad := growthAxisMaxDigits - len(strconv.FormatInt(g, 10)); pad > 0 {
			b.WriteString(strings.Repeat(" ", pad))
		}
	}
	return b.String()
}

// wrapHeader pads text as NumPy's _wrap_header does for version major:
// spaces and a final newline so that magic, length field and header end on
// a 64-byte boundary. Like NumPy it pads 1..64 spaces: a full 64 when the
// text would already end on the boundary.
func wrapHeader(text string, major byte) string {
	hlen := len(text) + 1
	pad := arrayAlign - (prefixLen(major)+hlen)%arrayAlign
	return text + strings.Repeat(" ", pad) + "\n"
}

// versionFits reports whether a header text of n bytes fits the length
// field of version major.
func versionFits(major byte, n int) bool {
	if major == 1 {
		return n <= 0xffff
	}
	return int64(n) <= 0xffffffff
}
