package safetensors

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/snapshot"
)

// Expected content of the conformance vectors, taken from the `arr` lines
// of ../../../shared/spec/vectors/v1-basic-unsigned.wtxt and
// v2-ext-signed.wtxt (written by an independent implementation).
type wantArray struct {
	name   string
	dtype  snapshot.DType
	shape  []int64
	sha256 string
}

var vectorWant = map[string][]wantArray{
	"v1-basic.safetensors": {
		{"R", snapshot.F64, []int64{300, 64}, "58ef9bf42d468054baac60bf02b8aae94f7b1b7c7455809b63b8e28bf8bf268d"},
		{"W_base", snapshot.F64, []int64{1024}, "aab562b332a20f50b87ca92e60e49e6d7236b43a9700cd8a8fcb2c61da4d8734"},
		{"b", snapshot.U8, []int64{100}, "6714e623a79e087bfa4176dc6f2a4481dbb8e858fc19a4c337bd04b596252e3c"},
		{"s", snapshot.I64, []int64{3}, "1b4a1c25e75637b33b99dac44d81283a752ebc4e415efa391aba1b71deabe008"},
	},
	"v2-ext.safetensors": {
		{"H", snapshot.F32, []int64{20, 3000}, "cf8706e62d5c5b91847a97a220d1e714bf7d41ff03e9b624d3e8b7393fd90a63"},
		{"empty", snapshot.F32, []int64{0, 4}, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"ln.bias", snapshot.F16, []int64{16}, "b54bf6fa516e4eaa068fc70356b507683178ac5a830d3dd48991dc62b499ba56"},
		{"mask", snapshot.Bool, []int64{5}, "54d91e67a2589b9fbdd8f91d6eb5360df8db2fe7b46ee95d64f072768cff989f"},
		{"model.embed.weight", snapshot.BF16, []int64{40, 16}, "054c78e262b0640cffad206b28710f219f4075aaa485e418a2f3cc8b696b5894"},
		{"num_batches_tracked", snapshot.I64, []int64{}, "d37f11f58263dace0296cb24b358b53c52f712b4d462ac5903db47b95ad39bee"},
	},
}

// plainReaderAt hides the Bytes type so Decode takes the ReadAt path.
type plainReaderAt struct{ r *bytes.Reader }

func (p plainReaderAt) ReadAt(b []byte, off int64) (int, error) { return p.r.ReadAt(b, off) }

func decode(t testing.TB, r io.ReaderAt, size int64) (*snapshot.Snapshot, error) {
	t.Helper()
	return Codec{}.Decode(context.Background(), r, size, formats.DecodeOptions{Name: "test.safetensors"})
}

func encode(t testing.TB, s *snapshot.Snapshot, lossy bool) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	err := Codec{}.Encode(context.Background(), &buf, s, formats.EncodeOptions{Lossy: lossy})
	return buf.Bytes(), err
}

