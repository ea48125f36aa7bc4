package stb

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/snapshot"
)

// Expected contents from testdata/EXPECTED.md (a copy of
// ../../../shared/fixtures/stb/EXPECTED.md).
type wantTensor struct {
	name   string
	dtype  snapshot.DType
	shape  []int64
	attrs  map[string]string
	sha256 string
	values any // []float32, []uint16 (f16 bits), []int8, []int32
}

type wantFile struct {
	size   int
	sha256 string
	attrs  map[string]string
	arrays []wantTensor // in table order
}

var fixtures = map[string]wantFile{
	"single_f32.stb": {88, "7fbe3fed97f6f7befb677f04773a6d5732ea8ca5a4ef2f064df5321c9fad2f4a", nil, []wantTensor{
		{"t0", snapshot.F32, []int64{2, 3}, nil, "03b8e98a10217e51d8ecef7919de69ba80c52b25ee49ce0886ecfe0ddeacd4ac", []float32{0, 0.5, 1, 1.5, 2, 2.5}},
	}},
	"multi_dtype.stb": {249, "2d6f8fc971cffd374b8f0704a2e3fd8108a2a50df18dcfcd2618337165099b18", nil, []wantTensor{
		{"t0", snapshot.F32, []int64{2, 3}, nil, "2c7b39d6fab2f8ae8c3629283d950ca95e9a53c2ca10d6912c903697a289f3f1", []float32{1.5, -2, 3.25, 4, 5.5, -6.75}},
		{"t1", snapshot.F16, []int64{5}, nil, "6236d67e6754df2e0a7c2fa49c7b65f5102255f2a595f60c01ff805e7388d0d6", []uint16{0x3800, 0x3c00, 0xc000, 0x7bff, 0}},
		{"t2", snapshot.I8, []int64{7}, nil, "cd012bbce57019f35a641bce6d6783c53002b07adfaef7377a2de2fc4af820e8", []int8{-128, -1, 0, 1, 2, 3, 127}},
		{"t7", snapshot.I32, []int64{2, 2}, map[string]string{AttrLayout: "COL_MAJOR"}, "4600f912f7cd244afed99e5ea8ae26e1b0d73f9244c1637d6643cb0a8cbb882e", []int32{1, -2, 2147483647, -2147483648}},
	}},
	"rank0_rank4.stb": {196, "049a5f1e3b593d9a6bfcdbb02ace5f0612ae75eefd8119ede9604104e42c92c3", nil, []wantTensor{
		{"t3", snapshot.F32, []int64{}, nil, "e21712a06022eecab9f5bd25414b4af9adeb316bb03947134cea060c78afd2d9", []float32{3.5}},
		{"t4", snapshot.I32, []int64{2, 2, 2, 2}, map[string]string{AttrLayout: "CHANNELS_LAST", AttrRank: "4"}, "5d85718ec594b982c252d0279e5966ffca33a5eaf2a455038d3ab331fde70cea",
			[]int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
		{"t5", snapshot.F32, []int64{0, 4}, nil, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", []float32{}},
	}},
	"empty.stb": {64, "ea076bc8db0fd5eab2ee0d4f7909fe09768b29bcadad6061ebf9a3fff87b7dcd", nil, nil},
}

type plainReaderAt struct{ r *bytes.Reader }

func (p plainReaderAt) ReadAt(b []byte, off int64) (int, error) { return p.r.ReadAt(b, off) }

func decode(t testing.TB, r io.ReaderAt, size int64) (*snapshot.Snapshot, error) {
	t.Helper()
	return Codec{}.Decode(context.Background(), r, size, formats.DecodeOptions{Name: "test.stb"})
}

func encode(t testing.TB, s *snapshot.Snapshot, lossy bool) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	err := Codec{}.Encode(context.Background(), &buf, s, formats.EncodeOptions{Lossy: lossy})
	return buf.Bytes(), err
}

func readAll(t testing.TB, src snapshot.Source) []byte {
	t.Helper()
	b, err := snapshot.ReadAll(src)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// valuesBytes encodes expected values little-endian.
func valuesBytes(t *testing.T, v any) []byte {
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestFixtures(t *testing.T) {
	for file, want := range fixtures {
		t.Run(file, func(t *testing.T) {
			raw := formatstest.ReadTestdata(t, file)
			if len(raw) != want.size || hexSHA(raw) != want.sha256 {
				t.Fatalf("fixture copy differs from EXPECTED.md (size %d)", len(raw))
			}
			if !(Codec{}).Sniff(raw) {
				t.Fatal("Sniff rejects the fixture")
			}
			for _, mode := range []string{"bytes", "readerat"} {
				var r io.ReaderAt = snapshot.Bytes(raw)
				if mode == "readerat" {
					r = plainReaderAt{bytes.NewReader(raw)}
				}
				s, err := decode(t, r, int64(len(raw)))
				if err != nil {
					t.Fatalf("%s: %v", mode, err)
				}
				if !reflect.DeepEqual(s.Attrs, want.attrs) {
					t.Fatalf("%s: snapshot attrs %v, want %v", mode, s.Attrs, want.attrs)
				}
				if len(s.Arrays) != len(want.arrays) {
					t.Fatalf("%s: %d arrays, want %d", mode, len(s.Arrays), len(want.arrays))
				}
				for i, w := range want.arrays {
					a := s.Arrays[i]
					if a.Name != w.name || a.DType != w.dtype || !reflect.DeepEqual(a.Shape, w.shape) || !reflect.DeepEqual(a.Attrs, w.attrs) {
						t.Fatalf("%s: array %d = %s %s %v %v, want %s %s %v %v", mode, i, a.Name, a.DType, a.Shape, a.Attrs, w.name, w.dtype, w.shape, w.attrs)
					}
					b := readAll(t, a.Data)
					if hexSHA(b) != w.sha256 {
						t.Fatalf("%s: %s sha256 %s, want %s", mode, a.Name, hexSHA(b), w.sha256)
					}
					if !bytes.Equal(b, valuesBytes(t, w.values)) {
						t.Fatalf("%s: %s values differ", mode, a.Name)
					}
					if mode == "bytes" && len(b) > 0 {
						start, end := uintptr(unsafe.Pointer(&raw[0])), uintptr(unsafe.Pointer(&raw[len(raw)-1]))
						if p := uintptr(unsafe.Pointer(&b[0])); p < start || p > end {
							t.Fatalf("%s: data is not a zero-copy slice of the input", a.Name)
						}
					}
				}
				if err := s.Validate(); err != nil {
					t.Fatal(err)
				}
				out, err := encode(t, s, false)
				if err != nil {
					t.Fatalf("%s: encode: %v", mode, err)
				}
				if !bytes.Equal(out, raw) {
					t.Fatalf("%s: re-encoded file differs from the reference writer's:\n%x\n%x", mode, out, raw)
				}
			}
		})
	}
}

// entryBytes builds one table entry.
func entryBytes(id, dtype, rank, layout byte, off, size uint64, d0, d1, d2 uint32) []byte {
	b := make([]byte, EntrySize)
	b[0], b[1], b[2], b[3] = id, dtype, rank, layout
	binary.LittleEndian.PutUint64(b[4:], off)
	binary.LittleEndian.PutUint64(b[12:], size)
	binary.LittleEndian.PutUint32(b[20:], d0)
	binary.LittleEndian.PutUint32(b[24:], d1)
	binary.LittleEndian.PutUint32(b[28:], d2)
	return b
}

// build makes a file the way the reference writer lays it out, from
// entries (id, dtype, rank, layout, size, dims) and data.
type spec struct {
	id, dtype, rank, layout byte
	size                    uint64
	dims                    [3]uint32
}

func build(specs []spec, data []byte) []byte {
	n := len(specs)
	dataOff := align(int64(HeaderSize+EntrySize*n), Alignment)
	out := make([]byte, dataOff)
	copy(out, Magic)
	out[4] = 1
	binary.LittleEndian.PutUint16(out[6:], uint16(n))
	binary.LittleEndian.PutUint64(out[16:], uint64(dataOff))
	off := uint64(dataOff)
	for i, s := range specs {
		copy(out[HeaderSize+EntrySize*i:], entryBytes(s.id, s.dtype, s.rank, s.layout, off, s.size, s.dims[0], s.dims[1], s.dims[2]))
		off += s.size
	}
	binary.LittleEndian.PutUint64(out[24:], off)
	return append(out, data[:off-uint64(dataOff)]...)
}

func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + 1)
	}
	return b
}

