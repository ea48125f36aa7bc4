// Package snapshot is snapd's domain model: a Snapshot is a set of named,
// typed, shaped arrays plus the generation metadata that WTXT writes in its
// header. Array bytes are never required to be in the heap: each Array reads
// from a Source, which may be a memory-mapped file region.
//
// This package imports no other package of the project.
package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"time"

	"github.com/snapd-ml/snapd/internal/jsonerr"
)

// MaxGen is the largest generation number snapd writes or accepts in a
// request: 999999999999999999, the largest 18-digit decimal. The WTXT
// profile writes meta gen as DEC6 (decimal, zero-padded to at least 6
// digits) and snapd's parser reads it as an int64, so every value up to
// MaxGen round-trips through writer and parser, while 2^63-1 (a common
// "max" sentinel, and a value that would end a chain: no later generation
// exists) and everything above it is refused where it enters: the WAL
// writer, `snapd request-snapshot`, scripts/snapd_trainer.py, the daemon
// (which records such a request as failed and keeps its chain) and
// Snapshot.Validate (so no writer emits a meta gen its parser rejects).
const MaxGen uint64 = 999_999_999_999_999_999

// ErrGenRange: a generation number is 0 or above MaxGen.
var ErrGenRange = errors.New("generation number out of range")

// CheckGen returns an error wrapping ErrGenRange unless 1 <= gen <= MaxGen.
func CheckGen(gen uint64) error {
	if gen < 1 || gen > MaxGen {
		return fmt.Errorf("%w: gen %d: generations are 1..%d (at most 18 decimal digits)", ErrGenRange, gen, MaxGen)
	}
	return nil
}

// Meta is the generation metadata of a snapshot (WTXT's meta line).
type Meta struct {
	Schema string    // e.g. "weights/v1"
	Gen    uint64    // generation number, at most MaxGen
	TS     time.Time // UTC, whole seconds
	Build  string    // build identifier of the producer
	Host   string    // e.g. "cpu"
	Cuda   string    // e.g. "off"
}

// DefaultMeta returns the defaults used when nothing else is given: schema
// weights/v1, gen 1, build unknown, host cpu, cuda off, and a zero TS (which
// writers replace by SOURCE_DATE_EPOCH or the clock).
func DefaultMeta() Meta {
	return Meta{Schema: "weights/v1", Gen: 1, Build: "unknown", Host: "cpu", Cuda: "off"}
}

// Array is one named tensor.
type Array struct {
	Name  string
	DType DType
	// Shape holds the dimensions; an empty shape is a scalar (rank 0) with
	// one element. A zero dimension makes a zero-size array.
	Shape []int64
	// Data holds the raw bytes, little-endian, C (row-major) order; its Size
	// must equal NumBytes.
	Data Source
	// Attrs carries format-specific properties that are not in the bytes
	// (sparse layout, quantization parameters, original dtype, layout enums,
	// ...). Keys are namespaced by format ("ztensor.format"); values are
	// opaque strings (codecs put JSON there when they need structure). WTXT
	// carries them in the reserved array AttrsArrayName.
	Attrs map[string]string
}

// NumElements returns the element count (1 for a scalar) or an error when
// the product overflows int64 or a dimension is negative.
func (a *Array) NumElements() (int64, error) { return NumElements(a.Shape) }

// NumBytes returns NumElements × element size, checking for overflow.
func (a *Array) NumBytes() (int64, error) {
	n, err := a.NumElements()
	if err != nil {
		return 0, err
	}
	hi, lo := bits.Mul64(uint64(n), uint64(a.DType.Size()))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, fmt.Errorf("array %q: byte size overflows", a.Name)
	}
	return int64(lo), nil
}

// NumElements returns the product of shape (1 for an empty shape), with
// overflow and sign checks.
func NumElements(shape []int64) (int64, error) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension %d", d)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, errors.New("element count overflows int64")
		}
		n = lo
	}
	return int64(n), nil
}

// Snapshot is a generation: metadata plus arrays.
type Snapshot struct {
	Meta   Meta
	Arrays []*Array
	// Attrs carries format-level properties (safetensors __metadata__, FOLD
	// ECC level, ...), namespaced like Array.Attrs.
	Attrs map[string]string
	// UserMeta is the trainer's metadata of the generation (step, loss,
	// ...; usermeta.go). WTXT carries it in the attributes document;
	// other codecs ignore it, so a checkout writes the same checkpoint
	// bytes with and without it.
	UserMeta UserMeta
}