func sha(t testing.TB, src snapshot.Source) string {
	t.Helper()
	b, err := snapshot.ReadAll(src)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestVectors(t *testing.T) {
	for file, want := range vectorWant {
		t.Run(file, func(t *testing.T) {
			raw := formatstest.ReadTestdata(t, file)
			if !(Codec{}).Sniff(raw[:formats.SniffLen]) {
				t.Fatal("Sniff rejects the vector")
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
				if len(s.Arrays) != len(want) || s.HasAttrs() {
					t.Fatalf("%s: %d arrays (attrs %v), want %d without attrs", mode, len(s.Arrays), s.HasAttrs(), len(want))
				}
				for i, a := range s.Sorted() {
					w := want[i]
					if a.Name != w.name || a.DType != w.dtype || !reflect.DeepEqual(a.Shape, w.shape) {
						t.Fatalf("%s: array %d = %s %s %v, want %s %s %v", mode, i, a.Name, a.DType, a.Shape, w.name, w.dtype, w.shape)
					}
					if got := sha(t, a.Data); got != w.sha256 {
						t.Fatalf("%s: %s sha256 %s, want %s", mode, a.Name, got, w.sha256)
					}
					if mode == "bytes" && a.Data.Size() > 0 {
						b, ok := snapshot.BytesOf(a.Data)
						start, end := uintptr(unsafe.Pointer(&raw[0])), uintptr(unsafe.Pointer(&raw[len(raw)-1]))
						if p := uintptr(unsafe.Pointer(&b[0])); !ok || p < start || p > end {
							t.Fatalf("%s: data is not a zero-copy slice of the input", a.Name)
						}
					}
				}
				// The vectors are canonical: re-encoding reproduces them.
				out, err := encode(t, s, false)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(out, raw) {
					t.Fatalf("%s: re-encoded file differs from the vector (%d vs %d bytes)", mode, len(out), len(raw))
				}
			}
		})
	}
}

// mk builds a safetensors file from a header and data region.
func mk(header string, data []byte) []byte {
	out := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(out, uint64(len(header)))
	out = append(out, header...)
	return append(out, data...)
}

func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

// richFile exercises metadata, illegal names, exotic dtypes, rank 0 and
// zero-size tensors, and a header in non-canonical order and padding.
func richFile() []byte {
	hdr := `{"weird name/ü":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},` +
		`"__metadata__":{"format":"pt","note":"tab\there \"q\" <&> \u2028"},` +
		`"fp8":{"dtype":"F8_E4M3","shape":[2,3],"data_offsets":[8,14]},` +
		`"f4":{"dtype":"F4","shape":[2,2],"data_offsets":[14,16]},` +
		`"__snapd_attrs__":{"dtype":"U8","shape":[1],"data_offsets":[16,17]},` +
		`"":{"dtype":"I32","shape":[],"data_offsets":[17,21]},` +
		`"z":{"dtype":"U16","shape":[0],"data_offsets":[21,21]},` +
		`"c":{"dtype":"C64","shape":[1],"data_offsets":[21,29]}}` + "\n"
	return mk(hdr, seq(29))
}

func TestRoundTripThroughWTXT(t *testing.T) {
	inputs := map[string][]byte{
		"v1":   formatstest.ReadTestdata(t, "v1-basic.safetensors"),
		"v2":   formatstest.ReadTestdata(t, "v2-ext.safetensors"),
		"rich": richFile(),
		"none": mk(`{}`, nil),
		"md":   mk(`{"__metadata__":{}}`, nil),
	}
	for name, raw := range inputs {
		t.Run(name, func(t *testing.T) {
			s1, err := decode(t, snapshot.Bytes(raw), int64(len(raw)))
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range s1.Arrays {
				if !snapshot.PortableName(a.Name) {
					t.Fatalf("array name %q is not WTXT-legal", a.Name)
				}
			}
			if err := s1.Validate(); err != nil {
				t.Fatal(err)
			}
			out, err := encode(t, formatstest.SimulateWTXT(t, s1), false)
			if err != nil {
				t.Fatal(err)
			}
			s2, err := decode(t, snapshot.Bytes(out), int64(len(out)))
			if err != nil {
				t.Fatal(err)
			}
			formatstest.EqualSorted(t, s1, s2)
			// Canonical: a second trip is byte-identical.
			out2, err := encode(t, s2, false)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, out2) {
				t.Fatal("encoding is not stable across a second round trip")
			}
			if (8+binary.LittleEndian.Uint64(out))%8 != 0 {
				t.Fatal("data region not 8-aligned")
			}
		})
	}
}

