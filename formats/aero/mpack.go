package aero

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/jsonerr"
)

// mkind is the type of a decoded msgpack value.
type mkind uint8

const (
	kNil mkind = iota
	kBool
	kUint  // any non-negative integer (msgpack-python writes these with the unsigned family)
	kInt   // a negative integer
	kFloat // float32 values are widened to float64 (msgpack-python writes float64)
	kStr
	kBin
	kArray
	kMap
)

// mval is a msgpack value that keeps map key order, so that what is read can
// be written back in the same order.
type mval struct {
	kind mkind
	b    bool
	u    uint64
	i    int64
	f    float64
	s    string
	bin  []byte
	arr  []mval
	m    []mpair
}

type mpair struct{ k, v mval }

func mStr(s string) mval           { return mval{kind: kStr, s: s} }
func mUint(u uint64) mval          { return mval{kind: kUint, u: u} }
func mBin(b []byte) mval           { return mval{kind: kBin, bin: b} }
func mBool(b bool) mval            { return mval{kind: kBool, b: b} }
func mArr(a ...mval) mval          { return mval{kind: kArray, arr: a} }
func mMap(p ...mpair) mval         { return mval{kind: kMap, m: p} }
func kv(k string, v mval) mpair    { return mpair{mStr(k), v} }
func (v mval) isStr(s string) bool { return v.kind == kStr && v.s == s }

// get returns the value of the first string key k of a map.
func (v mval) get(k string) (mval, bool) {
	for _, p := range v.m {
		if p.k.isStr(k) {
			return p.v, true
		}
	}
	return mval{}, false
}

// ---------------------------------------------------------------------------
// Decoding: vmihailenco/msgpack's low-level Decoder over a bytes.Reader, with
// every declared length checked against the bytes that remain before
// anything is allocated.

type mdec struct {
	r *bytes.Reader
	d *msgpack.Decoder

	// bud, when set, is charged for what decoding materialises: mvalCost
	// per value and the bytes of every str and bin, before they are
	// allocated (in steps of at most chargeStep, see charge).
	bud     *formats.Budget
	what    string
	pending int64
}

// mvalCost is what one decoded value costs the budget: the size of an
// mval (a map entry is two).
const mvalCost = int64(unsafe.Sizeof(mval{}))

// chargeStep is how many bytes of small values an mdec lets accumulate
// before it charges them (so the budget is not touched per value).
const chargeStep = 64 << 10

func newMDec(b []byte) *mdec {
	r := bytes.NewReader(b)
	return &mdec{r: r, d: msgpack.NewDecoder(r)}
}

// newBudgetMDec is newMDec charging bud for what is decoded; what names
// the chunk in budget errors.
func newBudgetMDec(b []byte, bud *formats.Budget, what string) *mdec {
	m := newMDec(b)
	m.bud, m.what = bud, what
	return m
}

// charge accounts n bytes about to be materialised: small amounts are
// gathered and charged chargeStep at a time, at most chargeStep ahead of
// the allocations they cover; the error wraps formats.ErrLimit.
func (m *mdec) charge(n int64) error {
	if m.bud == nil {
		return nil
	}
	m.pending += n
	if m.pending < chargeStep {
		return nil
	}
	return m.flush()
}

// flush charges what charge gathered.
func (m *mdec) flush() error {
	if m.bud == nil || m.pending == 0 {
		return nil
	}
	n := m.pending
	m.pending = 0
	if err := m.bud.Take(n, m.what+": decoded msgpack"); err != nil {
		return fmt.Errorf("msgpack at byte %d: %w", m.pos(), err)
	}
	return nil
}

// pos is the number of bytes consumed so far.
func (m *mdec) pos() int64 { return m.r.Size() - int64(m.r.Len()) }

func (m *mdec) errf(format string, a ...any) error {
	return fmt.Errorf("msgpack at byte %d: %s", m.pos(), fmt.Sprintf(format, a...))
}

func (m *mdec) peek() (byte, error) {
	c, err := m.d.PeekCode()
	if err != nil {
		return 0, m.errf("unexpected end of data")
	}
	return c, nil
}

