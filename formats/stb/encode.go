package stb

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// outEntry is one table entry as Encode writes it.
type outEntry struct {
	a                   *snapshot.Array
	id                  byte
	hasID               bool
	dtype, rank, layout byte
	dims                [3]uint32
	size                int64
}

// arrayID returns the tensor_id of an array: its AttrID, else the id in a
// name of the form t<id>.
func arrayID(a *snapshot.Array) (byte, bool) {
	if v, ok := a.Attrs[AttrID]; ok {
		id, err := parseByte(v)
		return id, err == nil
	}
	return idFromName(a.Name)
}

// Encode implements formats.Codec: it writes the canonical file described
// in the package documentation. Without opts.Lossy it fails with an error
// wrapping formats.ErrLossy, naming the array and the reason, when the
// file could not give back the snapshot (a dtype STB lacks, a name that is
// not t<id>, dims beyond the third that cannot be recovered, attributes of
// other formats); with opts.Lossy it drops such arrays (dtype), assigns
// free ids (names), truncates dims as the reference writer does, and
// ignores foreign attributes.
func (Codec) Encode(ctx context.Context, w io.Writer, s *snapshot.Snapshot, opts formats.EncodeOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("stb: %w: %v", ErrInvalidSnapshot, err)
	}
	lossy := func(format string, a ...any) error {
		return fmt.Errorf("stb: %w: %s (use lossy conversion to accept this)", formats.ErrLossy, fmt.Sprintf(format, a...))
	}
	invalid := func(format string, a ...any) error {
		return fmt.Errorf("stb: %w: %s", ErrInvalidSnapshot, fmt.Sprintf(format, a...))
	}

	var order []string
	hasOrder := false
	for _, k := range slices.Sorted(maps.Keys(s.Attrs)) {
		v := s.Attrs[k]
		switch {
		case k == AttrOrder:
			if err := json.Unmarshal([]byte(v), &order); err != nil || order == nil {
				return invalid("snapshot attribute %s: not a JSON list of array names (got %d bytes)", k, len(v))
			}
			hasOrder = true
		case strings.HasPrefix(k, attrPrefix):
			return invalid("unknown snapshot attribute %q", k)
		case !opts.Lossy:
			return lossy("snapshot attribute %q has no place in an STB file", k)
		}
	}

	var outs []*outEntry
	dropped := map[string]bool{}
	for _, a := range s.Arrays {
		if _, ok := stbDType(a.DType); !ok {
			const why = "STB holds only f32, f16, i8 and i32"
			if !opts.Lossy {
				return &formats.DTypeError{Format: "stb", Array: a.Name, DType: a.DType, Why: why}
			}
			opts.Drop(formats.DroppedDType("stb", a.Name, a.DType, why))
		}
		e, err := prepareEntry(a, opts.Lossy, lossy, invalid)
		if err != nil {
			return err
		}
		if e == nil {
			dropped[a.Name] = true
			continue
		}
		outs = append(outs, e)
	}
	if len(outs) > math.MaxUint16 {
		return invalid("%d tensors, STB holds at most %d", len(outs), math.MaxUint16)
	}
	// Ids for arrays without one (only reached with Lossy): the smallest
	// free ids, in snapshot order.
	used := map[byte]bool{}
	for _, e := range outs {
		if e.hasID {
			used[e.id] = true
		}
	}
	next := 0
	for _, e := range outs {
		if e.hasID {
			continue
		}
		for next < 256 && used[byte(next)] {
			next++
		}
		if next == 256 {
			return invalid("array %q: no free tensor_id left (ids are one byte)", e.a.Name)
		}
		e.id, e.hasID = byte(next), true
		used[e.id] = true
	}

	// Table order.
	if hasOrder {
		byName := map[string]*outEntry{}
		for _, e := range outs {
			byName[e.a.Name] = e
		}
		listed := map[string]bool{}
		ordered := make([]*outEntry, 0, len(outs))
		for _, n := range order {
			if listed[n] {
				return invalid("%s lists %q twice", AttrOrder, n)
			}
			listed[n] = true
			if e, ok := byName[n]; ok {
				ordered = append(ordered, e)
			} else if !dropped[n] {
				return invalid("%s lists %q, which is not an array of the snapshot", AttrOrder, n)
			}
		}
		for _, e := range outs {
			if !listed[e.a.Name] {
				return invalid("%s does not list array %q", AttrOrder, e.a.Name)
			}
		}
		outs = ordered
	} else {
		sort.SliceStable(outs, func(i, j int) bool {
			if outs[i].id != outs[j].id {
				return outs[i].id < outs[j].id
			}
			return outs[i].a.Name < outs[j].a.Name
		})
	}

	// Names: a decoder names the k-th repeat of an id t<id>.<k>; any
	// other name is lost.
	if !opts.Lossy {
		count := map[byte]int{}
		for _, e := range outs {
			want := idName(e.id)
			if n := count[e.id]; n > 0 {
				want = fmt.Sprintf("%s.%d", want, n)
			}
			count[e.id]++
			if e.a.Name != want {
				return lossy("array %q: STB has no names, only the one-byte tensor_id %d; the array would read back as %q", e.a.Name, e.id, want)
			}
		}
	}

	// Layout: table, zero padding to data_offset, tensors back to back.
	n := int64(len(outs))
	dataOffset := align(HeaderSize+EntrySize*n, Alignment)
	head := make([]byte, dataOffset)
	le := binary.LittleEndian
	off := dataOffset
	for i, e := range outs {
		b := head[HeaderSize+EntrySize*i:]
		b[0], b[1], b[2], b[3] = e.id, e.dtype, e.rank, e.layout
		le.PutUint64(b[4:], uint64(off))
		le.PutUint64(b[12:], uint64(e.size))
		le.PutUint32(b[20:], e.dims[0])
		le.PutUint32(b[24:], e.dims[1])
		le.PutUint32(b[28:], e.dims[2])
		if e.size > math.MaxInt64-off {
			return invalid("file size overflows int64")
		}
		off += e.size
	}
	copy(head, Magic)
	head[4] = Version
	head[5] = 0
	le.PutUint16(head[6:], uint16(n))
	le.PutUint64(head[16:], uint64(dataOffset))
	le.PutUint64(head[24:], uint64(off))
	if _, err := w.Write(head); err != nil {
		return err
	}
	var buf []byte
	for _, e := range outs {
		if err := snapshot.CopyTo(ctx, w, e.a.Data, e.size, &buf); err != nil {
			return fmt.Errorf("stb: array %q: %w", e.a.Name, err)
		}
	}
	return nil
}