func TestRichDecode(t *testing.T) {
	raw := richFile()
	s, err := decode(t, snapshot.Bytes(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Attrs[AttrMetadata]; got != `{"format":"pt","note":"tab\there \"q\" <&> `+"\u2028"+`"}` {
		t.Fatalf("metadata attr %q", got)
	}
	byOrig := map[string]*snapshot.Array{}
	for _, a := range s.Arrays {
		orig := a.Name
		if n, ok := a.Attrs[AttrName]; ok {
			orig = n
		}
		byOrig[orig] = a
	}
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:])[:8] }
	checks := []struct {
		orig, name string
		dt         snapshot.DType
		shape      []int64
		attrs      map[string]string
	}{
		{"weird name/ü", "weird_name/__-" + sum("weird name/ü"), snapshot.F32, []int64{2}, map[string]string{AttrName: "weird name/ü"}},
		{"fp8", "fp8", snapshot.F8E4M3, []int64{2, 3}, nil},
		{"f4", "f4", snapshot.U8, []int64{2}, map[string]string{AttrDType: "F4", AttrShape: "[2,2]"}},
		{"__snapd_attrs__", "__snapd_attrs__-" + sum("__snapd_attrs__"), snapshot.U8, []int64{1}, map[string]string{AttrName: "__snapd_attrs__"}},
		{"", "-" + sum(""), snapshot.I32, []int64{}, map[string]string{AttrName: ""}},
		{"z", "z", snapshot.U16, []int64{0}, nil},
		{"c", "c", snapshot.C64, []int64{1}, nil},
	}
	for _, c := range checks {
		a := byOrig[c.orig]
		if a == nil {
			t.Fatalf("tensor %q missing", c.orig)
		}
		if a.Name != c.name || a.DType != c.dt || !reflect.DeepEqual(a.Shape, c.shape) || !reflect.DeepEqual(a.Attrs, c.attrs) {
			t.Fatalf("tensor %q: got %q %s %v %v, want %q %s %v %v", c.orig, a.Name, a.DType, a.Shape, a.Attrs, c.name, c.dt, c.shape, c.attrs)
		}
	}
	b, _ := snapshot.ReadAll(byOrig["fp8"].Data)
	if !bytes.Equal(b, seq(29)[8:14]) {
		t.Fatalf("fp8 bytes %x", b)
	}
}

