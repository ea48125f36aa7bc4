package safetensors

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/jsonerr"
	"github.com/snapd-ml/snapd/snapshot"
)

// entry is one tensor of the header, as parsed.
type entry struct {
	name       string
	dtype      dtypeInfo
	shape      []int64
	begin, end int64 // relative to the data region
	nbytes     int64
}

// Decode implements formats.Codec. See the package documentation for what
// it accepts. Tensor data aliases r when r is memory-backed.
func (Codec) Decode(ctx context.Context, r io.ReaderAt, size int64, opts formats.DecodeOptions) (*snapshot.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fail := func(tensor string, off int64, sentinel error, format string, a ...any) error {
		return &Error{Format: "safetensors", File: opts.Name, Tensor: tensor, Offset: off, Check: fmt.Sprintf(format, a...), Err: sentinel}
	}
	if size < 8 {
		return nil, fail("", 0, ErrCorrupt, "file has %d bytes, need at least 8 for the header length", size)
	}
	var lenBuf [8]byte
	if err := snapshot.ReadFullAt(r, lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors: read header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		// safetensors has no magic: the length field is the file's first 8
		// bytes, which may be anything (a key file named *.safetensors);
		// its value is not printed.
		return nil, fail("", 0, ErrLimit, "header length (the first 8 bytes, little-endian) exceeds the limit of %d bytes: not a safetensors file?", MaxHeaderSize)
	}
	if n > uint64(size-8) {
		return nil, fail("", 0, ErrCorrupt, "header length (the first 8 bytes, little-endian) exceeds the %d bytes after the length field (file size %d)", size-8, size)
	}
	hlen := int64(n)
	var hdr []byte
	if b, ok := snapshot.BytesOf(r); ok && int64(len(b)) >= 8+hlen {
		hdr = b[8 : 8+hlen]
	} else {
		// A copy (r is not memory-backed) is charged to the decode budget.
		bud := opts.Budget(size)
		if rem := bud.Remaining(); bud.Take(hlen, "") != nil {
			return nil, fail("", 0, ErrLimit, "header of %d bytes exceeds the remaining decode budget of %d bytes (%d for this file; DecodeOptions.MaxDecoded)", hlen, rem, bud.Limit())
		}
		hdr = make([]byte, hlen)
		if err := snapshot.ReadFullAt(r, hdr, 8); err != nil {
			return nil, fmt.Errorf("safetensors: read header: %w", err)
		}
	}
	if !utf8.Valid(hdr) {
		bad := 0
		for bad < len(hdr) {
			c, w := utf8.DecodeRune(hdr[bad:])
			if c == utf8.RuneError && w <= 1 {
				break
			}
			bad += w
		}
		return nil, fail("", 8+int64(bad), ErrCorrupt, "header is not valid UTF-8")
	}
	if hlen == 0 || hdr[0] != '{' {
		return nil, fail("", 8, ErrCorrupt, "header does not start with '{'")
	}

	dataStart := headerStart + hlen
	dataLen := size - dataStart
	s := &snapshot.Snapshot{}
	var entries []*entry
	seen := map[string]bool{}
	dec := newJSONDec(hdr, headerStart)
	jsonErr := func(tensor string, err error) error {
		// encoding/json's errors quote the header (walkObject and
		// decodeMetadata describe them with jsonerr, at file offsets):
		// only the position and the kind of failure are reported.
		off := headerStart + dec.InputOffset()
		if je := (*jsonerr.Error)(nil); errors.As(err, &je) && je.Offset >= 0 {
			off = je.Offset
		}
		return fail(tensor, off, ErrCorrupt, "header JSON: %v", err)
	}
	err := walkObject(dec, func(key string) error {
		if seen[key] {
			return fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		if key == "__metadata__" {
			md, present, err := decodeMetadata(dec)
			if err != nil {
				return fmt.Errorf("__metadata__: %w", err)
			}
			if present {
				s.Attrs = map[string]string{AttrMetadata: md}
			}
			return nil
		}
		off := 8 + dec.InputOffset()
		e, err := decodeEntry(dec, key)
		if err != nil {
			sentinel := ErrCorrupt
			var u unsupportedError
			if errors.As(err, &u) {
				sentinel = ErrUnsupported
			}
			return &Error{Format: "safetensors", File: opts.Name, Tensor: key, Offset: off, Check: err.Error(), Err: sentinel}
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, e
		}
		return nil, jsonErr("", err)
	}
	if rest := hdr[dec.InputOffset():]; len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return nil, fail("", 8+dec.InputOffset(), ErrCorrupt, "header has bytes other than white space after the JSON object")
	}

	// Offsets: sorted by position they must tile the data region exactly
	// (no gap, no overlap, nothing after the last tensor).
	byPos := append([]*entry(nil), entries...)
	sort.SliceStable(byPos, func(i, j int) bool {
		if byPos[i].begin != byPos[j].begin {
			return byPos[i].begin < byPos[j].begin
		}
		return byPos[i].end < byPos[j].end
	})
	var pos int64
	for _, e := range byPos {
		if e.begin != pos {
			what := "leaves a gap after"
			if e.begin < pos {
				what = "overlaps"
			}
			return nil, fail(e.name, dataStart+e.begin, ErrCorrupt, "data_offsets [%d,%d] %s the previous tensor's data ending at %d", e.begin, e.end, what, pos)
		}
		if e.end > dataLen {
			return nil, fail(e.name, dataStart+e.begin, ErrCorrupt, "data_offsets [%d,%d] end beyond the %d-byte data region (file size %d)", e.begin, e.end, dataLen, size)
		}
		pos = e.end
	}
	if pos != dataLen {
		return nil, fail("", dataStart+pos, ErrCorrupt, "tensor data covers %d bytes but the data region after the header has %d", pos, dataLen)
	}

	names, err := assignNames(entries)
	if err != nil {
		return nil, fail("", -1, ErrCorrupt, "%v", err)
	}
	s.Arrays = make([]*snapshot.Array, len(entries))
	for i, e := range entries {
		a := &snapshot.Array{Name: names[i], DType: e.dtype.dt, Shape: e.shape}
		if e.dtype.dt == snapshot.Invalid {
			shape, _ := json.Marshal(e.shape)
			a.DType = snapshot.U8
			a.Shape = []int64{e.nbytes}
			a.Attrs = map[string]string{AttrDType: e.dtype.name, AttrShape: string(shape)}
		}
		if names[i] != e.name {
			if a.Attrs == nil {
				a.Attrs = map[string]string{}
			}
			a.Attrs[AttrName] = e.name
		}
		a.Data = snapshot.Section(r, dataStart+e.begin, e.nbytes)
		s.Arrays[i] = a
	}
	return s, nil
}

// unsupportedError marks a decodeEntry failure that is ErrUnsupported
// rather than ErrCorrupt.
type unsupportedError struct{ msg string }

func (e unsupportedError) Error() string { return e.msg }

// headerStart is the file offset of the header JSON.
const headerStart = 8

// jsonDec is a json.Decoder over src, the bytes from file offset base on.
type jsonDec struct {
	*json.Decoder
	src  []byte
	base int64
}

func newJSONDec(src []byte, base int64) *jsonDec {
	return &jsonDec{Decoder: json.NewDecoder(bytes.NewReader(src)), src: src, base: base}
}

// fail describes err, an error of the decoder's Token or Decode, with
// jsonerr at a file offset: never the header's bytes.
func (d *jsonDec) fail(err error) error {
	return jsonerr.DescribeDecoder(d.Decoder, d.src, d.base, err)
}

// walkObject reads a JSON object from dec, calling f for each key with the
// decoder positioned at the value; f must consume the value.
// encoding/json's errors are described with jsonerr at file offsets, f's
// errors are returned as they are.
func walkObject(dec *jsonDec, f func(key string) error) error {
	err := walkObject1(dec, f)
	if errors.Is(err, io.EOF) {
		return errors.New("JSON ends before the object is complete")
	}
	return err
}

func walkObject1(dec *jsonDec, f func(key string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return dec.fail(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("want an object, got %v", tokenString(tok))
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return dec.fail(err)
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("want an object key, got %v", tokenString(tok))
		}
		if err := f(key); err != nil {
			return err
		}
	}
	_, err = dec.Token() // '}'
	return dec.fail(err)
}

// decodeValue reads the next value of dec into v; a failure is described
// with jsonerr at file offsets (a type error's too, which encoding/json
// counts from the value's start).
func decodeValue(dec *jsonDec, v any) error {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return dec.fail(err)
	}
	start := dec.base + dec.InputOffset() - int64(len(raw))
	return jsonerr.DescribeAt(json.Unmarshal(raw, v), start)
}

