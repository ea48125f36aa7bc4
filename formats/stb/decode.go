package stb

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"sort"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// header is the decoded 32-byte file header.
type header struct {
	version, flags       byte
	count                uint16
	reserved0, reserved1 uint32
	dataOffset, fileSize uint64
}

func parseHeader(b []byte) header {
	le := binary.LittleEndian
	return header{
		version:    b[4],
		flags:      b[5],
		count:      le.Uint16(b[6:]),
		reserved0:  le.Uint32(b[8:]),
		reserved1:  le.Uint32(b[12:]),
		dataOffset: le.Uint64(b[16:]),
		fileSize:   le.Uint64(b[24:]),
	}
}

// entry is one decoded 32-byte table entry.
type entry struct {
	id, dtype, rank, layout byte
	offset, size            uint64
	dims                    [3]uint32
}

func parseEntry(b []byte) entry {
	le := binary.LittleEndian
	return entry{
		id: b[0], dtype: b[1], rank: b[2], layout: b[3],
		offset: le.Uint64(b[4:]),
		size:   le.Uint64(b[12:]),
		dims:   [3]uint32{le.Uint32(b[20:]), le.Uint32(b[24:]), le.Uint32(b[28:])},
	}
}

// Decode implements formats.Codec. See the package documentation for what
// it accepts. Tensor data aliases r when r is memory-backed.
func (Codec) Decode(ctx context.Context, r io.ReaderAt, size int64, opts formats.DecodeOptions) (*snapshot.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fail := func(entry, id int, off int64, sentinel error, format string, a ...any) error {
		e := &Error{Format: "stb", File: opts.Name, Offset: off, Check: fmt.Sprintf(format, a...), Err: sentinel}
		if entry >= 0 {
			e.Part = fmt.Sprintf("entry %d (tensor_id %d)", entry, id)
		}
		return e
	}
	if size < HeaderSize {
		return nil, fail(-1, 0, 0, ErrCorrupt, "file has %d bytes, the header needs %d", size, HeaderSize)
	}
	var hb [HeaderSize]byte
	if err := snapshot.ReadFullAt(r, hb[:], 0); err != nil {
		return nil, fmt.Errorf("stb: read header: %w", err)
	}
	if string(hb[:4]) != Magic {
		return nil, fail(-1, 0, 0, ErrCorrupt, "the first 4 bytes are not the STB magic %q", Magic)
	}
	h := parseHeader(hb[:])
	if h.version != Version {
		return nil, fail(-1, 0, 4, ErrUnsupported, "version %d, only %d is supported", h.version, Version)
	}
	if h.flags != 0 {
		return nil, fail(-1, 0, 5, ErrUnsupported, "flags 0x%02x, must be 0", h.flags)
	}
	if h.fileSize != uint64(size) {
		return nil, fail(-1, 0, 24, ErrCorrupt, "header file_size %d, but the file has %d bytes", h.fileSize, size)
	}
	tableEnd := int64(HeaderSize) + EntrySize*int64(h.count)
	if tableEnd > size {
		return nil, fail(-1, 0, 6, ErrCorrupt, "tensor_count %d needs a table ending at %d, beyond the file size %d", h.count, tableEnd, size)
	}
	if h.dataOffset < uint64(tableEnd) {
		return nil, fail(-1, 0, 16, ErrCorrupt, "data_offset %d lies inside the tensor table (which ends at %d)", h.dataOffset, tableEnd)
	}
	if h.dataOffset > uint64(size) {
		return nil, fail(-1, 0, 16, ErrCorrupt, "data_offset %d is beyond the file size %d", h.dataOffset, size)
	}
	if h.dataOffset%Alignment != 0 {
		return nil, fail(-1, 0, 16, ErrCorrupt, "data_offset %d is not a multiple of %d", h.dataOffset, Alignment)
	}

	table := make([]byte, tableEnd-HeaderSize) // <= 65535*32 bytes, checked against size above
	if err := snapshot.ReadFullAt(r, table, HeaderSize); err != nil {
		return nil, fmt.Errorf("stb: read tensor table: %w", err)
	}
	s := &snapshot.Snapshot{}
	seen := map[byte]int{}
	names := make([]string, h.count)
	for i := range int(h.count) {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		entryOff := int64(HeaderSize + EntrySize*i)
		e := parseEntry(table[EntrySize*i:])
		id := int(e.id)
		if int(e.dtype) >= len(dtypes) {
			return nil, fail(i, id, entryOff+1, ErrUnsupported, "dtype %d is not one of 0 float32, 1 float16, 2 int8, 3 int32", e.dtype)
		}
		dt := dtypes[e.dtype]
		if e.offset < h.dataOffset {
			return nil, fail(i, id, entryOff+4, ErrCorrupt, "offset %d is before data_offset %d", e.offset, h.dataOffset)
		}
		if e.offset > uint64(size) || e.size > uint64(size)-e.offset {
			return nil, fail(i, id, entryOff+4, ErrCorrupt, "offset %d + size_bytes %d exceeds the file size %d", e.offset, e.size, size)
		}
		shape, trailing, err := entryShape(e.rank, e.dims, int64(e.size), int64(dt.Size()))
		if err != nil {
			return nil, fail(i, id, entryOff+2, ErrCorrupt, "%v", err)
		}
		a := &snapshot.Array{Name: idName(e.id), DType: dt, Shape: shape}
		attrs := map[string]string{}
		if n := seen[e.id]; n > 0 {
			a.Name = fmt.Sprintf("%s.%d", idName(e.id), n)
			attrs[AttrID] = fmt.Sprint(e.id)
		}
		seen[e.id]++
		if e.layout != 0 {
			attrs[AttrLayout] = layoutString(e.layout)
		}
		if e.rank > 3 {
			attrs[AttrRank] = fmt.Sprint(e.rank)
			if trailing != "" {
				attrs[AttrTrailing] = trailing
			}
		}
		if len(attrs) > 0 {
			a.Attrs = attrs
		}
		a.Data = snapshot.Section(r, int64(e.offset), int64(e.size))
		s.Arrays = append(s.Arrays, a)
		names[i] = a.Name
	}
	// The table and the data region describe the same tensors: every byte
	// of [data_offset, file_size) must belong to a tensor, so a
	// tensor_count that disagrees with the data (flipped to 0, one too
	// few) is refused instead of dropping tensors silently.
	if err := checkCoverage(table[:EntrySize*int(h.count)], h.dataOffset, uint64(size)); err != nil {
		return nil, fail(-1, 0, 6, ErrCorrupt, "tensor_count %d: %v", h.count, err)
	}
	if off, err := firstNonZero(ctx, r, tableEnd, int64(h.dataOffset)); err != nil {
		return nil, fmt.Errorf("stb: read padding: %w", err)
	} else if off >= 0 {
		return nil, fail(-1, 0, off, ErrCorrupt, "tensor_count %d: the padding [%d, %d) between the table and data_offset is not zero (byte %d): a table entry the count leaves out?", h.count, tableEnd, h.dataOffset, off)
	}
	if !sort.SliceIsSorted(s.Arrays, func(i, j int) bool { return lessDefault(s.Arrays[i], s.Arrays[j]) }) {
		order, err := json.Marshal(names)
		if err != nil {
			return nil, err
		}
		s.Attrs = map[string]string{AttrOrder: string(order)}
	}
	return s, nil
}