func TestSanitizedNameCollision(t *testing.T) {
	h := sha256.Sum256([]byte("a b"))
	short := "a_b-" + hex.EncodeToString(h[:])[:8]
	hdr := fmt.Sprintf(`{"a b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},%q:{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, short)
	raw := mk(hdr, []byte{1, 2})
	s, err := decode(t, snapshot.Bytes(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	want := "a_b-" + hex.EncodeToString(h[:])[:16]
	if s.Arrays[0].Name != want || s.Arrays[1].Name != short {
		t.Fatalf("names %q %q, want %q %q", s.Arrays[0].Name, s.Arrays[1].Name, want, short)
	}
	out, err := encode(t, formatstest.SimulateWTXT(t, s), false)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := decode(t, snapshot.Bytes(out), int64(len(out)))
	if err != nil {
		t.Fatal(err)
	}
	formatstest.EqualSorted(t, s, s2)
}

func TestEncodeExact(t *testing.T) {
	s := &snapshot.Snapshot{
		Attrs: map[string]string{AttrMetadata: `{"b":"2","a":"x\"y\u0001\u007f"}`},
		Arrays: []*snapshot.Array{
			{Name: "z", DType: snapshot.F32, Shape: []int64{2}, Data: snapshot.Bytes{1, 2, 3, 4, 5, 6, 7, 8}},
			{Name: "a", DType: snapshot.U8, Shape: []int64{3}, Data: snapshot.Bytes{9, 10, 11}},
			{Name: "s", DType: snapshot.BF16, Shape: []int64{}, Data: snapshot.Bytes{12, 13}},
		},
	}
	out, err := encode(t, s, false)
	if err != nil {
		t.Fatal(err)
	}
	hdr := `{"__metadata__":{"a":"x\"y\u0001` + "\x7f" + `","b":"2"},` +
		`"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},` +
		`"s":{"dtype":"BF16","shape":[],"data_offsets":[3,5]},` +
		`"z":{"dtype":"F32","shape":[2],"data_offsets":[5,13]}}`
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	want := mk(hdr, []byte{9, 10, 11, 12, 13, 1, 2, 3, 4, 5, 6, 7, 8})
	if !bytes.Equal(out, want) {
		t.Fatalf("got\n%q\nwant\n%q", out, want)
	}
	empty, err := encode(t, &snapshot.Snapshot{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(empty, mk("{}      ", nil)) {
		t.Fatalf("empty snapshot: %q", empty)
	}
}

func TestEncodeErrors(t *testing.T) {
	u8 := func(name string, attrs map[string]string) *snapshot.Array {
		return &snapshot.Array{Name: name, DType: snapshot.U8, Shape: []int64{6}, Data: snapshot.Bytes(seq(6)), Attrs: attrs}
	}
	cases := []struct {
		name  string
		s     *snapshot.Snapshot
		is    error
		want  string
		lossy bool // also fails with Lossy
	}{
		{"foreign array attr", &snapshot.Snapshot{Arrays: []*snapshot.Array{u8("x", map[string]string{"stb.layout": "1"})}}, formats.ErrLossy, `array "x": attribute "stb.layout"`, false},
		{"foreign snapshot attr", &snapshot.Snapshot{Attrs: map[string]string{"stb.order": "[]"}}, formats.ErrLossy, `snapshot attribute "stb.order"`, false},
		{"unknown own attr", &snapshot.Snapshot{Arrays: []*snapshot.Array{u8("x", map[string]string{"safetensors.bogus": "1"})}}, ErrInvalidSnapshot, `unknown attribute "safetensors.bogus"`, true},
		{"bad metadata", &snapshot.Snapshot{Attrs: map[string]string{AttrMetadata: `{"a":1}`}}, ErrInvalidSnapshot, `value of key 1 is a number, want a string`, true},
		{"metadata trailing", &snapshot.Snapshot{Attrs: map[string]string{AttrMetadata: `{} {}`}}, ErrInvalidSnapshot, `trailing data`, true},
		{"dup names", &snapshot.Snapshot{Arrays: []*snapshot.Array{u8("x", nil), u8("y", map[string]string{AttrName: "x"})}}, ErrInvalidSnapshot, `two arrays map to the tensor name "x"`, true},
		{"reserved", &snapshot.Snapshot{Arrays: []*snapshot.Array{u8("x", map[string]string{AttrName: "__metadata__"})}}, ErrInvalidSnapshot, `reserved`, true},
		{"bad utf8 name", &snapshot.Snapshot{Arrays: []*snapshot.Array{u8("x", map[string]string{AttrName: "\xff"})}}, ErrInvalidSnapshot, `not valid UTF-8`, true},
		{"dtype attr normal", &snapshot.Snapshot{Arrays: []*snapshot.Array{u8("x", map[string]string{AttrDType: "F32", AttrShape: "[1]"})}}, ErrInvalidSnapshot, `not a safetensors dtype carried as bytes`, true},
		{"dtype attr size", &snapshot.Snapshot{Arrays: []*snapshot.Array{u8("x", map[string]string{AttrDType: "F8_E5M2", AttrShape: "[5]"})}}, ErrInvalidSnapshot, `needs 5 bytes, the array holds 6`, true},
		{"dtype attr no shape", &snapshot.Snapshot{Arrays: []*snapshot.Array{u8("x", map[string]string{AttrDType: "F8_E5M2"})}}, ErrInvalidSnapshot, `without safetensors.shape`, true},
		{"shape attr alone", &snapshot.Snapshot{Arrays: []*snapshot.Array{u8("x", map[string]string{AttrShape: "[6]"})}}, ErrInvalidSnapshot, `without safetensors.dtype`, true},
		{"size mismatch", &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "x", DType: snapshot.F32, Shape: []int64{2}, Data: snapshot.Bytes{1}}}}, ErrInvalidSnapshot, `data holds 1 bytes`, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := encode(t, c.s, false)
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %v containing %q", err, c.is, c.want)
			}
			_, err = encode(t, c.s, true)
			if c.lossy != (err != nil) {
				t.Fatalf("with Lossy: err %v", err)
			}
		})
	}
	// Lossy drops foreign attributes and keeps the rest.
	s := &snapshot.Snapshot{Attrs: map[string]string{"x.y": "1"}, Arrays: []*snapshot.Array{u8("x", map[string]string{"stb.layout": "1", AttrName: "orig name"})}}
	out, err := encode(t, s, true)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := decode(t, snapshot.Bytes(out), int64(len(out)))
	if err != nil {
		t.Fatal(err)
	}
	if len(s2.Arrays) != 1 || s2.Arrays[0].Attrs[AttrName] != "orig name" || s2.Attrs != nil {
		t.Fatalf("lossy result: %+v %v", s2.Arrays[0], s2.Attrs)
	}
}