// mapLen reads a map header; n is bounded by the remaining bytes (every
// key and value takes at least one byte).
func (m *mdec) mapLen() (int, error) {
	c, err := m.peek()
	if err != nil {
		return 0, err
	}
	if !msgpcode.IsFixedMap(c) && c != msgpcode.Map16 && c != msgpcode.Map32 {
		return 0, m.errf("expected a map, found code 0x%02x", c)
	}
	n, err := m.d.DecodeMapLen()
	if err != nil {
		return 0, m.errf("map header: %v", err)
	}
	if int64(n)*2 > int64(m.r.Len()) {
		return 0, m.errf("map of %d entries exceeds the %d remaining bytes", n, m.r.Len())
	}
	return n, nil
}

func (m *mdec) arrayLen() (int, error) {
	c, err := m.peek()
	if err != nil {
		return 0, err
	}
	if !msgpcode.IsFixedArray(c) && c != msgpcode.Array16 && c != msgpcode.Array32 {
		return 0, m.errf("expected an array, found code 0x%02x", c)
	}
	n, err := m.d.DecodeArrayLen()
	if err != nil {
		return 0, m.errf("array header: %v", err)
	}
	if int64(n) > int64(m.r.Len()) {
		return 0, m.errf("array of %d elements exceeds the %d remaining bytes", n, m.r.Len())
	}
	return n, nil
}

// rawBytes reads the payload of a str or bin whose header is next.
func (m *mdec) rawBytes() ([]byte, error) {
	n, err := m.d.DecodeBytesLen()
	if err != nil {
		return nil, m.errf("string/bin header: %v", err)
	}
	if n < 0 || int64(n) > int64(m.r.Len()) {
		return nil, m.errf("string/bin of %d bytes exceeds the %d remaining bytes", n, m.r.Len())
	}
	// A string is copied twice (bytes, then string).
	if err := m.charge(2 * int64(n)); err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	if err := m.d.ReadFull(buf); err != nil {
		return nil, m.errf("string/bin data: %v", err)
	}
	return buf, nil
}

func (m *mdec) str() (string, error) {
	c, err := m.peek()
	if err != nil {
		return "", err
	}
	if !msgpcode.IsString(c) {
		return "", m.errf("expected a string, found code 0x%02x", c)
	}
	b, err := m.rawBytes()
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", m.errf("string is not valid UTF-8")
	}
	return string(b), nil
}

func (m *mdec) bin() ([]byte, error) {
	c, err := m.peek()
	if err != nil {
		return nil, err
	}
	if !msgpcode.IsBin(c) {
		return nil, m.errf("expected bin, found code 0x%02x", c)
	}
	return m.rawBytes()
}

func isUintCode(c byte) bool {
	return msgpcode.IsFixedNum(c) && c <= msgpcode.PosFixedNumHigh ||
		c == msgpcode.Uint8 || c == msgpcode.Uint16 || c == msgpcode.Uint32 || c == msgpcode.Uint64
}

func isIntCode(c byte) bool {
	return c >= msgpcode.NegFixedNumLow ||
		c == msgpcode.Int8 || c == msgpcode.Int16 || c == msgpcode.Int32 || c == msgpcode.Int64
}

// uint reads a non-negative integer (any integer encoding).
func (m *mdec) uint() (uint64, error) {
	v, err := m.value(0)
	if err != nil {
		return 0, err
	}
	if v.kind != kUint {
		return 0, m.errf("expected a non-negative integer")
	}
	return v.u, nil
}

// value reads any msgpack value except ext types.
func (m *mdec) value(depth int) (mval, error) {
	if depth > maxMsgpackDepth {
		return mval{}, m.errf("nesting deeper than %d", maxMsgpackDepth)
	}
	if err := m.charge(mvalCost); err != nil {
		return mval{}, err
	}
	c, err := m.peek()
	if err != nil {
		return mval{}, err
	}
	switch {
	case c == msgpcode.Nil:
		_ = m.d.DecodeNil()
		return mval{kind: kNil}, nil
	case c == msgpcode.True || c == msgpcode.False:
		b, err := m.d.DecodeBool()
		if err != nil {
			return mval{}, m.errf("bool: %v", err)
		}
		return mBool(b), nil
	case isUintCode(c):
		u, err := m.d.DecodeUint64()
		if err != nil {
			return mval{}, m.errf("integer: %v", err)
		}
		return mUint(u), nil
	case isIntCode(c):
		i, err := m.d.DecodeInt64()
		if err != nil {
			return mval{}, m.errf("integer: %v", err)
		}
		if i >= 0 {
			return mUint(uint64(i)), nil
		}
		return mval{kind: kInt, i: i}, nil
	case c == msgpcode.Float || c == msgpcode.Double:
		f, err := m.d.DecodeFloat64()
		if err != nil {
			return mval{}, m.errf("float: %v", err)
		}
		return mval{kind: kFloat, f: f}, nil
	case msgpcode.IsString(c):
		s, err := m.str()
		return mStr(s), err
	case msgpcode.IsBin(c):
		b, err := m.rawBytes()
		return mBin(b), err
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := m.arrayLen()
		if err != nil {
			return mval{}, err
		}
		out := mval{kind: kArray, arr: make([]mval, 0, min(n, 1024))}
		for range n {
			v, err := m.value(depth + 1)
			if err != nil {
				return mval{}, err
			}
			out.arr = append(out.arr, v)
		}
		return out, nil
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := m.mapLen()
		if err != nil {
			return mval{}, err
		}
		out := mval{kind: kMap, m: make([]mpair, 0, min(n, 1024))}
		for range n {
			k, err := m.value(depth + 1)
			if err != nil {
				return mval{}, err
			}
			v, err := m.value(depth + 1)
			if err != nil {
				return mval{}, err
			}
			out.m = append(out.m, mpair{k, v})
		}
		return out, nil
	case msgpcode.IsExt(c):
		return mval{}, m.errf("ext type (code 0x%02x) is not supported", c)
	}
	return mval{}, m.errf("invalid code 0x%02x", c)
}

