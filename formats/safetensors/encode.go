package safetensors

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/jsonerr"
	"github.com/snapd-ml/snapd/snapshot"
)

// outTensor is one tensor as Encode writes it.
type outTensor struct {
	name   string // safetensors name
	dtype  string
	shape  []int64
	data   snapshot.Source
	nbytes int64
}

// Encode implements formats.Codec: it writes the canonical file described
// in the package documentation. It fails with formats.ErrLossy, unless
// opts.Lossy, when the snapshot or an array carries attributes of another
// format (they would be dropped); with opts.Lossy they are ignored.
func (Codec) Encode(ctx context.Context, w io.Writer, s *snapshot.Snapshot, opts formats.EncodeOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("safetensors: %w: %v", ErrInvalidSnapshot, err)
	}
	var metadata string
	hasMetadata := false
	for _, k := range slices.Sorted(maps.Keys(s.Attrs)) {
		v := s.Attrs[k]
		switch {
		case k == AttrMetadata:
			md, err := parseMetadataAttr(v)
			if err != nil {
				return fmt.Errorf("safetensors: %w: snapshot attribute %s: %v", ErrInvalidSnapshot, k, err)
			}
			metadata, hasMetadata = md, true
		case strings.HasPrefix(k, attrPrefix):
			return fmt.Errorf("safetensors: %w: unknown snapshot attribute %q", ErrInvalidSnapshot, k)
		case !opts.Lossy:
			return fmt.Errorf("safetensors: %w: snapshot attribute %q has no place in a safetensors file (use lossy conversion to drop it)", formats.ErrLossy, k)
		default:
			opts.Drop(formats.Loss{Format: "safetensors", What: fmt.Sprintf("snapshot attribute %q dropped", k), Why: "a safetensors file holds only __metadata__"})
		}
	}

	tensors := make([]outTensor, 0, len(s.Arrays))
	for _, a := range s.Arrays {
		if _, ok := dtypeFor(a.DType); !ok && a.Attrs[AttrDType] == "" {
			e := &formats.DTypeError{Format: "safetensors", Array: a.Name, DType: a.DType, Why: "safetensors 0.5 has no complex128"}
			if !opts.Lossy {
				return e
			}
			opts.Drop(formats.DroppedDType("safetensors", a.Name, a.DType, e.Why))
			continue
		}
		t, err := prepareTensor(a, opts)
		if err != nil {
			return err
		}
		tensors = append(tensors, t)
	}
	sort.Slice(tensors, func(i, j int) bool { return tensors[i].name < tensors[j].name })
	for i := 1; i < len(tensors); i++ {
		if tensors[i].name == tensors[i-1].name {
			return fmt.Errorf("safetensors: %w: two arrays map to the tensor name %q", ErrInvalidSnapshot, tensors[i].name)
		}
	}

	hdr := buildHeader(metadata, hasMetadata, tensors)
	if len(hdr) > MaxHeaderSize {
		return fmt.Errorf("safetensors: %w: header would be %d bytes, more than the %d bytes readers accept", ErrInvalidSnapshot, len(hdr), MaxHeaderSize)
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hdr)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	var buf []byte
	for _, t := range tensors {
		if err := snapshot.CopyTo(ctx, w, t.data, t.nbytes, &buf); err != nil {
			return fmt.Errorf("safetensors: tensor %q: %w", t.name, err)
		}
	}
	return nil
}