func TestDecodeErrors(t *testing.T) {
	ok := `{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`
	huge := make([]byte, 16)
	binary.LittleEndian.PutUint64(huge, MaxHeaderSize+1)
	past := make([]byte, 16)
	binary.LittleEndian.PutUint64(past, 9)
	cases := []struct {
		name string
		raw  []byte
		is   error
		want string
	}{
		{"empty file", nil, ErrCorrupt, "file has 0 bytes, need at least 8"},
		{"short file", []byte{1, 2, 3}, ErrCorrupt, "file has 3 bytes"},
		{"absurd length", huge, ErrLimit, "header length (the first 8 bytes, little-endian) exceeds the limit"},
		{"length past end", past, ErrCorrupt, "header length (the first 8 bytes, little-endian) exceeds the 8 bytes after the length field"},
		{"max uint64 length", []byte{255, 255, 255, 255, 255, 255, 255, 255, '{', '}'}, ErrLimit, "exceeds the limit"},
		{"truncated data", mk(ok, []byte{1}), ErrCorrupt, "end beyond the 1-byte data region"},
		{"extra data", mk(ok, []byte{1, 2, 3}), ErrCorrupt, "tensor data covers 2 bytes but the data region after the header has 3"},
		{"non-utf8", mk("{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", nil), ErrCorrupt, "offset 11: header is not valid UTF-8"},
		{"not an object", mk(`[1]`, nil), ErrCorrupt, "header does not start with '{'"},
		{"leading space", mk(` {}`, nil), ErrCorrupt, "header does not start with '{'"},
		{"empty header", mk(``, nil), ErrCorrupt, "header does not start with '{'"},
		{"trailing garbage", mk(`{} x`, nil), ErrCorrupt, "after the JSON object"},
		{"second object", mk(`{}{}`, nil), ErrCorrupt, "after the JSON object"},
		{"bad json", mk(`{"a":}`, nil), ErrCorrupt, `tensor "a": offset 12: malformed JSON at byte 13`},
		{"bad json top", mk(`{"a" 1}`, nil), ErrCorrupt, `tensor "a": offset 12: malformed JSON at byte 13`},
		{"bad json key", mk(`{x:1}`, nil), ErrCorrupt, `offset 9: header JSON: malformed JSON at byte 9`},
		{"dtype type", mk(`{"a":{"dtype":5,"shape":[0],"data_offsets":[0,0]}}`, nil), ErrCorrupt, `tensor "a": offset 12: dtype: want a string: wrong JSON type at byte 23 (number, want string)`},
		{"shape element type", mk(`{"a":{"dtype":"U8","shape":[0,"x"],"data_offsets":[0,0]}}`, nil), ErrCorrupt, `tensor "a": offset 12: shape: want an array of non-negative integers: wrong JSON type at byte 41 (string, want uint64)`},
		{"metadata syntax", mk(`{"__metadata__":{"a":x}}`, nil), ErrCorrupt, `offset 29: header JSON: __metadata__: malformed JSON at byte 29`},
		{"unterminated", mk(`{"a":{"dtype":"U8"`, nil), ErrCorrupt, "JSON ends before the object is complete"},
		{"unterminated top", mk(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}`, nil), ErrCorrupt, "header JSON: JSON ends before the object is complete"},
		{"duplicate tensor", mk(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil), ErrCorrupt, `duplicate key "a"`},
		{"duplicate field", mk(`{"a":{"dtype":"U8","dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil), ErrCorrupt, `duplicate field "dtype"`},
		{"unknown field", mk(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":1}}`, nil), ErrCorrupt, `unknown field (a key of 1 bytes`},
		{"missing dtype", mk(`{"a":{"shape":[0],"data_offsets":[0,0]}}`, nil), ErrCorrupt, `missing field "dtype"`},
		{"missing shape", mk(`{"a":{"dtype":"U8","data_offsets":[0,0]}}`, nil), ErrCorrupt, `missing field "shape"`},
		{"missing offsets", mk(`{"a":{"dtype":"U8","shape":[0]}}`, nil), ErrCorrupt, `missing field "data_offsets"`},
		{"bad dtype", mk(`{"a":{"dtype":"Q4_K","shape":[0],"data_offsets":[0,0]}}`, nil), ErrUnsupported, `dtype (a string of 4 bytes) is not a safetensors dtype`},
		{"lowercase dtype", mk(`{"a":{"dtype":"f32","shape":[0],"data_offsets":[0,0]}}`, nil), ErrUnsupported, `dtype (a string of 3 bytes)`},
		{"negative dim", mk(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, nil), ErrCorrupt, `shape: want an array of non-negative integers`},
		{"float dim", mk(`{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,0]}}`, nil), ErrCorrupt, `shape: want an array`},
		{"null shape", mk(`{"a":{"dtype":"U8","shape":null,"data_offsets":[0,0]}}`, nil), ErrCorrupt, `shape is null`},
		{"huge dim", mk(`{"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}}`, nil), ErrCorrupt, `overflows int64`},
		{"overflow product", mk(`{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, nil), ErrCorrupt, `overflows`},
		{"three offsets", mk(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0,0]}}`, nil), ErrCorrupt, `data_offsets has 3 elements`},
		{"begin after end", mk(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[2,1]}}`, nil), ErrCorrupt, `begin after end`},
		{"span mismatch", mk(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,2]}}`, []byte{1, 2}), ErrCorrupt, `span 2 bytes, but shape [1] of F32 needs 4`},
		{"overlap", mk(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, []byte{1, 2, 3}), ErrCorrupt, `tensor "b": offset 114: data_offsets [1,3] overlaps the previous tensor's data ending at 2`},
		{"same range", mk(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, []byte{1, 2}), ErrCorrupt, `overlaps`},
		{"gap", mk(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, []byte{1, 2}), ErrCorrupt, `leaves a gap`},
		{"sub-byte misaligned", mk(`{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}`, []byte{1}), ErrCorrupt, `3 elements of 4 bits are not a whole number of bytes`},
		{"metadata not string", mk(`{"__metadata__":{"a":1}}`, nil), ErrCorrupt, `__metadata__: value of key 1 is a number, want a string`},
		{"metadata duplicate", mk(`{"__metadata__":{"a":"1","a":"2"}}`, nil), ErrCorrupt, `__metadata__: duplicate key (1 bytes)`},
		{"metadata array", mk(`{"__metadata__":[]}`, nil), ErrCorrupt, `__metadata__: want an object`},
		{"tensor not object", mk(`{"a":1}`, nil), ErrCorrupt, `want an object, got a number`},
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
				if !errors.As(err, &e) || !strings.Contains(err.Error(), "test.safetensors") {
					t.Fatalf("err %v is not an *Error naming the file", err)
				}
			}
		})
	}
}