// decodeOne decodes exactly one value filling b (msgpack-python's unpackb
// refuses extra data).
func decodeOne(b []byte) (mval, error) { return decodeOneCharged(b, nil, "") }

// decodeOneCharged is decodeOne charging bud (when not nil) for the
// decoded values (see mdec.charge).
func decodeOneCharged(b []byte, bud *formats.Budget, what string) (mval, error) {
	m := newBudgetMDec(b, bud, what)
	v, err := m.value(0)
	if err != nil {
		return mval{}, err
	}
	if m.r.Len() != 0 {
		return mval{}, m.errf("%d bytes of extra data after the object", m.r.Len())
	}
	return v, m.flush()
}

// ---------------------------------------------------------------------------
// Encoding through vmihailenco/msgpack's low-level Encoder, which produces
// exactly msgpack-python's (use_bin_type=True) byte layout when driven
// explicitly: EncodeUint/EncodeInt pick the smallest form and use the
// unsigned family for non-negative values, strings use fixstr/str8/16/32,
// []byte uses bin8/16/32, EncodeArrayLen/EncodeMapLen the fix/16/32 forms,
// EncodeFloat64 always writes cb. Key order is ours (mval keeps it).

func encodeMval(v mval) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	writeMval(enc, v)
	return buf.Bytes()
}

func writeMval(e *msgpack.Encoder, v mval) {
	// Writes to a bytes.Buffer cannot fail; the encoder's errors come only
	// from its writer.
	switch v.kind {
	case kNil:
		_ = e.EncodeNil()
	case kBool:
		_ = e.EncodeBool(v.b)
	case kUint:
		_ = e.EncodeUint(v.u)
	case kInt:
		_ = e.EncodeInt(v.i)
	case kFloat:
		_ = e.EncodeFloat64(v.f)
	case kStr:
		_ = e.EncodeString(v.s)
	case kBin:
		b := v.bin
		if b == nil {
			b = []byte{} // EncodeBytes(nil) would write nil
		}
		_ = e.EncodeBytes(b)
	case kArray:
		_ = e.EncodeArrayLen(len(v.arr))
		for _, x := range v.arr {
			writeMval(e, x)
		}
	case kMap:
		_ = e.EncodeMapLen(len(v.m))
		for _, p := range v.m {
			writeMval(e, p.k)
			writeMval(e, p.v)
		}
	}
}

// ---------------------------------------------------------------------------
// Typed JSON: how msgpack values are kept in Attrs (readable, lossless).
//
//	nil, bool, str, array   → JSON null, true/false, string, array
//	integer                 → JSON integer
//	float                   → JSON number with '.' or exponent ("1.0");
//	                          NaN/±Inf → {"$float":"NaN"|"+Inf"|"-Inf"}
//	bin                     → {"$bin":"<standard base64>"}
//	map with string keys, none starting with '$', no duplicates
//	                        → JSON object, keys in msgpack order
//	any other map           → {"$map":[[key,value],...]}

func toTypedJSON(v mval) string {
	var b strings.Builder
	writeTyped(&b, v)
	return b.String()
}