// lessDefault is the table order Encode uses without AttrOrder: ascending
// tensor_id, ties (repeated ids) by array name.
func lessDefault(a, b *snapshot.Array) bool {
	ia, _ := arrayID(a)
	ib, _ := arrayID(b)
	if ia != ib {
		return ia < ib
	}
	return a.Name < b.Name
}

// entryShape returns the snapshot shape of a table entry and, for rank > 3,
// the AttrTrailing value ("" when the shape is exact). It checks
// size_bytes against the dims.
func entryShape(rank byte, dims [3]uint32, size, esize int64) ([]int64, string, error) {
	if rank <= 3 {
		shape := make([]int64, rank)
		for i, d := range dims {
			if i < int(rank) {
				shape[i] = int64(d)
			} else if d != 0 {
				return nil, "", fmt.Errorf("dims[%d] = %d, but rank %d uses only %d dims (the rest must be 0)", i, d, rank, rank)
			}
		}
		n, err := mulBytes(shape, esize)
		if err != nil {
			return nil, "", fmt.Errorf("dims %v: %v", shape, err)
		}
		if n != size {
			return nil, "", fmt.Errorf("size_bytes %d, but rank %d dims %v of %d-byte elements need %d", size, rank, shape, esize, n)
		}
		return shape, "", nil
	}
	shape := []int64{int64(dims[0]), int64(dims[1]), int64(dims[2]), 0}
	unit, err := mulBytes(shape[:3], esize)
	if err != nil {
		return nil, "", fmt.Errorf("dims %v: %v", shape[:3], err)
	}
	if unit == 0 {
		if size != 0 {
			return nil, "", fmt.Errorf("size_bytes %d, but the stored dims %v of rank %d hold no element", size, shape[:3], rank)
		}
		return shape, "unknown", nil
	}
	if size%unit != 0 {
		return nil, "", fmt.Errorf("size_bytes %d is not a multiple of %d (stored dims %v of rank %d × %d-byte elements)", size, unit, shape[:3], rank, esize)
	}
	shape[3] = size / unit
	if rank == 4 {
		return shape, "", nil
	}
	return shape, "product", nil
}

// mulBytes returns product(shape) × esize, or an error on overflow.
func mulBytes(shape []int64, esize int64) (int64, error) {
	n, err := snapshot.NumElements(shape)
	if err != nil {
		return 0, err
	}
	hi, lo := bits.Mul64(uint64(n), uint64(esize))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, errors.New("byte size overflows int64")
	}
	return int64(lo), nil
}

// checkCoverage reports the first bytes of [dataOff, size) that no table
// entry's [offset, offset+size_bytes) covers. Entries are already checked
// to lie inside the file.
func checkCoverage(table []byte, dataOff, size uint64) error {
	type span struct{ lo, hi uint64 }
	spans := make([]span, 0, len(table)/EntrySize)
	for i := 0; i+EntrySize <= len(table); i += EntrySize {
		e := parseEntry(table[i:])
		if e.size > 0 {
			spans = append(spans, span{e.offset, e.offset + e.size})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	pos := dataOff
	for _, sp := range spans {
		if sp.lo > pos {
			return fmt.Errorf("bytes [%d, %d) of the data region belong to no tensor", pos, sp.lo)
		}
		pos = max(pos, sp.hi)
	}
	if pos < size {
		return fmt.Errorf("bytes [%d, %d) of the data region belong to no tensor", pos, size)
	}
	return nil
}

// firstNonZero returns the offset of the first non-zero byte in [lo, hi)
// of r, or -1.
func firstNonZero(ctx context.Context, r io.ReaderAt, lo, hi int64) (int64, error) {
	var buf [4096]byte
	for lo < hi {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		n := min(hi-lo, int64(len(buf)))
		if err := snapshot.ReadFullAt(r, buf[:n], lo); err != nil {
			return 0, err
		}
		for i, c := range buf[:n] {
			if c != 0 {
				return lo + int64(i), nil
			}
		}
		lo += n
	}
	return -1, nil
}