func TestDecodeAccepts(t *testing.T) {
	cases := map[string]string{
		"null metadata":    `{"__metadata__":null}`,
		"trailing ws":      "{} \t\r\n",
		"unpadded":         `{"a":{"data_offsets":[0,0],"shape":[0],"dtype":"U8"}}`,
		"escaped key":      `{"\u0041":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`,
		"zero-size last":   `{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[0,5],"data_offsets":[0,0]}}`,
		"offsets unsorted": `{"b":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`,
	}
	for name, hdr := range cases {
		raw := mk(hdr, nil)
		if _, err := decode(t, snapshot.Bytes(raw), int64(len(raw))); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	raw := mk(`{"\u0041":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil)
	s, _ := decode(t, snapshot.Bytes(raw), int64(len(raw)))
	if s.Arrays[0].Name != "A" {
		t.Fatalf("escaped key decoded as %q", s.Arrays[0].Name)
	}
}

func TestSniff(t *testing.T) {
	yes := [][]byte{mk(`{"a":1}`, nil), mk("{  \n}", nil), formatstest.ReadTestdata(t, "v1-basic.safetensors")[:64]}
	no := [][]byte{nil, []byte("STB0\x01\x00\x00\x00\x00\x00\x00\x00"), []byte("ZTEN1000xxxxxxxx"), mk(`[]`, nil), mk(`{1}`, nil),
		append([]byte{1, 0, 0, 0, 0, 0, 0, 0}, `{}`...), append([]byte{0, 0, 0, 0, 0, 0, 0, 1}, `{}`...)}
	for _, h := range yes {
		if !(Codec{}).Sniff(h) {
			t.Fatalf("Sniff(%q) = false", h)
		}
	}
	for _, h := range no {
		if (Codec{}).Sniff(h) {
			t.Fatalf("Sniff(%q) = true", h)
		}
	}
	c := New()
	if c.Name() != "safetensors" || !reflect.DeepEqual(c.Extensions(), []string{".safetensors"}) {
		t.Fatal("name/extensions")
	}
}

func TestContextCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	raw := formatstest.ReadTestdata(t, "v1-basic.safetensors")
	if _, err := (Codec{}).Decode(ctx, snapshot.Bytes(raw), int64(len(raw)), formats.DecodeOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("decode: %v", err)
	}
	s, _ := decode(t, snapshot.Bytes(raw), int64(len(raw)))
	if err := (Codec{}).Encode(ctx, io.Discard, s, formats.EncodeOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("encode: %v", err)
	}
}

// TestPythonCrossCheck runs the reference implementation (the safetensors
// Python package with numpy) on a file this codec wrote, and this codec on
// a file the reference wrote. Skipped when they are not installed.
func TestPythonCrossCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-check with the Python reference skipped in -short mode")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	if err := exec.Command(py, "-c", "import numpy, safetensors.numpy").Run(); err != nil {
		t.Skip("python3 lacks numpy or safetensors; skipping the reference cross-check")
	}
	dir := t.TempDir()
	raw := richFile()
	s, err := decode(t, snapshot.Bytes(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	// numpy has no bf16/f8: use the v2 vector's non-bf16 arrays plus the
	// rich file's plain ones.
	v2 := formatstest.ReadTestdata(t, "v2-ext.safetensors")
	s2, err := decode(t, snapshot.Bytes(v2), int64(len(v2)))
	if err != nil {
		t.Fatal(err)
	}
	keep := &snapshot.Snapshot{Attrs: s.Attrs}
	for _, a := range append(s.Arrays, s2.Arrays...) {
		if a.DType != snapshot.BF16 && a.Attrs[AttrDType] == "" {
			keep.Arrays = append(keep.Arrays, a)
		}
	}
	ours, err := encode(t, keep, false)
	if err != nil {
		t.Fatal(err)
	}
	oursPath := filepath.Join(dir, "ours.safetensors")
	refPath := filepath.Join(dir, "ref.safetensors")
	if err := os.WriteFile(oursPath, ours, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
import sys, json, hashlib, safetensors.numpy as st
from safetensors import safe_open
src, dst = sys.argv[1], sys.argv[2]
with safe_open(src, "np") as f:
    md = f.metadata()
    names = sorted(f.keys())
    out = {n: f.get_tensor(n) for n in names}
for n in names:
    a = out[n]
    print(json.dumps([n, str(a.dtype), list(a.shape), hashlib.sha256(a.tobytes()).hexdigest()]))
print(json.dumps(md, sort_keys=True))
st.save_file(out, dst, metadata=md)
`
	cmd := exec.Command(py, "-c", script, oursPath, refPath)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outp, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.Bytes())
	}
	lines := strings.Split(strings.TrimSpace(string(outp)), "\n")
	if len(lines) != len(keep.Arrays)+1 {
		t.Fatalf("python listed %d lines for %d arrays", len(lines), len(keep.Arrays))
	}
	names := make([]string, 0, len(keep.Arrays))
	for _, a := range keep.Arrays {
		n := a.Name
		if o, ok := a.Attrs[AttrName]; ok {
			n = o
		}
		names = append(names, fmt.Sprintf("%q", n))
		if !strings.Contains(string(outp), sha(t, a.Data)) {
			t.Fatalf("python read different bytes for %q:\n%s", n, outp)
		}
	}
	sort.Strings(names)
	ref, err := os.ReadFile(refPath)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decode(t, snapshot.Bytes(ref), int64(len(ref)))
	if err != nil {
		t.Fatalf("decoding the reference's file: %v", err)
	}
	formatstest.EqualSorted(t, keep, back)
}

