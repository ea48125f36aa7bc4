package snapshot

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits of UserMeta (docs/FORMAT.md "Generation metadata"). Every
// reader checks sizes before it allocates for them.
const (
	// MaxUserMetaKeys is the most keys a generation's metadata holds.
	MaxUserMetaKeys = 64
	// MaxUserMetaKeyLen is the longest key; keys are 1..64 of
	// [A-Za-z0-9_.-].
	MaxUserMetaKeyLen = 64
	// MaxUserMetaString is the longest string value in bytes (UTF-8).
	MaxUserMetaString = 256
	// MaxUserMetaSize is the longest canonical JSON of a generation's
	// metadata (UserMeta.JSON), in bytes. It leaves room for the rest of
	// a request line (wal.MaxLineSize is 4096 bytes).
	MaxUserMetaSize = 2048
	// MaxUserMetaInput is the longest JSON text ParseUserMeta reads
	// (white space and escapes make an input longer than its canonical
	// form); longer input is refused before it is scanned.
	MaxUserMetaInput = 16 << 10
)

// ErrUserMeta: metadata that is not a bounded object of JSON scalars
// with valid keys. Errors name the key (keys are checked first and only
// a valid key is ever quoted) or the byte offset, never a value.
var ErrUserMeta = errors.New("generation metadata")

// MetaEntry is one key of UserMeta. Value is the canonical JSON text of
// the value: a string ("..."), a number, true, false or null.
type MetaEntry struct {
	Key   string
	Value string
}

// UserMeta is the metadata a trainer attaches to a generation (step,
// epoch, loss, learning rate, ...): at most MaxUserMetaKeys JSON scalars
// under keys of [A-Za-z0-9_.-]{1,64}, sorted bytewise by key, each value
// in its canonical JSON text. The zero value (nil) is no metadata. WTXT
// stores it in the attributes document (AttrsArrayName, member "meta"),
// so it is covered by sha256_all, the Merkle chain and the signature;
// codecs other than WTXT never write it into a checkpoint.
//
// Canonical JSON (UserMeta.JSON): {"k":v,...} with keys in ascending
// bytewise order, no white space; strings escape '"' and '\' with a
// backslash, U+0008, U+0009, U+000A, U+000C, U+000D as \b \t \n \f \r,
// every other code point below U+0020 or above U+007E as \uXXXX
// (lowercase hex; a UTF-16 surrogate pair above U+FFFF), so the text is
// printable ASCII (what Python's json.dumps with ensure_ascii writes);
// numbers are IEEE 754 doubles written as ECMAScript's
// Number.prototype.toString writes them (RFC 8785 §3.2.2.3: shortest
// round-trip digits, "1200", "0.41", "0.0003", "1e-7", "1e+21"; -0 is
// "0"); an integer literal that is not exactly a double (9007199254740993,
// above 2^53) is refused, not rounded.
type UserMeta []MetaEntry

// Get returns the canonical JSON text of key's value.
func (m UserMeta) Get(key string) (string, bool) {
	i := sort.Search(len(m), func(i int) bool { return m[i].Key >= key })
	if i < len(m) && m[i].Key == key {
		return m[i].Value, true
	}
	return "", false
}

// JSON returns the canonical JSON object, or nil for no metadata.
func (m UserMeta) JSON() []byte {
	if len(m) == 0 {
		return nil
	}
	b := []byte{'{'}
	for i, e := range m {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, e.Key...)
		b = append(b, '"', ':')
		b = append(b, e.Value...)
	}
	return append(b, '}')
}

// String is the one-line form the commit trailer Snapd-Meta, `snapd wal
// list`, `snapd status` and `snapd log` show: KEY=VALUE pairs in key order
// separated by one space, each VALUE its canonical JSON text (a string
// keeps its quotes, so the line parses back: ParseUserMetaLine). ""
// for no metadata.
func (m UserMeta) String() string {
	var b strings.Builder
	for i, e := range m {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(e.Key)
		b.WriteByte('=')
		b.WriteString(e.Value)
	}
	return b.String()
}

// Equal reports whether m and o hold the same keys and values.
func (m UserMeta) Equal(o UserMeta) bool {
	if len(m) != len(o) {
		return false
	}
	for i := range m {
		if m[i] != o[i] {
			return false
		}
	}
	return true
}

// MetaChange is one difference between two generations' metadata: Old
// is "" for an added key, New "" for a removed one.
type MetaChange struct {
	Key, Old, New string
}

