package ztensor

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/fxamacker/cbor/v2"
)

// manifest is the parsed v1.0 manifest. Strings are as in the file except
// that an explicit "raw" encoding is normalised to "".
type manifest struct {
	Version    string
	Generator  string
	Attributes map[string]string
	Tensors    map[string]*tensorEntry
}

type tensorEntry struct {
	DType      string
	Shape      []uint64
	Format     string
	Components map[string]componentEntry
}

type componentEntry struct {
	Offset   uint64
	Length   uint64
	Encoding string // "" (raw) or "zstd"
	Digest   string // verbatim, "" when absent
}

// Wire types for decoding. Pointers tell a missing (or null) key from a
// zero value: the reference reader requires every root and tensor key and
// offset/length of every component.
type wireManifest struct {
	Version    *string                     `cbor:"version"`
	Generator  *string                     `cbor:"generator"`
	Attributes *map[string]string          `cbor:"attributes"`
	Tensors    *map[string]cbor.RawMessage `cbor:"tensors"`
	Objects    cbor.RawMessage             `cbor:"objects"` // zTensor 1.1+ only
}

type wireTensor struct {
	DType      *string                     `cbor:"dtype"`
	Shape      *[]uint64                   `cbor:"shape"`
	Format     *string                     `cbor:"format"`
	Components *map[string]cbor.RawMessage `cbor:"components"`
}

type wireComponent struct {
	Offset   *uint64 `cbor:"offset"`
	Length   *uint64 `cbor:"length"`
	Encoding *string `cbor:"encoding"`
	Digest   *string `cbor:"digest"`
}

// decMode is built per call (no global mutable state); building it is cheap.
func newDecMode() (cbor.DecMode, error) {
	return cbor.DecOptions{
		DupMapKey:          cbor.DupMapKeyEnforcedAPF,
		MaxNestedLevels:    16,
		MaxArrayElements:   1 << 26,
		MaxMapPairs:        1 << 26,
		IndefLength:        cbor.IndefLengthAllowed,
		TagsMd:             cbor.TagsForbidden,
		FieldNameMatching:  cbor.FieldNameMatchingCaseSensitive,
		UTF8:               cbor.UTF8RejectInvalid,
		ByteStringToString: cbor.ByteStringToStringForbidden,
	}.DecMode()
}

// manifestError describes a schema violation inside the manifest.
type manifestError struct {
	tensor, component, check string
	unsupported              bool
}

func (e *manifestError) Error() string { return e.check }

func mErr(tensor, comp, format string, args ...any) *manifestError {
	return &manifestError{tensor: tensor, component: comp, check: fmt.Sprintf(format, args...)}
}

// parseManifest decodes and schema-checks the manifest bytes. It checks
// types and presence only; layout checks (bounds, alignment, dtype names,
// digests) are done by the decoder, which knows the file size.
func parseManifest(b []byte) (*manifest, error) {
	dm, err := newDecMode()
	if err != nil {
		return nil, err
	}
	var w wireManifest
	if err := dm.Unmarshal(b, &w); err != nil {
		return nil, mErr("", "", "manifest: invalid CBOR: %v", err)
	}
	if w.Tensors == nil && w.Objects != nil {
		e := mErr("", "", "manifest has root key \"objects\" instead of \"tensors\": zTensor 1.1 or later manifest in a v1.0 layout")
		e.unsupported = true
		return nil, e
	}
	switch {
	case w.Version == nil:
		return nil, mErr("", "", "manifest: required key \"version\" missing or null")
	case w.Generator == nil:
		return nil, mErr("", "", "manifest: required key \"generator\" missing or null")
	case w.Attributes == nil:
		return nil, mErr("", "", "manifest: required key \"attributes\" missing or null")
	case w.Tensors == nil:
		return nil, mErr("", "", "manifest: required key \"tensors\" missing or null")
	}
	m := &manifest{
		Version:    *w.Version,
		Generator:  *w.Generator,
		Attributes: *w.Attributes,
		Tensors:    make(map[string]*tensorEntry, len(*w.Tensors)),
	}
	if m.Attributes == nil {
		m.Attributes = map[string]string{}
	}
	for name, raw := range *w.Tensors {
		var wt wireTensor
		if err := dm.Unmarshal(raw, &wt); err != nil {
			return nil, mErr(name, "", "tensor entry: %v", err)
		}
		switch {
		case wt.DType == nil:
			return nil, mErr(name, "", "required key \"dtype\" missing or null")
		case wt.Shape == nil:
			return nil, mErr(name, "", "required key \"shape\" missing or null")
		case wt.Format == nil:
			return nil, mErr(name, "", "required key \"format\" missing or null")
		case wt.Components == nil:
			return nil, mErr(name, "", "required key \"components\" missing or null")
		}
		t := &tensorEntry{
			DType:      *wt.DType,
			Shape:      *wt.Shape,
			Format:     *wt.Format,
			Components: make(map[string]componentEntry, len(*wt.Components)),
		}
		if t.Shape == nil {
			t.Shape = []uint64{}
		}
		for role, craw := range *wt.Components {
			var wc wireComponent
			if err := dm.Unmarshal(craw, &wc); err != nil {
				return nil, mErr(name, role, "component entry: %v", err)
			}
			if wc.Offset == nil {
				return nil, mErr(name, role, "required key \"offset\" missing or null")
			}
			if wc.Length == nil {
				return nil, mErr(name, role, "required key \"length\" missing or null")
			}
			c := componentEntry{Offset: *wc.Offset, Length: *wc.Length}
			if wc.Encoding != nil {
				switch *wc.Encoding {
				case "raw":
				case encodingZstd:
					c.Encoding = encodingZstd
				default:
					return nil, mErr(name, role, "unknown encoding %q (want \"raw\" or \"zstd\")", *wc.Encoding)
				}
			}
			if wc.Digest != nil {
				c.Digest = *wc.Digest
			}
			t.Components[role] = c
		}
		m.Tensors[name] = t
	}
	return m, nil
}