// tricky has repeated ids, a table out of id order, rank 5, rank 4 with an
// unrecoverable trailing dim, and reserved/custom layouts.
func tricky() []byte {
	return build([]spec{
		{9, 0, 1, 0, 8, [3]uint32{2, 0, 0}},    // t9
		{7, 2, 5, 200, 24, [3]uint32{1, 2, 3}}, // t7, rank 5: trailing product 4
		{7, 1, 4, 1, 0, [3]uint32{0, 2, 2}},    // t7.1, rank 4 with zero: unknown
		{7, 3, 0, 2, 4, [3]uint32{0, 0, 0}},    // t7.2, scalar
		{0, 0, 3, 0, 24, [3]uint32{1, 2, 3}},   // t0
	}, seq(64))
}

func TestTricky(t *testing.T) {
	raw := tricky()
	s, err := decode(t, snapshot.Bytes(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name  string
		shape []int64
		attrs map[string]string
	}{
		{"t9", []int64{2}, nil},
		{"t7", []int64{1, 2, 3, 4}, map[string]string{AttrLayout: "200", AttrRank: "5", AttrTrailing: "product"}},
		{"t7.1", []int64{0, 2, 2, 0}, map[string]string{AttrID: "7", AttrLayout: "COL_MAJOR", AttrRank: "4", AttrTrailing: "unknown"}},
		{"t7.2", []int64{}, map[string]string{AttrID: "7", AttrLayout: "CHANNELS_LAST"}},
		{"t0", []int64{1, 2, 3}, nil},
	}
	for i, w := range want {
		a := s.Arrays[i]
		if a.Name != w.name || !reflect.DeepEqual(a.Shape, w.shape) || !reflect.DeepEqual(a.Attrs, w.attrs) {
			t.Fatalf("array %d: %s %v %v, want %s %v %v", i, a.Name, a.Shape, a.Attrs, w.name, w.shape, w.attrs)
		}
	}
	if got := s.Attrs[AttrOrder]; got != `["t9","t7","t7.1","t7.2","t0"]` {
		t.Fatalf("order attr %q", got)
	}
	out, err := encode(t, s, false)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, raw) {
		t.Fatalf("re-encode differs:\n%x\n%x", out, raw)
	}
}