// prepareEntry maps an array to its table entry. It returns nil (and no
// error) for an array Lossy drops.
func prepareEntry(a *snapshot.Array, lossyOK bool, lossy, invalid func(string, ...any) error) (*outEntry, error) {
	dt, ok := stbDType(a.DType)
	if !ok {
		if lossyOK {
			return nil, nil
		}
		return nil, lossy("array %q: dtype %s: STB holds only f32, f16, i8 and i32 (a lossy conversion drops the array)", a.Name, a.DType)
	}
	e := &outEntry{a: a, dtype: dt}
	rankAttr := ""
	for _, k := range slices.Sorted(maps.Keys(a.Attrs)) {
		v := a.Attrs[k]
		switch k {
		case AttrID:
			id, err := parseByte(v)
			if err != nil {
				return nil, invalid("array %q: attribute %s: %v", a.Name, k, err)
			}
			e.id, e.hasID = id, true
		case AttrLayout:
			l, err := parseLayout(v)
			if err != nil {
				return nil, invalid("array %q: attribute %v", a.Name, err)
			}
			e.layout = l
		case AttrRank:
			rankAttr = v
		case AttrTrailing:
			if v != "product" && v != "unknown" {
				return nil, invalid("array %q: attribute %s: want product or unknown (got %d bytes)", a.Name, k, len(v))
			}
		default:
			if strings.HasPrefix(k, attrPrefix) {
				return nil, invalid("array %q: unknown attribute %q", a.Name, k)
			}
			if !lossyOK {
				return nil, lossy("array %q: attribute %q has no place in an STB file", a.Name, k)
			}
		}
	}
	if !e.hasID {
		e.id, e.hasID = idFromName(a.Name)
		if !e.hasID && !lossyOK {
			return nil, lossy("array %q: STB has no names; only arrays named t<id> (id 0..255) or with attribute %s keep their identity", a.Name, AttrID)
		}
	}
	switch {
	case rankAttr != "":
		r, err := parseByte(rankAttr)
		if err != nil || r < 4 {
			return nil, invalid("array %q: attribute %s: want 4..255, a canonical decimal (got %d bytes)", a.Name, AttrRank, len(rankAttr))
		}
		if len(a.Shape) != 4 {
			return nil, invalid("array %q: attribute %s needs a 4-dimensional shape, not %v", a.Name, AttrRank, a.Shape)
		}
		e.rank = r
	case len(a.Shape) > math.MaxUint8:
		return nil, invalid("array %q: rank %d exceeds 255", a.Name, len(a.Shape))
	default:
		e.rank = byte(len(a.Shape))
	}
	for i := 0; i < 3 && i < len(a.Shape); i++ {
		if a.Shape[i] > math.MaxUint32 {
			return nil, invalid("array %q: dimension %d = %d exceeds the u32 range of STB dims", a.Name, i, a.Shape[i])
		}
		e.dims[i] = uint32(a.Shape[i])
	}
	size, err := a.NumBytes()
	if err != nil {
		return nil, invalid("array %q: %v", a.Name, err)
	}
	e.size = size
	back, _, err := entryShape(e.rank, e.dims, size, int64(a.DType.Size()))
	if err != nil {
		return nil, invalid("array %q: %v", a.Name, err)
	}
	if !slices.Equal(back, a.Shape) && !lossyOK {
		return nil, lossy("array %q: shape %v: STB stores only the first 3 dims of rank %d, the file would read back as shape %v", a.Name, a.Shape, e.rank, back)
	}
	return e, nil
}
