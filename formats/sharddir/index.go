package sharddir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/jsonerr"
)

// Index is a parsed Hugging Face shard index
// ({"metadata": {...}, "weight_map": {"tensor": "shard file", ...}}).
type Index struct {
	// Metadata is the "metadata" object as canonical JSON (keys sorted,
	// compact, numbers as written), nil when absent or null.
	Metadata json.RawMessage
	// WeightMap maps each tensor name to the shard file holding it.
	WeightMap map[string]string
}

// Tensors returns the weight_map keys, sorted.
func (x *Index) Tensors() []string {
	out := make([]string, 0, len(x.WeightMap))
	for k := range x.WeightMap {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Shards returns the distinct shard names of the weight_map, sorted.
func (x *Index) Shards() []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range x.WeightMap {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// maxJSONDepth bounds the nesting of the metadata object.
const maxJSONDepth = 64

// ParseIndex parses an index document (at most lim.MaxIndexBytes bytes and
// lim.MaxIndexEntries weight_map entries). name is used in errors. It
// refuses: anything but one JSON object (trailing data included), keys
// other than "metadata" and "weight_map" (so nothing is silently lost),
// a missing or empty weight_map, duplicate keys at any level (a tensor
// listed twice is named), non-string shard names, and shard names that
// are not a plain file name of the index's directory (absolute, "..",
// "/", "\", NUL, control bytes, longer than 255 bytes, dot-names).
func ParseIndex(name string, b []byte, lim Limits) (*Index, error) {
	lim = lim.withDefaults()
	if int64(len(b)) > lim.MaxIndexBytes {
		return nil, errf(name, -1, "", ErrLimit, "index is %d bytes, limit %d", len(b), lim.MaxIndexBytes)
	}
	if !utf8.Valid(b) {
		return nil, errf(name, -1, "", ErrCorrupt, "index is not valid UTF-8")
	}
	p := &parser{name: name, src: b, dec: json.NewDecoder(bytes.NewReader(b)), lim: lim}
	p.dec.UseNumber()
	x, err := p.index()
	if err != nil {
		return nil, err
	}
	return x, nil
}

type parser struct {
	name string
	src  []byte // what dec reads
	dec  *json.Decoder
	lim  Limits
}

func (p *parser) fail(err error, format string, args ...any) *formats.Error {
	return errf(p.name, p.dec.InputOffset(), "", err, format, args...)
}

// token reads the next token, turning syntax errors into located errors
// that do not quote the input.
func (p *parser) token() (json.Token, error) {
	off := p.dec.InputOffset()
	t, err := p.dec.Token()
	if err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			// encoding/json's offset of a syntax error in a token stream
			// is not an input offset: jsonerr finds the offending byte.
			var je *jsonerr.Error
			if errors.As(jsonerr.DescribeDecoder(p.dec, p.src, 0, err), &je) && je.Offset >= 0 {
				off = je.Offset
			}
			return nil, errf(p.name, off, "", ErrCorrupt, "invalid JSON")
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil, errf(p.name, off, "", ErrCorrupt, "JSON ends early")
		default:
			return nil, errf(p.name, off, "", ErrCorrupt, "invalid JSON")
		}
	}
	return t, nil
}

func (p *parser) delim(want json.Delim, what string) error {
	off := p.dec.InputOffset()
	t, err := p.token()
	if err != nil {
		return err
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return errf(p.name, off, "", ErrCorrupt, "%s: want %q", what, string(want))
	}
	return nil
}

func (p *parser) index() (*Index, error) {
	if err := p.delim('{', "index"); err != nil {
		return nil, err
	}
	x := &Index{}
	var haveMeta, haveMap bool
	for p.dec.More() {
		off := p.dec.InputOffset()
		t, err := p.token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		switch key {
		case "metadata":
			if haveMeta {
				return nil, errf(p.name, off, "", ErrCorrupt, "duplicate key \"metadata\"")
			}
			haveMeta = true
			v, err := p.value(0)
			if err != nil {
				return nil, err
			}
			switch v.(type) {
			case nil:
			case map[string]any:
				if x.Metadata, err = canonicalJSON(v); err != nil {
					return nil, errf(p.name, off, "", ErrCorrupt, "metadata: %v", err)
				}
			default:
				return nil, errf(p.name, off, "", ErrCorrupt, "metadata: want an object")
			}
		case "weight_map":
			if haveMap {
				return nil, errf(p.name, off, "", ErrCorrupt, "duplicate key \"weight_map\"")
			}
			haveMap = true
			if x.WeightMap, err = p.weightMap(); err != nil {
				return nil, err
			}
		default:
			return nil, errf(p.name, off, "", ErrCorrupt, "unknown top-level key (%d bytes; want metadata, weight_map)", len(key))
		}
	}
	if err := p.delim('}', "index"); err != nil {
		return nil, err
	}
	if _, err := p.dec.Token(); !errors.Is(err, io.EOF) {
		return nil, p.fail(ErrCorrupt, "data after the index object")
	}
	if !haveMap {
		return nil, errf(p.name, -1, "", ErrCorrupt, "no weight_map")
	}
	if len(x.WeightMap) == 0 {
		return nil, errf(p.name, -1, "", ErrCorrupt, "weight_map is empty")
	}
	return x, nil
}

func (p *parser) weightMap() (map[string]string, error) {
	if err := p.delim('{', "weight_map"); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for p.dec.More() {
		off := p.dec.InputOffset()
		t, err := p.token()
		if err != nil {
			return nil, err
		}
		tensor := t.(string) // object keys are strings
		if len(m) >= p.lim.MaxIndexEntries {
			return nil, errf(p.name, off, "", ErrLimit, "weight_map has more than %d entries", p.lim.MaxIndexEntries)
		}
		if len(tensor) > maxTensorName {
			return nil, errf(p.name, off, "", ErrLimit, "weight_map key of %d bytes, limit %d", len(tensor), maxTensorName)
		}
		voff := p.dec.InputOffset()
		v, err := p.token()
		if err != nil {
			return nil, err
		}
		shard, ok := v.(string)
		if !ok {
			if _, isDelim := v.(json.Delim); isDelim {
				return nil, errf(p.name, voff, tensor, ErrCorrupt, "weight_map value: want a shard file name (string)")
			}
			return nil, errf(p.name, voff, tensor, ErrCorrupt, "weight_map value: want a shard file name (string)")
		}
		if _, dup := m[tensor]; dup {
			return nil, errf(p.name, off, tensor, ErrCorrupt, "listed twice in weight_map")
		}
		if err := checkFileName(shard); err != nil {
			return nil, errf(p.name, voff, tensor, ErrUnsafe, "shard %s: %v", quote(shard), err)
		}
		m[tensor] = shard
	}
	if err := p.delim('}', "weight_map"); err != nil {
		return nil, err
	}
	return m, nil
}

// value reads one JSON value into nil, bool, json.Number, string,
// []any or map[string]any, refusing duplicate keys and deep nesting.
func (p *parser) value(depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, p.fail(ErrLimit, "metadata nested deeper than %d", maxJSONDepth)
	}
	t, err := p.token()
	if err != nil {
		return nil, err
	}
	switch d := t.(type) {
	case json.Delim:
		switch d {
		case '{':
			m := map[string]any{}
			for p.dec.More() {
				off := p.dec.InputOffset()
				kt, err := p.token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				if _, dup := m[k]; dup {
					return nil, errf(p.name, off, "", ErrCorrupt, "metadata: duplicate key (%d bytes)", len(k))
				}
				v, err := p.value(depth + 1)
				if err != nil {
					return nil, err
				}
				m[k] = v
			}
			if _, err := p.token(); err != nil {
				return nil, err
			}
			return m, nil
		case '[':
			a := []any{}
			for p.dec.More() {
				v, err := p.value(depth + 1)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			if _, err := p.token(); err != nil {
				return nil, err
			}
			return a, nil
		}
		return nil, p.fail(ErrCorrupt, "unexpected %q", string(d))
	default:
		return t, nil
	}
}

// maxTensorName bounds a weight_map key.
const maxTensorName = 64 << 10

// checkFileName accepts a plain file name of the index's directory.
func checkFileName(s string) error {
	switch {
	case s == "":
		return errors.New("empty name")
	case strings.HasPrefix(s, "/"):
		return errors.New("absolute path refused: only file names of the directory itself are allowed")
	case strings.ContainsAny(s, "/\\"):
		return errors.New("path with a directory part refused (\"..\", \"/\"): only file names of the directory itself are allowed")
	case s == "." || s == "..":
		return errors.New("not a file name")
	case strings.HasPrefix(s, "."):
		return errors.New("dot-names are refused")
	case len(s) > 255:
		return fmt.Errorf("name of %d bytes, limit 255", len(s))
	case !utf8.ValidString(s):
		return errors.New("name is not valid UTF-8")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return errors.New("control byte in name")
		}
	}
	return nil
}