func TestRoundTripThroughWTXT(t *testing.T) {
	inputs := map[string][]byte{"tricky": tricky()}
	for name := range fixtures {
		inputs[name] = formatstest.ReadTestdata(t, name)
	}
	for name, raw := range inputs {
		t.Run(name, func(t *testing.T) {
			s1, err := decode(t, snapshot.Bytes(raw), int64(len(raw)))
			if err != nil {
				t.Fatal(err)
			}
			out, err := encode(t, formatstest.SimulateWTXT(t, s1), false)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, raw) {
				t.Fatalf("STB → WTXT → STB is not byte-identical:\n%x\n%x", out, raw)
			}
			s2, err := decode(t, snapshot.Bytes(out), int64(len(out)))
			if err != nil {
				t.Fatal(err)
			}
			formatstest.Equal(t, s1, s2)
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	good := formatstest.ReadTestdata(t, "single_f32.stb")
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	put64 := func(off int, v uint64) []byte {
		return mut(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[off:], v); return b })
	}
	put32 := func(off int, v uint32) []byte {
		return mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[off:], v); return b })
	}
	setByte := func(off int, v byte) []byte { return mut(func(b []byte) []byte { b[off] = v; return b }) }
	cases := []struct {
		name string
		raw  []byte
		is   error
		want string
	}{
		{"empty", nil, ErrCorrupt, "file has 0 bytes, the header needs 32"},
		{"short", good[:31], ErrCorrupt, "file has 31 bytes"},
		{"magic", setByte(3, '1'), ErrCorrupt, `the first 4 bytes are not the STB magic "STB0"`},
		{"version", setByte(4, 2), ErrUnsupported, "offset 4: version 2, only 1 is supported"},
		{"flags", setByte(5, 1), ErrUnsupported, "offset 5: flags 0x01, must be 0"},
		{"file_size", put64(24, 89), ErrCorrupt, "header file_size 89, but the file has 88 bytes"},
		{"truncated", mut(func(b []byte) []byte { b = b[:80]; binary.LittleEndian.PutUint64(b[24:], 80); return b }), ErrCorrupt, "offset 64 + size_bytes 24 exceeds the file size 80"},
		{"huge count", mut(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[6:], 65535); return b }), ErrCorrupt, "tensor_count 65535 needs a table ending at 2097152, beyond the file size 88"},
		{"data_offset in table", mut(func(b []byte) []byte {
			b = append(b[:64:64], make([]byte, 64)...)
			b = append(b, good[64:]...)
			binary.LittleEndian.PutUint16(b[6:], 2)
			binary.LittleEndian.PutUint64(b[24:], uint64(len(b)))
			return b
		}), ErrCorrupt, "data_offset 64 lies inside the tensor table (which ends at 96)"},
		{"data_offset past end", put64(16, 128), ErrCorrupt, "data_offset 128 is beyond the file size 88"},
		{"data_offset unaligned", mut(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[16:], 72)
			binary.LittleEndian.PutUint64(b[36:], 72)
			binary.LittleEndian.PutUint64(b[44:], 16)
			binary.LittleEndian.PutUint32(b[56:], 2)
			return b
		}), ErrCorrupt, "data_offset 72 is not a multiple of 64"},
		{"dtype", setByte(33, 4), ErrUnsupported, "entry 0 (tensor_id 0): offset 33: dtype 4 is not one of"},
		{"offset before data", put64(36, 40), ErrCorrupt, "offset 40 is before data_offset 64"},
		{"offset past end", put64(36, 1<<63), ErrCorrupt, "offset 9223372036854775808 + size_bytes 24 exceeds the file size 88"},
		{"size overflow", put64(44, math.MaxUint64), ErrCorrupt, "exceeds the file size 88"},
		{"size vs dims", put32(56, 4), ErrCorrupt, "size_bytes 24, but rank 2 dims [2 4] of 4-byte elements need 32"},
		{"dim beyond rank", put32(60, 1), ErrCorrupt, "dims[2] = 1, but rank 2 uses only 2 dims"},
		{"rank0 size", build([]spec{{1, 0, 0, 0, 8, [3]uint32{}}}, seq(8)), ErrCorrupt, "size_bytes 8, but rank 0 dims [] of 4-byte elements need 4"},
		{"rank4 not multiple", build([]spec{{1, 0, 4, 0, 12, [3]uint32{1, 1, 2}}}, seq(12)), ErrCorrupt, "size_bytes 12 is not a multiple of 8"},
		{"rank4 zero dims data", build([]spec{{1, 2, 4, 0, 3, [3]uint32{1, 0, 2}}}, seq(3)), ErrCorrupt, "hold no element"},
		{"dims overflow", build([]spec{{1, 0, 3, 0, 0, [3]uint32{math.MaxUint32, math.MaxUint32, math.MaxUint32}}}, nil), ErrCorrupt, "overflows"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, r := range []io.ReaderAt{snapshot.Bytes(c.raw), plainReaderAt{bytes.NewReader(c.raw)}} {
				s, err := decode(t, r, int64(len(c.raw)))
				if err == nil {
					t.Fatalf("decoded %d arrays, want an error", len(s.Arrays))
				}
				if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("err %q, want %v containing %q", err, c.is, c.want)
				}
				var e *Error
				if !errors.As(err, &e) || !strings.Contains(err.Error(), "test.stb") {
					t.Fatalf("err %v is not an *Error naming the file", err)
				}
			}
		})
	}
}