// typedJSONCharged is toTypedJSON charging bud for the text before it is
// built: the text's exact length is measured first (without holding it).
func typedJSONCharged(v mval, bud *formats.Budget, what string) (string, error) {
	var n countSink
	writeTyped(&n, v)
	if err := bud.Take(int64(n), what+": typed JSON attribute"); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(int(n))
	writeTyped(&b, v)
	return b.String(), nil
}

// typedSink is where writeTyped writes: a strings.Builder, or a
// countSink that only measures.
type typedSink interface {
	io.Writer
	io.ByteWriter
	io.StringWriter
}

// countSink counts the bytes written to it.
type countSink int64

func (c *countSink) Write(p []byte) (int, error)       { *c += countSink(len(p)); return len(p), nil }
func (c *countSink) WriteByte(byte) error              { *c++; return nil }
func (c *countSink) WriteString(s string) (int, error) { *c += countSink(len(s)); return len(s), nil }

func writeTyped(b typedSink, v mval) {
	switch v.kind {
	case kNil:
		b.WriteString("null")
	case kBool:
		b.WriteString(strconv.FormatBool(v.b))
	case kUint:
		b.WriteString(strconv.FormatUint(v.u, 10))
	case kInt:
		b.WriteString(strconv.FormatInt(v.i, 10))
	case kFloat:
		switch {
		case math.IsNaN(v.f):
			b.WriteString(`{"$float":"NaN"}`)
		case math.IsInf(v.f, 1):
			b.WriteString(`{"$float":"+Inf"}`)
		case math.IsInf(v.f, -1):
			b.WriteString(`{"$float":"-Inf"}`)
		default:
			s := strconv.FormatFloat(v.f, 'g', -1, 64)
			if !strings.ContainsAny(s, ".e") {
				s += ".0"
			}
			b.WriteString(s)
		}
	case kStr:
		writeJSONString(b, v.s)
	case kBin:
		b.WriteString(`{"$bin":"`)
		enc := base64.NewEncoder(base64.StdEncoding, b)
		enc.Write(v.bin)
		enc.Close()
		b.WriteString(`"}`)
	case kArray:
		b.WriteByte('[')
		for i, x := range v.arr {
			if i > 0 {
				b.WriteByte(',')
			}
			writeTyped(b, x)
		}
		b.WriteByte(']')
	case kMap:
		if plainMap(v) {
			b.WriteByte('{')
			for i, p := range v.m {
				if i > 0 {
					b.WriteByte(',')
				}
				writeJSONString(b, p.k.s)
				b.WriteByte(':')
				writeTyped(b, p.v)
			}
			b.WriteByte('}')
			return
		}
		b.WriteString(`{"$map":[`)
		for i, p := range v.m {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('[')
			writeTyped(b, p.k)
			b.WriteByte(',')
			writeTyped(b, p.v)
			b.WriteByte(']')
		}
		b.WriteString(`]}`)
	}
}

func plainMap(v mval) bool {
	seen := make(map[string]struct{}, len(v.m))
	for _, p := range v.m {
		if p.k.kind != kStr || strings.HasPrefix(p.k.s, "$") {
			return false
		}
		if _, dup := seen[p.k.s]; dup {
			return false
		}
		seen[p.k.s] = struct{}{}
	}
	return true
}