// Array returns the array with the given name, or nil.
func (s *Snapshot) Array(name string) *Array {
	for _, a := range s.Arrays {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// Sorted returns the arrays in ascending bytewise name order (the WTXT
// order) without modifying s.
func (s *Snapshot) Sorted() []*Array {
	out := append([]*Array(nil), s.Arrays...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Validate checks that Meta.Gen is at most MaxGen, names are non-empty and
// unique, dtypes are valid and every array's Data size equals its shape ×
// element size.
func (s *Snapshot) Validate() error {
	if s.Meta.Gen > MaxGen {
		return fmt.Errorf("%w: meta gen %d is above %d", ErrGenRange, s.Meta.Gen, MaxGen)
	}
	seen := make(map[string]struct{}, len(s.Arrays))
	for _, a := range s.Arrays {
		if a.Name == "" {
			return errors.New("array with empty name")
		}
		if _, dup := seen[a.Name]; dup {
			return fmt.Errorf("array %q: duplicate name", a.Name)
		}
		seen[a.Name] = struct{}{}
		if !a.DType.Valid() {
			return fmt.Errorf("array %q: invalid dtype", a.Name)
		}
		n, err := a.NumBytes()
		if err != nil {
			return fmt.Errorf("array %q: %w", a.Name, err)
		}
		if a.Data == nil {
			if n != 0 {
				return fmt.Errorf("array %q: no data for %d bytes", a.Name, n)
			}
			continue
		}
		if a.Data.Size() != n {
			return fmt.Errorf("array %q: data holds %d bytes, shape and dtype need %d", a.Name, a.Data.Size(), n)
		}
	}
	return nil
}

// AttrsArrayName is the reserved array name under which WTXT carries the
// snapshot's and arrays' Attrs (dtype u8, canonical JSON, see EncodeAttrs).
// Because it is an ordinary array it is covered by sha256_all, the Merkle
// chain and the signature.
const AttrsArrayName = "__snapd_attrs__"

// attrsDoc is the JSON document stored in AttrsArrayName.
// Members in this struct order are in bytewise key order: the canonical
// JSON EncodeAttrs writes.
type attrsDoc struct {
	Arrays   map[string]map[string]string `json:"arrays,omitempty"`
	Meta     json.RawMessage              `json:"meta,omitempty"`
	Snapshot map[string]string            `json:"snapshot,omitempty"`
	V        int                          `json:"v"`
}

// HasAttrs reports whether s or any of its arrays carries Attrs.
func (s *Snapshot) HasAttrs() bool {
	if len(s.Attrs) > 0 {
		return true
	}
	for _, a := range s.Arrays {
		if len(a.Attrs) > 0 {
			return true
		}
	}
	return false
}

// EncodeAttrs returns the canonical JSON of all Attrs of s and of its
// UserMeta: one object with keys "arrays" (array name → attrs), "meta"
// (UserMeta.JSON, only when s has metadata), "snapshot" and "v":1, keys
// sorted bytewise, no insignificant white space, no HTML escaping. It
// returns nil when s has neither attrs nor metadata.
func EncodeAttrs(s *Snapshot) ([]byte, error) {
	if !s.HasAttrs() && len(s.UserMeta) == 0 {
		return nil, nil
	}
	doc := attrsDoc{V: 1, Snapshot: s.Attrs, Meta: s.UserMeta.JSON()}
	for _, a := range s.Arrays {
		if len(a.Attrs) == 0 {
			continue
		}
		if doc.Arrays == nil {
			doc.Arrays = map[string]map[string]string{}
		}
		doc.Arrays[a.Name] = a.Attrs
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// MaxAttrsSize bounds the attrs document a decoder accepts.
const MaxAttrsSize = 64 << 20

// ApplyAttrs parses an attrs document (as written by EncodeAttrs) and sets
// the Attrs of s and of its arrays and s.UserMeta. It fails when the
// document names an array s does not hold or its "meta" member is not
// canonical UserMeta within the limits (ParseUserMetaCanonical).
func ApplyAttrs(s *Snapshot, doc []byte) error {
	if len(doc) > MaxAttrsSize {
		return fmt.Errorf("%s: %d bytes exceeds limit %d", AttrsArrayName, len(doc), MaxAttrsSize)
	}
	var d attrsDoc
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return fmt.Errorf("%s: %w", AttrsArrayName, jsonerr.Describe(err))
	}
	if d.V != 1 {
		return fmt.Errorf("%s: unsupported version %d", AttrsArrayName, d.V)
	}
	if d.Meta != nil {
		m, err := ParseUserMetaCanonical(d.Meta)
		if err != nil {
			return fmt.Errorf("%s: meta: %w", AttrsArrayName, err)
		}
		s.UserMeta = m
	}
	s.Attrs = d.Snapshot
	for name, at := range d.Arrays {
		a := s.Array(name)
		if a == nil {
			return fmt.Errorf("%s: attributes for unknown array %q", AttrsArrayName, name)
		}
		a.Attrs = at
	}
	return nil
}

// UserMetaOfAttrs returns the UserMeta of an attrs document (its "meta"
// member; nil when it has none), checked as ApplyAttrs checks it, without
// a snapshot to apply the rest to.
func UserMetaOfAttrs(doc []byte) (UserMeta, error) {
	if len(doc) > MaxAttrsSize {
		return nil, fmt.Errorf("%s: %d bytes exceeds limit %d", AttrsArrayName, len(doc), MaxAttrsSize)
	}
	var d attrsDoc
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%s: %w", AttrsArrayName, jsonerr.Describe(err))
	}
	if d.V != 1 {
		return nil, fmt.Errorf("%s: unsupported version %d", AttrsArrayName, d.V)
	}
	if d.Meta == nil {
		return nil, nil
	}
	m, err := ParseUserMetaCanonical(d.Meta)
	if err != nil {
		return nil, fmt.Errorf("%s: meta: %w", AttrsArrayName, err)
	}
	return m, nil
}

// MaxNameLen is the longest array name a snapshot can carry into WTXT.
const MaxNameLen = 1024

// NameByte reports whether c may appear in an array name that WTXT can
// carry (with its tensor_ext): A-Z a-z 0-9 _ . : / -. Codecs map other
// bytes of source names to legal ones and keep the original in Attrs.
func NameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '.' || c == ':' || c == '/' || c == '-'
}

// PortableName reports whether s is 1..MaxNameLen NameBytes and not the
// reserved AttrsArrayName: a name every format's array can keep in WTXT.
func PortableName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen || s == AttrsArrayName {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !NameByte(s[i]) {
			return false
		}
	}
	return true
}