// TestReferenceSerialization checks Encode against the expected bytes of
// the reference implementation's own unit tests (huggingface/safetensors
// safetensors/src/tensor.rs: test_serialization, test_empty,
// test_serialization_forced_alignement).
func TestReferenceSerialization(t *testing.T) {
	f32s := []byte{0, 0, 0, 0, 0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64}
	cases := []struct {
		name string
		s    *snapshot.Snapshot
		want []byte
	}{
		{"test_serialization", &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "attn.0", DType: snapshot.F32, Shape: []int64{1, 2, 3}, Data: snapshot.Bytes(f32s)}}},
			append([]byte{64, 0, 0, 0, 0, 0, 0, 0}, append([]byte(`{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}`), f32s...)...)},
		{"test_serialization_forced_alignement", &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "attn0", DType: snapshot.F32, Shape: []int64{1, 1, 2, 3}, Data: snapshot.Bytes(f32s)}}},
			append([]byte{72, 0, 0, 0, 0, 0, 0, 0}, append([]byte(`{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}       `), f32s...)...)},
		{"test_empty", &snapshot.Snapshot{}, []byte{8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32}},
		{"test_empty metadata", &snapshot.Snapshot{Attrs: map[string]string{AttrMetadata: `{"framework":"pt"}`}},
			[]byte{40, 0, 0, 0, 0, 0, 0, 0, 123, 34, 95, 95, 109, 101, 116, 97, 100, 97, 116, 97, 95,
				95, 34, 58, 123, 34, 102, 114, 97, 109, 101, 119, 111, 114, 107, 34, 58, 34, 112,
				116, 34, 125, 125, 32, 32, 32, 32, 32}},
	}
	for _, c := range cases {
		out, err := encode(t, c.s, false)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.Equal(out, c.want) {
			t.Fatalf("%s:\n got %q\nwant %q", c.name, out, c.want)
		}
		back, err := decode(t, snapshot.Bytes(out), int64(len(out)))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		formatstest.EqualSorted(t, c.s, back)
	}
}