// writeJSONString writes s (valid UTF-8) as a JSON string, escaping only
// what JSON requires.
func writeJSONString(b typedSink, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// fromTypedJSON parses typed JSON (see toTypedJSON) back into a value.
func fromTypedJSON(s string) (mval, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	v, err := readTyped(dec, 0)
	if te := (tokenErr{}); errors.As(err, &te) {
		// encoding/json's message quotes the text: only where and what.
		return mval{}, fmt.Errorf("typed JSON: %w", jsonerr.DescribeDecoder(dec, []byte(s), 0, te.err))
	}
	if err != nil {
		return mval{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return mval{}, errors.New("typed JSON: trailing data")
	}
	return v, nil
}

// tokenErr is an error of dec.Token, described by fromTypedJSON.
type tokenErr struct{ err error }

func (e tokenErr) Error() string { return "typed JSON: token" }

func readTyped(dec *json.Decoder, depth int) (mval, error) {
	if depth > maxMsgpackDepth {
		return mval{}, fmt.Errorf("typed JSON: nesting deeper than %d", maxMsgpackDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return mval{}, tokenErr{err}
	}
	switch t := tok.(type) {
	case nil:
		return mval{kind: kNil}, nil
	case bool:
		return mBool(t), nil
	case string:
		return mStr(t), nil
	case json.Number:
		return parseTypedNumber(string(t))
	case json.Delim:
		switch t {
		case '[':
			out := mval{kind: kArray}
			for dec.More() {
				v, err := readTyped(dec, depth+1)
				if err != nil {
					return mval{}, err
				}
				out.arr = append(out.arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return mval{}, tokenErr{err}
			}
			return out, nil
		case '{':
			return readTypedObject(dec, depth)
		}
	}
	return mval{}, fmt.Errorf("typed JSON: unexpected token %v", tok)
}

func readTypedObject(dec *json.Decoder, depth int) (mval, error) {
	out := mval{kind: kMap, m: []mpair{}}
	special := ""
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return mval{}, tokenErr{err}
		}
		k, ok := kt.(string)
		if !ok {
			return mval{}, errors.New("typed JSON: object key is not a string")
		}
		if strings.HasPrefix(k, "$") {
			if len(out.m) > 0 || special != "" {
				return mval{}, fmt.Errorf("typed JSON: a $-prefixed key (%d bytes) must be the only key of its object", len(k))
			}
			special = k
			v, err := readSpecial(dec, k, depth)
			if err != nil {
				return mval{}, err
			}
			out = v
			continue
		}
		if special != "" {
			return mval{}, fmt.Errorf("typed JSON: a $-prefixed key (%d bytes) must be the only key of its object", len(special))
		}
		v, err := readTyped(dec, depth+1)
		if err != nil {
			return mval{}, err
		}
		for _, p := range out.m {
			if p.k.s == k {
				return mval{}, fmt.Errorf("typed JSON: duplicate key (%d bytes)", len(k))
			}
		}
		out.m = append(out.m, kv(k, v))
	}
	if _, err := dec.Token(); err != nil {
		return mval{}, tokenErr{err}
	}
	return out, nil
}

func readSpecial(dec *json.Decoder, k string, depth int) (mval, error) {
	v, err := readTyped(dec, depth+1)
	if err != nil {
		return mval{}, err
	}
	switch k {
	case "$bin":
		if v.kind != kStr {
			return mval{}, errors.New("typed JSON: $bin needs a base64 string")
		}
		b, err := base64.StdEncoding.Strict().DecodeString(v.s)
		if err != nil {
			return mval{}, fmt.Errorf("typed JSON: $bin: %w", err)
		}
		return mBin(b), nil
	case "$float":
		switch {
		case v.isStr("NaN"):
			return mval{kind: kFloat, f: math.NaN()}, nil
		case v.isStr("+Inf"):
			return mval{kind: kFloat, f: math.Inf(1)}, nil
		case v.isStr("-Inf"):
			return mval{kind: kFloat, f: math.Inf(-1)}, nil
		}
		return mval{}, errors.New(`typed JSON: $float must be "NaN", "+Inf" or "-Inf"`)
	case "$map":
		if v.kind != kArray {
			return mval{}, errors.New("typed JSON: $map needs an array of pairs")
		}
		out := mval{kind: kMap, m: make([]mpair, 0, len(v.arr))}
		for _, p := range v.arr {
			if p.kind != kArray || len(p.arr) != 2 {
				return mval{}, errors.New("typed JSON: $map entries must be [key, value]")
			}
			out.m = append(out.m, mpair{p.arr[0], p.arr[1]})
		}
		return out, nil
	}
	return mval{}, fmt.Errorf("typed JSON: unknown $-prefixed key (%d bytes)", len(k))
}

// typedNumberErr says why a typed-JSON number does not fit, without
// quoting it (strconv's errors do).
func typedNumberErr(kind, s string, err error) error {
	why := "malformed"
	if errors.Is(err, strconv.ErrRange) {
		why = "out of range"
	}
	return fmt.Errorf("typed JSON: %s (%d bytes): %s", kind, len(s), why)
}

func parseTypedNumber(s string) (mval, error) {
	if strings.ContainsAny(s, ".eE") {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return mval{}, typedNumberErr("float", s, err)
		}
		return mval{kind: kFloat, f: f}, nil
	}
	if strings.HasPrefix(s, "-") {
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return mval{}, typedNumberErr("integer", s, err)
		}
		if i >= 0 {
			return mUint(uint64(i)), nil
		}
		return mval{kind: kInt, i: i}, nil
	}
	u, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return mval{}, typedNumberErr("integer", s, err)
	}
	return mUint(u), nil
}