// prepareTensor maps an array to the tensor Encode writes.
func prepareTensor(a *snapshot.Array, opts formats.EncodeOptions) (outTensor, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("safetensors: %w: array %q: %s", ErrInvalidSnapshot, a.Name, fmt.Sprintf(format, args...))
	}
	nbytes, err := a.NumBytes()
	if err != nil {
		return outTensor{}, invalid("%v", err)
	}
	t := outTensor{name: a.Name, shape: a.Shape, data: a.Data, nbytes: nbytes}
	var origDType, origShape string
	var hasDType, hasShape bool
	for _, k := range slices.Sorted(maps.Keys(a.Attrs)) {
		v := a.Attrs[k]
		switch {
		case k == AttrName:
			t.name = v
		case k == AttrDType:
			origDType, hasDType = v, true
		case k == AttrShape:
			origShape, hasShape = v, true
		case strings.HasPrefix(k, attrPrefix):
			return outTensor{}, invalid("unknown attribute %q", k)
		case !opts.Lossy:
			return outTensor{}, fmt.Errorf("safetensors: %w: array %q: attribute %q has no place in a safetensors file (use lossy conversion to drop it)", formats.ErrLossy, a.Name, k)
		default:
			opts.Drop(formats.Loss{Format: "safetensors", Array: a.Name, What: fmt.Sprintf("attribute %q dropped", k), Why: "a safetensors tensor has no attributes"})
		}
	}
	if !utf8.ValidString(t.name) {
		return outTensor{}, invalid("tensor name is not valid UTF-8")
	}
	if t.name == "__metadata__" {
		return outTensor{}, invalid("tensor name __metadata__ is reserved by safetensors")
	}
	if hasShape && !hasDType {
		return outTensor{}, invalid("attribute %s without %s", AttrShape, AttrDType)
	}
	if !hasDType {
		d, ok := dtypeFor(a.DType)
		if !ok {
			return outTensor{}, invalid("dtype %s has no safetensors counterpart", a.DType)
		}
		t.dtype = d.name
		return t, nil
	}
	// fp8 and C64 tensors were carried as bytes before they had snapshot
	// dtypes: such snapshots still write.
	d, ok := lookupDType(origDType)
	if !ok || d.dt != snapshot.Invalid && !d.dt.IsFP8() && !d.dt.IsComplex() {
		return outTensor{}, invalid("attribute %s: not a safetensors dtype carried as bytes (got %d bytes)", AttrDType, len(origDType))
	}
	if a.DType != snapshot.U8 || len(a.Shape) != 1 {
		return outTensor{}, invalid("a %s tensor must be carried as u8 with a 1-dimensional shape, not %s %v", origDType, a.DType, a.Shape)
	}
	if !hasShape {
		return outTensor{}, invalid("attribute %s without %s", AttrDType, AttrShape)
	}
	var shape []int64
	if err := json.Unmarshal([]byte(origShape), &shape); err != nil {
		return outTensor{}, invalid("attribute %s: not a JSON array of integers: %v", AttrShape, jsonerr.Describe(err))
	} else if shape == nil {
		return outTensor{}, invalid("attribute %s: not a JSON array of integers (null)", AttrShape)
	}
	nb, err := byteSize(d, shape)
	if err != nil {
		return outTensor{}, invalid("attribute %s: %v", AttrShape, err)
	}
	if nb != nbytes {
		return outTensor{}, invalid("%s shape %v needs %d bytes, the array holds %d", origDType, shape, nb, nbytes)
	}
	t.dtype, t.shape = d.name, shape
	return t, nil
}

// parseMetadataAttr checks that v is a JSON object of strings and returns
// its canonical form.
func parseMetadataAttr(v string) (string, error) {
	if !utf8.ValidString(v) {
		return "", errors.New("not valid UTF-8")
	}
	dec := newJSONDec([]byte(v), 0)
	md, present, err := decodeMetadata(dec)
	if err != nil {
		return "", err
	}
	if !present {
		return "", errors.New("null; leave the attribute out instead")
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", errors.New("trailing data after the JSON object")
	}
	return md, nil
}

// buildHeader returns the header JSON, padded with spaces to a multiple of
// 8 bytes.
func buildHeader(metadata string, hasMetadata bool, tensors []outTensor) []byte {
	var b strings.Builder
	b.WriteByte('{')
	first := true
	if hasMetadata {
		b.WriteString(`"__metadata__":`)
		b.WriteString(metadata)
		first = false
	}
	var off int64
	for _, t := range tensors {
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeString(&b, t.name)
		b.WriteString(`:{"dtype":`)
		writeString(&b, t.dtype)
		b.WriteString(`,"shape":[`)
		for i, d := range t.shape {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(d, 10))
		}
		b.WriteString(`],"data_offsets":[`)
		b.WriteString(strconv.FormatInt(off, 10))
		b.WriteByte(',')
		off += t.nbytes
		b.WriteString(strconv.FormatInt(off, 10))
		b.WriteString("]}")
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	return []byte(b.String())
}

// writeString writes s as a JSON string the way serde_json (the reference
// implementation's serializer) does: '"' and '\' escaped, control
// characters as \b \t \n \f \r or \u00xx (lower-case hex), everything else
// (DEL and all non-ASCII included) raw.
func writeString(b *strings.Builder, s string) {
	const hexDigits = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\f':
			b.WriteString(`\f`)
		case c == '\r':
			b.WriteString(`\r`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}