func TestDecodeIgnoresReservedAndPadding(t *testing.T) {
	raw := formatstest.ReadTestdata(t, "multi_dtype.stb")
	mod := append([]byte(nil), raw...)
	binary.LittleEndian.PutUint32(mod[8:], 7)
	binary.LittleEndian.PutUint32(mod[12:], 9)
	s, err := decode(t, snapshot.Bytes(mod), int64(len(mod)))
	if err != nil {
		t.Fatal(err)
	}
	out, err := encode(t, s, false)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, raw) {
		t.Fatal("encode did not write zeros for reserved fields")
	}
	// The padding between the table end (160) and data_offset (192) must
	// be zero: non-zero bytes there may be a table entry that a lowered
	// tensor_count left out.
	mod[170] = 0xff
	if _, err := decode(t, snapshot.Bytes(mod), int64(len(mod))); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "padding") {
		t.Fatalf("non-zero padding: %v", err)
	}
}

func TestEncode(t *testing.T) {
	arr := func(name string, dt snapshot.DType, shape []int64, attrs map[string]string) *snapshot.Array {
		n, _ := snapshot.NumElements(shape)
		return &snapshot.Array{Name: name, DType: dt, Shape: shape, Data: snapshot.Bytes(seq(int(n) * dt.Size())), Attrs: attrs}
	}
	cases := []struct {
		name       string
		s          *snapshot.Snapshot
		is         error
		want       string
		lossyOK    bool // succeeds with Lossy
		lossyCount int  // arrays in the lossy result
	}{
		{"bf16", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("t0", snapshot.BF16, []int64{2}, nil), arr("t1", snapshot.F32, []int64{2}, nil)}},
			formats.ErrLossy, `array "t0": dtype bf16 has no stb counterpart (STB holds only f32, f16, i8 and i32)`, true, 1},
		{"f64", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("t0", snapshot.F64, []int64{2}, nil)}}, formats.ErrLossy, `dtype f64`, true, 0},
		{"name", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("weight", snapshot.F32, []int64{2}, nil), arr("t0", snapshot.F32, []int64{1}, nil)}},
			formats.ErrLossy, `array "weight": STB has no names`, true, 2},
		{"name with id attr", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("weight", snapshot.F32, []int64{2}, map[string]string{AttrID: "4"})}},
			formats.ErrLossy, `array "weight": STB has no names, only the one-byte tensor_id 4; the array would read back as "t4"`, true, 1},
		{"t007", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("t007", snapshot.F32, []int64{2}, nil)}}, formats.ErrLossy, `STB has no names`, true, 1},
		{"t256", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("t256", snapshot.F32, []int64{2}, nil)}}, formats.ErrLossy, `STB has no names`, true, 1},
		{"rank5", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("t0", snapshot.I8, []int64{2, 1, 2, 3, 2}, nil)}},
			formats.ErrLossy, `shape [2 1 2 3 2]: STB stores only the first 3 dims of rank 5, the file would read back as shape [2 1 2 6]`, true, 1},
		{"rank4 zero", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("t0", snapshot.I8, []int64{0, 1, 2, 3}, nil)}},
			formats.ErrLossy, `read back as shape [0 1 2 0]`, true, 1},
		{"foreign attr", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("t0", snapshot.I8, []int64{2}, map[string]string{"safetensors.name": "x"})}},
			formats.ErrLossy, `attribute "safetensors.name" has no place`, true, 1},
		{"foreign snapshot attr", &snapshot.Snapshot{Attrs: map[string]string{"safetensors.metadata": "{}"}}, formats.ErrLossy, `snapshot attribute "safetensors.metadata"`, true, 0},
		{"bad id attr", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("t0", snapshot.I8, []int64{2}, map[string]string{AttrID: "300"})}}, ErrInvalidSnapshot, `attribute stb.id: not a canonical decimal number 0..255 (got 3 bytes)`, false, 0},
		{"bad layout", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("t0", snapshot.I8, []int64{2}, map[string]string{AttrLayout: "1"})}}, ErrInvalidSnapshot, `want ROW_MAJOR, COL_MAJOR, CHANNELS_LAST or a number 3..255`, false, 0},
		{"bad rank", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("t0", snapshot.I8, []int64{2}, map[string]string{AttrRank: "5"})}}, ErrInvalidSnapshot, `attribute stb.rank needs a 4-dimensional shape`, false, 0},
		{"rank attr low", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("t0", snapshot.I8, []int64{1, 1, 1, 2}, map[string]string{AttrRank: "3"})}}, ErrInvalidSnapshot, `attribute stb.rank: want 4..255, a canonical decimal (got 1 bytes)`, false, 0},
		{"bad trailing", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("t0", snapshot.I8, []int64{2}, map[string]string{AttrTrailing: "x"})}}, ErrInvalidSnapshot, `want product or unknown`, false, 0},
		{"unknown stb attr", &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("t0", snapshot.I8, []int64{2}, map[string]string{"stb.x": "1"})}}, ErrInvalidSnapshot, `unknown attribute "stb.x"`, false, 0},
		{"order bad json", &snapshot.Snapshot{Attrs: map[string]string{AttrOrder: "x"}}, ErrInvalidSnapshot, `snapshot attribute stb.order: not a JSON list of array names (got 1 bytes)`, false, 0},
		{"order missing", &snapshot.Snapshot{Attrs: map[string]string{AttrOrder: `[]`}, Arrays: []*snapshot.Array{arr("t0", snapshot.I8, []int64{2}, nil)}}, ErrInvalidSnapshot, `does not list array "t0"`, false, 0},
		{"order extra", &snapshot.Snapshot{Attrs: map[string]string{AttrOrder: `["t0","t1"]`}, Arrays: []*snapshot.Array{arr("t0", snapshot.I8, []int64{2}, nil)}}, ErrInvalidSnapshot, `lists "t1", which is not an array`, false, 0},
		{"order twice", &snapshot.Snapshot{Attrs: map[string]string{AttrOrder: `["t0","t0"]`}, Arrays: []*snapshot.Array{arr("t0", snapshot.I8, []int64{2}, nil)}}, ErrInvalidSnapshot, `lists "t0" twice`, false, 0},
		{"dim u32", &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "t0", DType: snapshot.I8, Shape: []int64{1 << 33, 0}}}}, ErrInvalidSnapshot, `exceeds the u32 range`, false, 0},
		{"bad data size", &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "t0", DType: snapshot.I8, Shape: []int64{3}, Data: snapshot.Bytes{1}}}}, ErrInvalidSnapshot, `data holds 1 bytes`, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := encode(t, c.s, false)
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %v containing %q", err, c.is, c.want)
			}
			out, err := encode(t, c.s, true)
			if c.lossyOK != (err == nil) {
				t.Fatalf("with Lossy: err %v", err)
			}
			if err != nil {
				return
			}
			s, err := decode(t, snapshot.Bytes(out), int64(len(out)))
			if err != nil {
				t.Fatalf("lossy output does not decode: %v", err)
			}
			if len(s.Arrays) != c.lossyCount {
				t.Fatalf("lossy output has %d arrays, want %d", len(s.Arrays), c.lossyCount)
			}
		})
	}

	// Lossy id assignment: the smallest free ids, in snapshot order.
	s := &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("b", snapshot.F32, []int64{1}, nil), arr("t0", snapshot.F32, []int64{1}, nil), arr("a", snapshot.F32, []int64{1}, nil), arr("t2", snapshot.F32, []int64{1}, nil)}}
	out, err := encode(t, s, true)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decode(t, snapshot.Bytes(out), int64(len(out)))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range back.Arrays {
		got = append(got, a.Name+"="+hex.EncodeToString(readAll(t, a.Data)))
	}
	want := []string{"t0=" + hex.EncodeToString(seq(4)), "t1=" + hex.EncodeToString(seq(4)), "t2=" + hex.EncodeToString(seq(4)), "t3=" + hex.EncodeToString(seq(4))}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("lossy ids: %v", got)
	}
	// Rank 4 from another format comes back exactly, no attributes needed.
	s = &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("t3", snapshot.I32, []int64{2, 1, 3, 2}, nil)}}
	out, err = encode(t, s, false)
	if err != nil {
		t.Fatal(err)
	}
	back, err = decode(t, snapshot.Bytes(out), int64(len(out)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Arrays[0].Shape, []int64{2, 1, 3, 2}) || back.Arrays[0].Attrs[AttrRank] != "4" {
		t.Fatalf("rank 4: %v %v", back.Arrays[0].Shape, back.Arrays[0].Attrs)
	}
}

func TestSniffAndName(t *testing.T) {
	c := New()
	if c.Name() != "stb" || !reflect.DeepEqual(c.Extensions(), []string{".stb"}) {
		t.Fatal("name/extensions")
	}
	if c.Sniff([]byte("STB")) || c.Sniff([]byte("STBX1234")) || !c.Sniff([]byte("STB0\x01")) {
		t.Fatal("Sniff")
	}
}

func TestContextCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	raw := formatstest.ReadTestdata(t, "multi_dtype.stb")
	if _, err := (Codec{}).Decode(ctx, snapshot.Bytes(raw), int64(len(raw)), formats.DecodeOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("decode: %v", err)
	}
	s, _ := decode(t, snapshot.Bytes(raw), int64(len(raw)))
	if err := (Codec{}).Encode(ctx, io.Discard, s, formats.EncodeOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("encode: %v", err)
	}
}