// marshal returns the manifest exactly as the reference writer encodes it
// (see doc.go): definite lengths, shortest unsigned integers, text strings
// only, root and tensor keys in struct order, component keys offset,
// length, encoding (if zstd), digest (if any), and the three maps sorted by
// their keys' raw UTF-8 bytes.
func (m *manifest) marshal() []byte {
	var e cborEnc
	e.mapHead(4)
	e.text("version")
	e.text(m.Version)
	e.text("generator")
	e.text(m.Generator)
	e.text("attributes")
	// Keys in raw byte order (Go string comparison), the order of the
	// reference writer's BTreeMap.
	keys := slices.Sorted(maps.Keys(m.Attributes))
	e.mapHead(len(keys))
	for _, k := range keys {
		e.text(k)
		e.text(m.Attributes[k])
	}
	e.text("tensors")
	keys = slices.Sorted(maps.Keys(m.Tensors))
	e.mapHead(len(keys))
	for _, name := range keys {
		t := m.Tensors[name]
		e.text(name)
		e.mapHead(4)
		e.text("dtype")
		e.text(t.DType)
		e.text("shape")
		e.arrayHead(len(t.Shape))
		for _, d := range t.Shape {
			e.uint(d)
		}
		e.text("format")
		e.text(t.Format)
		e.text("components")
		roles := slices.Sorted(maps.Keys(t.Components))
		e.mapHead(len(roles))
		for _, role := range roles {
			c := t.Components[role]
			e.text(role)
			n := 2
			if c.Encoding != "" {
				n++
			}
			if c.Digest != "" {
				n++
			}
			e.mapHead(n)
			e.text("offset")
			e.uint(c.Offset)
			e.text("length")
			e.uint(c.Length)
			if c.Encoding != "" {
				e.text("encoding")
				e.text(c.Encoding)
			}
			if c.Digest != "" {
				e.text("digest")
				e.text(c.Digest)
			}
		}
	}
	return e.b
}

// cborEnc is the minimal CBOR emitter the manifest needs: unsigned
// integers (major 0), text strings (major 3), arrays (4) and maps (5), all
// definite-length with the shortest argument encoding (RFC 8949 §4.2.1
// "preferred serialization").
type cborEnc struct{ b []byte }

func (e *cborEnc) head(major byte, n uint64) {
	m := major << 5
	switch {
	case n < 24:
		e.b = append(e.b, m|byte(n))
	case n <= 0xff:
		e.b = append(e.b, m|24, byte(n))
	case n <= 0xffff:
		e.b = append(e.b, m|25)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(n))
	case n <= 0xffffffff:
		e.b = append(e.b, m|26)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(n))
	default:
		e.b = append(e.b, m|27)
		e.b = binary.BigEndian.AppendUint64(e.b, n)
	}
}

func (e *cborEnc) uint(n uint64)   { e.head(0, n) }
func (e *cborEnc) text(s string)   { e.head(3, uint64(len(s))); e.b = append(e.b, s...) }
func (e *cborEnc) arrayHead(n int) { e.head(4, uint64(n)) }
func (e *cborEnc) mapHead(n int)   { e.head(5, uint64(n)) }
