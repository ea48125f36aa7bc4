package fold

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The index JSON must be reproduced the way Python's json module writes it
// (key insertion order, raw UTF-8, Python float repr) and the manifest hash
// needs Python's canonical form (sorted keys, ASCII only). encoding/json
// can do neither, so this file holds a small ordered JSON model.

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jInt
	jFloat
	jString
	jArray
	jObject
)

// jvalue is one JSON value. Integers keep their exact decimal text (Python
// ints are unbounded); floats are float64 (Python floats).
type jvalue struct {
	kind jkind
	b    bool
	i    *big.Int
	f    float64
	s    string
	arr  []*jvalue
	obj  []jmember
}

type jmember struct {
	key string
	val *jvalue
}

// get returns the value of key in an object, or nil.
func (v *jvalue) get(key string) *jvalue {
	if v == nil || v.kind != jObject {
		return nil
	}
	for _, m := range v.obj {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// set replaces the value of key, or appends the member (Python dict
// semantics: an existing key keeps its position).
func (v *jvalue) set(key string, val *jvalue) {
	for i := range v.obj {
		if v.obj[i].key == key {
			v.obj[i].val = val
			return
		}
	}
	v.obj = append(v.obj, jmember{key, val})
}

// without returns a shallow copy of object v without key.
func (v *jvalue) without(key string) *jvalue {
	out := &jvalue{kind: jObject}
	for _, m := range v.obj {
		if m.key != key {
			out.obj = append(out.obj, m)
		}
	}
	return out
}

func jstr(s string) *jvalue { return &jvalue{kind: jString, s: s} }
func jint(n int64) *jvalue  { return &jvalue{kind: jInt, i: big.NewInt(n)} }
func juint(n uint64) *jvalue {
	return &jvalue{kind: jInt, i: new(big.Int).SetUint64(n)}
}

// asInt64 returns the value as int64 when it is an integer that fits.
func (v *jvalue) asInt64() (int64, bool) {
	if v == nil || v.kind != jInt || !v.i.IsInt64() {
		return 0, false
	}
	return v.i.Int64(), true
}

func (v *jvalue) asString() (string, bool) {
	if v == nil || v.kind != jString {
		return "", false
	}
	return v.s, true
}

// maxJSONDepth bounds nesting so a hostile index cannot exhaust the stack.
const maxJSONDepth = 256

// errJSON is wrapped by every JSON syntax error.
var errJSON = errors.New("invalid JSON")

type jparser struct {
	s   string
	pos int
}

// parseJSON parses one JSON document as Python's json.loads does: it also
// accepts NaN, Infinity and -Infinity; a duplicate key keeps its first
// position and takes the last value; the input must be valid UTF-8.
func parseJSON(data []byte) (*jvalue, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: not valid UTF-8", errJSON)
	}
	p := &jparser{s: string(data)}
	p.ws()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.pos != len(p.s) {
		return nil, p.errf("trailing data")
	}
	return v, nil
}

func (p *jparser) errf(format string, args ...any) error {
	return fmt.Errorf("%w at byte %d: %s", errJSON, p.pos, fmt.Sprintf(format, args...))
}

func (p *jparser) ws() {
	for p.pos < len(p.s) {
		switch p.s[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jparser) lit(word string) bool {
	if strings.HasPrefix(p.s[p.pos:], word) {
		p.pos += len(word)
		return true
	}
	return false
}

func (p *jparser) value(depth int) (*jvalue, error) {
	if depth > maxJSONDepth {
		return nil, p.errf("nesting deeper than %d", maxJSONDepth)
	}
	if p.pos >= len(p.s) {
		return nil, p.errf("unexpected end")
	}
	switch c := p.s[p.pos]; {
	case c == '{':
		p.pos++
		v := &jvalue{kind: jObject}
		p.ws()
		if p.pos < len(p.s) && p.s[p.pos] == '}' {
			p.pos++
			return v, nil
		}
		for {
			p.ws()
			if p.pos >= len(p.s) || p.s[p.pos] != '"' {
				return nil, p.errf("expected object key")
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			p.ws()
			if p.pos >= len(p.s) || p.s[p.pos] != ':' {
				return nil, p.errf("expected ':'")
			}
			p.pos++
			p.ws()
			val, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			v.set(k, val)
			p.ws()
			if p.pos >= len(p.s) {
				return nil, p.errf("unterminated object")
			}
			if p.s[p.pos] == ',' {
				p.pos++
				continue
			}
			if p.s[p.pos] == '}' {
				p.pos++
				return v, nil
			}
			return nil, p.errf("expected ',' or '}'")
		}
	case c == '[':
		p.pos++
		v := &jvalue{kind: jArray}
		p.ws()
		if p.pos < len(p.s) && p.s[p.pos] == ']' {
			p.pos++
			return v, nil
		}
		for {
			p.ws()
			val, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			v.arr = append(v.arr, val)
			p.ws()
			if p.pos >= len(p.s) {
				return nil, p.errf("unterminated array")
			}
			if p.s[p.pos] == ',' {
				p.pos++
				continue
			}
			if p.s[p.pos] == ']' {
				p.pos++
				return v, nil
			}
			return nil, p.errf("expected ',' or ']'")
		}
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return jstr(s), nil
	case p.lit("true"):
		return &jvalue{kind: jBool, b: true}, nil
	case p.lit("false"):
		return &jvalue{kind: jBool}, nil
	case p.lit("null"):
		return &jvalue{kind: jNull}, nil
	case p.lit("NaN"):
		return &jvalue{kind: jFloat, f: math.NaN()}, nil
	case p.lit("Infinity"):
		return &jvalue{kind: jFloat, f: math.Inf(1)}, nil
	case p.lit("-Infinity"):
		return &jvalue{kind: jFloat, f: math.Inf(-1)}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return nil, p.errf("unexpected character")
	}
}

func (p *jparser) number() (*jvalue, error) {
	start := p.pos
	digits := func() int {
		n := 0
		for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.s[p.pos] == '-' {
		p.pos++
	}
	intStart := p.pos
	if digits() == 0 {
		return nil, p.errf("malformed number")
	}
	if p.s[intStart] == '0' && p.pos-intStart > 1 {
		return nil, p.errf("leading zero in number")
	}
	isFloat := false
	if p.pos < len(p.s) && p.s[p.pos] == '.' {
		p.pos++
		isFloat = true
		if digits() == 0 {
			return nil, p.errf("malformed fraction")
		}
	}
	if p.pos < len(p.s) && (p.s[p.pos] == 'e' || p.s[p.pos] == 'E') {
		p.pos++
		isFloat = true
		if p.pos < len(p.s) && (p.s[p.pos] == '+' || p.s[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return nil, p.errf("malformed exponent")
		}
	}
	text := p.s[start:p.pos]
	if !isFloat {
		if len(text) > 4300 { // Python's default int string conversion limit
			return nil, p.errf("integer of %d digits", len(text))
		}
		n, ok := new(big.Int).SetString(text, 10)
		if !ok {
			return nil, p.errf("malformed integer")
		}
		return &jvalue{kind: jInt, i: n}, nil
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, p.errf("malformed float (%d bytes)", len(text))
	}
	return &jvalue{kind: jFloat, f: f}, nil
}

func (p *jparser) str() (string, error) {
	p.pos++ // opening quote
	var b strings.Builder
	for {
		if p.pos >= len(p.s) {
			return "", p.errf("unterminated string")
		}
		c := p.s[p.pos]
		switch {
		case c == '"':
			p.pos++
			return b.String(), nil
		case c < 0x20:
			return "", p.errf("control character in string")
		case c != '\\':
			b.WriteByte(c)
			p.pos++
			continue
		}
		p.pos++
		if p.pos >= len(p.s) {
			return "", p.errf("unterminated escape")
		}
		e := p.s[p.pos]
		p.pos++
		switch e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, err := p.hex4()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) && strings.HasPrefix(p.s[p.pos:], `\u`) {
				save := p.pos
				p.pos += 2
				r2, err := p.hex4()
				if err == nil {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						b.WriteRune(d)
						continue
					}
				}
				p.pos = save
			}
			// Lone surrogates cannot be held in UTF-8; they become U+FFFD
			// (a manifest hash over them then fails verification).
			b.WriteRune(r)
		default:
			return "", p.errf("invalid escape \\%c", e)
		}
	}
}

func (p *jparser) hex4() (rune, error) {
	if p.pos+4 > len(p.s) {
		return 0, p.errf("short \\u escape")
	}
	n, err := strconv.ParseUint(p.s[p.pos:p.pos+4], 16, 32)
	if err != nil {
		return 0, p.errf("malformed \\u escape")
	}
	p.pos += 4
	return rune(n), nil
}

// pyFloat formats f like Python's float.__repr__ (and json.dumps for
// non-finite values).
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // e.g. -1.2345e+17
	neg := strings.HasPrefix(e, "-")
	e = strings.TrimPrefix(e, "-")
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	var out string
	if exp >= -4 && exp < 16 {
		if exp >= 0 {
			if len(digits) <= exp+1 {
				out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
			} else {
				out = digits[:exp+1] + "." + digits[exp+1:]
			}
		} else {
			out = "0." + strings.Repeat("0", -exp-1) + digits
		}
	} else {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		out = fmt.Sprintf("%se%s%02d", m, sign, exp)
	}
	if neg {
		out = "-" + out
	}
	return out
}

// writeJSON serializes v. ascii selects json.dumps(ensure_ascii=True)
// escaping (the manifest-hash form); sorted sorts object keys by code point.
func writeJSON(b *strings.Builder, v *jvalue, ascii, sorted bool) {
	switch v.kind {
	case jNull:
		b.WriteString("null")
	case jBool:
		if v.b {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case jInt:
		b.WriteString(v.i.String())
	case jFloat:
		b.WriteString(pyFloat(v.f))
	case jString:
		writeJSONString(b, v.s, ascii)
	case jArray:
		b.WriteByte('[')
		for i, e := range v.arr {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(b, e, ascii, sorted)
		}
		b.WriteByte(']')
	case jObject:
		members := v.obj
		if sorted {
			members = append([]jmember(nil), v.obj...)
			// Go strings compare bytewise; for valid UTF-8 that is code
			// point order, which is what Python's sort_keys uses.
			sort.SliceStable(members, func(i, j int) bool { return members[i].key < members[j].key })
		}
		b.WriteByte('{')
		for i, m := range members {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(b, m.key, ascii)
			b.WriteByte(':')
			writeJSON(b, m.val, ascii, sorted)
		}
		b.WriteByte('}')
	}
}

func writeJSONString(b *strings.Builder, s string, ascii bool) {
	const hexdig = "0123456789abcdef"
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			switch {
			case r < 0x20 || (ascii && r >= 0x7f && r <= 0xffff):
				b.WriteString(`\u`)
				b.WriteByte(hexdig[r>>12&0xf])
				b.WriteByte(hexdig[r>>8&0xf])
				b.WriteByte(hexdig[r>>4&0xf])
				b.WriteByte(hexdig[r&0xf])
			case ascii && r > 0xffff:
				r1, r2 := utf16.EncodeRune(r)
				for _, x := range []rune{r1, r2} {
					b.WriteString(`\u`)
					b.WriteByte(hexdig[x>>12&0xf])
					b.WriteByte(hexdig[x>>8&0xf])
					b.WriteByte(hexdig[x>>4&0xf])
					b.WriteByte(hexdig[x&0xf])
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// indexJSON renders v as the reference writer does (insertion order,
// compact, raw UTF-8).
func indexJSON(v *jvalue) string {
	var b strings.Builder
	writeJSON(&b, v, false, false)
	return b.String()
}

// canonicalJSON renders v in the manifest-hash form (sorted keys, ASCII
// only).
func canonicalJSON(v *jvalue) string {
	var b strings.Builder
	writeJSON(&b, v, true, true)
	return b.String()
}