// DiffUserMeta lists the keys whose values differ between old and new,
// in key order.
func DiffUserMeta(old, new UserMeta) []MetaChange {
	var out []MetaChange
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		switch {
		case j == len(new) || i < len(old) && old[i].Key < new[j].Key:
			out = append(out, MetaChange{Key: old[i].Key, Old: old[i].Value})
			i++
		case i == len(old) || new[j].Key < old[i].Key:
			out = append(out, MetaChange{Key: new[j].Key, New: new[j].Value})
			j++
		default:
			if old[i].Value != new[j].Value {
				out = append(out, MetaChange{Key: old[i].Key, Old: old[i].Value, New: new[j].Value})
			}
			i++
			j++
		}
	}
	return out
}

// DiffUserMetaKeys lists the keys whose values differ between a and b
// (DiffUserMeta's keys, in key order): what a message about two versions
// of the metadata names instead of their values.
func DiffUserMetaKeys(a, b UserMeta) []string {
	var keys []string
	for _, c := range DiffUserMeta(a, b) {
		keys = append(keys, c.Key)
	}
	return keys
}

// MarshalJSON writes the canonical JSON object (null for no metadata).
func (m UserMeta) MarshalJSON() ([]byte, error) {
	if len(m) == 0 {
		return []byte("null"), nil
	}
	return m.JSON(), nil
}

// UnmarshalJSON reads any JSON object ParseUserMeta accepts (null: none).
func (m *UserMeta) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*m = nil
		return nil
	}
	v, err := ParseUserMeta(b)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// ValidMetaKey reports whether k is 1..MaxUserMetaKeyLen of