func tokenString(t json.Token) string {
	switch v := t.(type) {
	case json.Delim:
		return fmt.Sprintf("'%s'", v)
	case string:
		return fmt.Sprintf("a string of %d bytes", len(v)) // never echo the header's text
	case nil:
		return "null"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("a %T", t)
}

// decodeMetadata reads the __metadata__ value: an object of strings (keys
// unique) or null. It returns the canonical JSON of a present object.
func decodeMetadata(dec *jsonDec) (string, bool, error) {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return "", false, dec.fail(err)
	}
	if string(raw) == "null" {
		return "", false, nil
	}
	md := map[string]string{}
	inner := newJSONDec(raw, dec.base+dec.InputOffset()-int64(len(raw)))
	err := walkObject(inner, func(key string) error {
		if _, dup := md[key]; dup {
			return fmt.Errorf("duplicate key (%d bytes)", len(key))
		}
		tok, err := inner.Token()
		if err != nil {
			return inner.fail(err)
		}
		v, ok := tok.(string)
		if !ok {
			return fmt.Errorf("value of key %d is %s, want a string", len(md)+1, tokenString(tok))
		}
		md[key] = v
		return nil
	})
	if err != nil {
		return "", false, err
	}
	return canonicalMetadata(md), true, nil
}

// decodeEntry reads one tensor's object {"dtype","shape","data_offsets"}.
func decodeEntry(dec *jsonDec, name string) (*entry, error) {
	var (
		dtype   *string
		shape   []uint64
		offsets []uint64
		gotShp  bool
	)
	err := walkObject(dec, func(key string) error {
		switch key {
		case "dtype":
			if dtype != nil {
				return errors.New("duplicate field \"dtype\"")
			}
			var v string
			if err := decodeValue(dec, &v); err != nil {
				return fmt.Errorf("dtype: want a string: %w", err)
			}
			dtype = &v
		case "shape":
			if gotShp {
				return errors.New("duplicate field \"shape\"")
			}
			gotShp = true
			if err := decodeValue(dec, &shape); err != nil {
				return fmt.Errorf("shape: want an array of non-negative integers: %w", err)
			}
			if shape == nil {
				return errors.New("shape is null")
			}
		case "data_offsets":
			if offsets != nil {
				return errors.New("duplicate field \"data_offsets\"")
			}
			if err := decodeValue(dec, &offsets); err != nil {
				return fmt.Errorf("data_offsets: want [begin, end] non-negative integers: %w", err)
			}
			if len(offsets) != 2 {
				return fmt.Errorf("data_offsets has %d elements, want 2", len(offsets))
			}
		default:
			return fmt.Errorf("unknown field (a key of %d bytes; want dtype, shape, data_offsets)", len(key))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch {
	case dtype == nil:
		return nil, errors.New("missing field \"dtype\"")
	case !gotShp:
		return nil, errors.New("missing field \"shape\"")
	case offsets == nil:
		return nil, errors.New("missing field \"data_offsets\"")
	}
	d, ok := lookupDType(*dtype)
	if !ok {
		return nil, unsupportedError{fmt.Sprintf("dtype (a string of %d bytes) is not a safetensors dtype this codec knows", len(*dtype))}
	}
	e := &entry{name: name, dtype: d, shape: make([]int64, len(shape))}
	for i, v := range shape {
		if v > 1<<63-1 {
			return nil, fmt.Errorf("shape[%d] = %d overflows int64", i, v)
		}
		e.shape[i] = int64(v)
	}
	nb, err := byteSize(d, e.shape)
	if err != nil {
		return nil, fmt.Errorf("shape %v with dtype %s: %v", shape, d.name, err)
	}
	if offsets[0] > offsets[1] {
		return nil, fmt.Errorf("data_offsets [%d,%d]: begin after end", offsets[0], offsets[1])
	}
	if offsets[1] > 1<<62 {
		return nil, fmt.Errorf("data_offsets [%d,%d]: out of range", offsets[0], offsets[1])
	}
	e.begin, e.end, e.nbytes = int64(offsets[0]), int64(offsets[1]), nb
	if e.end-e.begin != nb {
		return nil, fmt.Errorf("data_offsets [%d,%d] span %d bytes, but shape %v of %s needs %d", e.begin, e.end, e.end-e.begin, shape, d.name, nb)
	}
	return e, nil
}

// assignNames returns the WTXT array name of every entry: the tensor name
// itself when legal, otherwise sanitizedName with the shortest hash suffix
// (8, 16 or 64 hex digits) that collides with no other name.
func assignNames(entries []*entry) ([]string, error) {
	out := make([]string, len(entries))
	taken := map[string]bool{}
	for i, e := range entries {
		if snapshot.PortableName(e.name) {
			out[i] = e.name
			taken[e.name] = true
		}
	}
	// Illegal names in a fixed order (bytewise), so the result does not
	// depend on the header's key order.
	var idx []int
	for i := range entries {
		if out[i] == "" {
			idx = append(idx, i)
		}
	}
	sort.Slice(idx, func(a, b int) bool { return entries[idx[a]].name < entries[idx[b]].name })
	for _, i := range idx {
		for _, h := range []int{8, 16, 64} {
			n := sanitizedName(entries[i].name, h)
			if !taken[n] {
				out[i] = n
				taken[n] = true
				break
			}
		}
		if out[i] == "" {
			return nil, fmt.Errorf("tensor %q: no collision-free array name", entries[i].name)
		}
	}
	return out, nil
}

// canonicalMetadata is the JSON of md with keys sorted bytewise, in the
// serde_json string style (see writeString).
func canonicalMetadata(md map[string]string) string {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(&b, k)
		b.WriteByte(':')
		writeString(&b, md[k])
	}
	b.WriteByte('}')
	return b.String()
}