// canonicalJSON encodes v compactly with sorted keys and no HTML escaping.
func canonicalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// MarshalIndex writes an index the way Hugging Face libraries do:
// json.dumps(index, indent=2, sort_keys=True) + "\n" (ensure_ascii: every
// non-ASCII character as \uXXXX). metadata is a JSON object (canonical or
// not) or nil for {}; weightMap maps tensor names to shard names.
func MarshalIndex(metadata json.RawMessage, weightMap map[string]string) ([]byte, error) {
	var meta any = map[string]any{}
	if len(metadata) > 0 {
		dec := json.NewDecoder(bytes.NewReader(metadata))
		dec.UseNumber()
		if err := dec.Decode(&meta); err != nil {
			return nil, fmt.Errorf("metadata: %w", jsonerr.Describe(err))
		}
		if _, ok := meta.(map[string]any); !ok {
			return nil, errors.New("metadata: want an object")
		}
	}
	wm := make(map[string]any, len(weightMap))
	for k, v := range weightMap {
		wm[k] = v
	}
	var b bytes.Buffer
	pyDump(&b, map[string]any{"metadata": meta, "weight_map": wm}, 0)
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// pyDump writes v like Python's json.dumps(v, indent=2, sort_keys=True).
func pyDump(b *bytes.Buffer, v any, indent int) {
	nl := func(n int) {
		b.WriteByte('\n')
		for i := 0; i < n; i++ {
			b.WriteString("  ")
		}
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case json.Number:
		b.WriteString(string(x))
	case string:
		pyString(b, x)
	case []any:
		if len(x) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			nl(indent + 1)
			pyDump(b, e, indent+1)
		}
		nl(indent)
		b.WriteByte(']')
	case map[string]any:
		if len(x) == 0 {
			b.WriteString("{}")
			return
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys) // bytewise UTF-8 order = code point order
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			nl(indent + 1)
			pyString(b, k)
			b.WriteString(": ")
			pyDump(b, x[k], indent+1)
		}
		nl(indent)
		b.WriteByte('}')
	}
}

// pyString writes s as Python's json.dumps with ensure_ascii=True does.
func pyString(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20 || r >= 0x7f:
			u := func(c rune) {
				b.WriteString(`\u`)
				b.WriteByte(hex[c>>12&15])
				b.WriteByte(hex[c>>8&15])
				b.WriteByte(hex[c>>4&15])
				b.WriteByte(hex[c&15])
			}
			if r > 0xffff {
				r -= 0x10000
				u(0xd800 + (r>>10)&0x3ff)
				u(0xdc00 + r&0x3ff)
			} else {
				u(r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}