// [A-Za-z0-9_.-].
func ValidMetaKey(k string) bool {
	if len(k) == 0 || len(k) > MaxUserMetaKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// metaKeyError names a key: quoted when valid, else by its size only (an
// invalid key may come from a hostile file).
func metaKeyError(k string, format string, args ...any) error {
	what := fmt.Sprintf("a key of %d bytes", len(k))
	if ValidMetaKey(k) {
		what = strconv.Quote(k)
	}
	return fmt.Errorf("%w: key %s: %s", ErrUserMeta, what, fmt.Sprintf(format, args...))
}

// metaBuilder collects entries and checks the limits as they arrive.
type metaBuilder struct {
	m    UserMeta
	seen map[string]bool
	size int // canonical JSON size so far, braces included
}

func (b *metaBuilder) add(key, value string) error {
	if !ValidMetaKey(key) {
		return metaKeyError(key, "keys are 1..%d of [A-Za-z0-9_.-]", MaxUserMetaKeyLen)
	}
	if b.seen[key] {
		return metaKeyError(key, "given twice")
	}
	if len(b.m) == MaxUserMetaKeys {
		return metaKeyError(key, "more than %d keys", MaxUserMetaKeys)
	}
	if b.size == 0 {
		b.size = 2
	} else {
		b.size++ // ','
	}
	b.size += len(key) + 3 + len(value)
	if b.size > MaxUserMetaSize {
		return metaKeyError(key, "the canonical JSON exceeds %d bytes", MaxUserMetaSize)
	}
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	b.seen[key] = true
	b.m = append(b.m, MetaEntry{Key: key, Value: value})
	return nil
}

func (b *metaBuilder) done() UserMeta {
	sort.Slice(b.m, func(i, j int) bool { return b.m[i].Key < b.m[j].Key })
	return b.m
}

// ParseUserMeta reads a JSON object of scalars (any valid JSON text of
// at most MaxUserMetaInput bytes: white space, escapes and number forms
// are free) into canonical UserMeta, checking every limit. An empty
// object is no metadata (nil). Nested arrays and objects, duplicate
// keys, invalid UTF-8, unpaired surrogates, non-finite or inexact
// numbers are refused with ErrUserMeta naming the key or the offset.
func ParseUserMeta(text []byte) (UserMeta, error) {
	if len(text) > MaxUserMetaInput {
		return nil, fmt.Errorf("%w: %d bytes of JSON exceeds %d", ErrUserMeta, len(text), MaxUserMetaInput)
	}
	p := metaParser{b: text}
	var mb metaBuilder
	p.ws()
	if !p.lit("{") {
		return nil, p.fail("want a JSON object of scalars")
	}
	p.ws()
	if p.lit("}") {
		p.ws()
		if p.i != len(p.b) {
			return nil, p.fail("text after the object")
		}
		return nil, nil
	}
	for {
		p.ws()
		if p.peek() != '"' {
			return nil, p.fail("want a key string")
		}
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		if !ValidMetaKey(key) {
			return nil, metaKeyError(key, "keys are 1..%d of [A-Za-z0-9_.-]", MaxUserMetaKeyLen)
		}
		p.ws()
		if !p.lit(":") {
			return nil, p.fail("want ':'")
		}
		p.ws()
		val, err := p.scalar(key)
		if err != nil {
			return nil, err
		}
		if err := mb.add(key, val); err != nil {
			return nil, err
		}
		p.ws()
		if p.lit(",") {
			continue
		}
		if p.lit("}") {
			break
		}
		return nil, p.fail("want ',' or '}'")
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, p.fail("text after the object")
	}
	return mb.done(), nil
}

// ParseUserMetaCanonical is ParseUserMeta that also requires text to be
// the canonical JSON (UserMeta.JSON) byte for byte: what a stored
// generation or a request line carries.
func ParseUserMetaCanonical(text []byte) (UserMeta, error) {
	m, err := ParseUserMeta(text)
	if err != nil {
		return nil, err
	}
	if m == nil || string(m.JSON()) != string(text) {
		return nil, fmt.Errorf("%w: not in canonical form (keys sorted, no white space, canonical numbers and escapes; docs/FORMAT.md)", ErrUserMeta)
	}
	return m, nil
}

// ParseUserMetaValue reads one value given as text on a command line
// (snapd request-snapshot --meta KEY=VALUE): a JSON scalar when VALUE
// is one (1200, 0.41, 3e-4, true, null, "quoted"), otherwise VALUE
// itself as a string. It returns the canonical JSON text.
func ParseUserMetaValue(key, value string) (string, error) {
	if !ValidMetaKey(key) {
		return "", metaKeyError(key, "keys are 1..%d of [A-Za-z0-9_.-]", MaxUserMetaKeyLen)
	}
	if len(value) <= MaxUserMetaInput {
		p := metaParser{b: []byte(value)}
		if v, err := p.scalar(key); err == nil && p.i == len(p.b) {
			return v, nil
		} else if err != nil && looksNumeric(value) {
			return "", err // a number out of range is not silently a string
		}
	}
	return metaString(key, value)
}

// looksNumeric: value is a JSON number's text (then a failure to read it
// is reported rather than taking it as a string).
func looksNumeric(v string) bool {
	p := metaParser{b: []byte(v)}
	return p.numberText() && p.i == len(p.b)
}

// BuildUserMeta makes UserMeta from KEY and canonical VALUE pairs (as
// ParseUserMetaValue returns), checking every limit.
func BuildUserMeta(pairs []MetaEntry) (UserMeta, error) {
	var mb metaBuilder
	for _, e := range pairs {
		if err := mb.add(e.Key, e.Value); err != nil {
			return nil, err
		}
	}
	return mb.done(), nil
}

// ParseUserMetaLine reads String's form (the Snapd-Meta trailer) back.
func ParseUserMetaLine(line string) (UserMeta, error) {
	if len(line) > MaxUserMetaInput {
		return nil, fmt.Errorf("%w: line of %d bytes exceeds %d", ErrUserMeta, len(line), MaxUserMetaInput)
	}
	var mb metaBuilder
	p := metaParser{b: []byte(line)}
	for p.i < len(p.b) {
		if len(mb.m) > 0 && !p.lit(" ") {
			return nil, p.fail("want one space between KEY=VALUE pairs")
		}
		eq := strings.IndexByte(line[p.i:], '=')
		if eq < 0 {
			return nil, p.fail("want KEY=VALUE")
		}
		key := line[p.i : p.i+eq]
		if !ValidMetaKey(key) {
			return nil, metaKeyError(key, "keys are 1..%d of [A-Za-z0-9_.-]", MaxUserMetaKeyLen)
		}
		p.i += eq + 1
		start := p.i
		v, err := p.scalar(key)
		if err != nil {
			return nil, err
		}
		if v != line[start:p.i] {
			return nil, metaKeyError(key, "value not in canonical form")
		}
		if len(mb.m) > 0 && mb.m[len(mb.m)-1].Key >= key {
			return nil, metaKeyError(key, "keys out of order")
		}
		if err := mb.add(key, v); err != nil {
			return nil, err
		}
	}
	return mb.m, nil
}

type metaParser struct {
	b []byte
	i int
}

func (p *metaParser) fail(what string) error {
	return fmt.Errorf("%w: byte %d: %s", ErrUserMeta, p.i, what)
}

func (p *metaParser) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *metaParser) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *metaParser) lit(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// scalar reads one JSON scalar and returns its canonical text.
func (p *metaParser) scalar(key string) (string, error) {
	switch c := p.peek(); {
	case c == '"':
		s, err := p.str()
		if err != nil {
			return "", err
		}
		return metaString(key, s)
	case c == 't' && p.lit("true"):
		return "true", nil
	case c == 'f' && p.lit("false"):
		return "false", nil
	case c == 'n' && p.lit("null"):
		return "null", nil
	case c == '-' || c >= '0' && c <= '9':
		start := p.i
		if !p.numberText() {
			return "", p.fail("malformed number")
		}
		return canonicalNumber(key, string(p.b[start:p.i]))
	case c == '[' || c == '{':
		return "", metaKeyError(key, "values are JSON scalars (string, number, true, false, null), not arrays or objects")
	}
	return "", p.fail("want a JSON scalar")
}

// numberText consumes JSON number syntax.
func (p *metaParser) numberText() bool {
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	p.lit("-")
	switch {
	case p.lit("0"):
	case digits() == 0:
		return false
	}
	if p.lit(".") && digits() == 0 {
		return false
	}
	if p.lit("e") || p.lit("E") {
		if !p.lit("+") {
			p.lit("-")
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

// canonicalNumber returns the ECMAScript form of a JSON number's text.
func canonicalNumber(key, text string) (string, error) {
	f, err := strconv.ParseFloat(text, 64)
	if err != nil && (math.IsInf(f, 0) || math.IsNaN(f)) || math.IsInf(f, 0) {
		return "", metaKeyError(key, "number out of the range of a double")
	}
	if !strings.ContainsAny(text, ".eE") && strconv.FormatFloat(f, 'f', 0, 64) != text {
		return "", metaKeyError(key, "integer is not exactly a double (numbers are IEEE 754 doubles: every integer up to ±2^53 is)")
	}
	return FormatMetaNumber(f), nil
}

// FormatMetaNumber writes a finite double as ECMAScript's
// Number.prototype.toString does (RFC 8785 §3.2.2.3), -0 as "0".
func FormatMetaNumber(f float64) string {
	if f == 0 {
		return "0"
	}
	abs := math.Abs(f)
	fmtc := byte('f')
	if abs < 1e-6 || abs >= 1e21 {
		fmtc = 'e'
	}
	b := strconv.AppendFloat(nil, f, fmtc, -1, 64)
	if fmtc == 'e' {
		// e-07 → e-7, as ECMAScript writes exponents.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return string(b)
}

// metaString checks a decoded string value and returns its canonical
// JSON text.
func metaString(key, s string) (string, error) {
	if len(s) > MaxUserMetaString {
		return "", metaKeyError(key, "string of %d bytes exceeds %d", len(s), MaxUserMetaString)
	}
	if !utf8.ValidString(s) {
		return "", metaKeyError(key, "string is not valid UTF-8")
	}
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\b':
			b = append(b, '\\', 'b')
		case r == '\t':
			b = append(b, '\\', 't')
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\f':
			b = append(b, '\\', 'f')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r >= 0x20 && r <= 0x7e:
			b = append(b, byte(r))
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			b = appendU(appendU(b, r1), r2)
		default:
			b = appendU(b, r)
		}
	}
	return string(append(b, '"')), nil
}

func appendU(b []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	return append(b, '\\', 'u', hex[r>>12&15], hex[r>>8&15], hex[r>>4&15], hex[r&15])
}

// str reads a JSON string (the opening quote at p.i) and returns it
// decoded; it reads at most MaxUserMetaInput bytes (the input's bound).
func (p *metaParser) str() (string, error) {
	start := p.i
	p.i++ // '"'
	var out []byte
	for {
		if p.i >= len(p.b) {
			p.i = start
			return "", p.fail("unterminated string")
		}
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(out) {
				p.i = start
				return "", p.fail("string is not valid UTF-8")
			}
			return string(out), nil
		case c < 0x20:
			return "", p.fail("control byte in a string")
		case c != '\\':
			out = append(out, c)
			p.i++
			continue
		}
		p.i++
		if p.i >= len(p.b) {
			return "", p.fail("unterminated escape")
		}
		e := p.b[p.i]
		p.i++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.fail("malformed \\u escape")
			}
			if utf16.IsSurrogate(r) {
				if r >= 0xdc00 || !p.lit(`\u`) {
					return "", p.fail("unpaired UTF-16 surrogate")
				}
				r2, ok := p.hex4()
				if !ok || r2 < 0xdc00 || r2 > 0xdfff {
					return "", p.fail("unpaired UTF-16 surrogate")
				}
				r = utf16.DecodeRune(r, r2)
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", p.fail("unknown escape")
		}
	}
}

func (p *metaParser) hex4() (rune, bool) {
	if len(p.b)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}
