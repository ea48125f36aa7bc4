package fold

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// chunkOf builds a chunk for foldOf.
func chunkOf(name, ctype string, flags uint32, ecc string, payload []byte) builtChunk {
	d := freshDesc(name, ctype)
	d.set("flags", jint(int64(flags)))
	d.set("ecc_algo", jstr(ecc))
	return builtChunk{name: name, desc: d, ctype: ctype, flags: flags, payload: payload}
}

// foldOf writes a FOLD file holding the given chunks.
func foldOf(t testing.TB, chunks ...builtChunk) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := writeFile(context.Background(), &buf, freshRoot(), chunks, false); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// npy builds a .npy v1.0 member as numpy writes it.
func npy(descr string, fortran bool, shape []int64, data []byte) []byte {
	var dims []string
	for _, d := range shape {
		dims = append(dims, fmt.Sprint(d))
	}
	sh := strings.Join(dims, ", ")
	if len(shape) == 1 {
		sh += ","
	}
	f := "False"
	if fortran {
		f = "True"
	}
	d := "'" + descr + "'"
	if strings.HasPrefix(descr, "[") {
		d = descr
	}
	h := fmt.Sprintf("{'descr': %s, 'fortran_order': %s, 'shape': (%s), }", d, f, sh)
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	out := []byte("\x93NUMPY\x01\x00")
	out = binary.LittleEndian.AppendUint16(out, uint16(len(h)))
	out = append(out, h...)
	return append(out, data...)
}

type member struct {
	name    string
	method  uint16
	content []byte
}

func zipOf(t testing.TB, members ...member) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, m := range members {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: m.name, Method: m.method})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(m.content); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func f32s(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func TestNPZVariants(t *testing.T) {
	be := make([]byte, 0, 24)
	for _, x := range []float32{1, 2, 3, 4, 5, 6} {
		be = binary.BigEndian.AppendUint32(be, math.Float32bits(x))
	}
	// Fortran order of [[1,2,3],[4,5,6]] (i2): column-major 1,4,2,5,3,6.
	var fo []byte
	for _, x := range []int16{1, 4, 2, 5, 3, 6} {
		fo = binary.LittleEndian.AppendUint16(fo, uint16(x))
	}
	// Big-endian and Fortran, i4 shape (3,2) = [[1,2],[3,4],[5,6]]:
	// column-major 1,3,5,2,4,6.
	var bef []byte
	for _, x := range []int32{1, 3, 5, 2, 4, 6} {
		bef = binary.BigEndian.AppendUint32(bef, uint32(x))
	}
	var f64 []byte
	for _, x := range []float64{0.5, -1, 2} {
		f64 = binary.LittleEndian.AppendUint64(f64, math.Float64bits(x))
	}
	payload := zipOf(t,
		member{"be_f4.npy", zip.Store, npy(">f4", false, []int64{2, 3}, be)},
		member{"fo_i2.npy", zip.Store, npy("<i2", true, []int64{2, 3}, fo)},
		member{"bef_i4.npy", zip.Store, npy(">i4", true, []int64{3, 2}, bef)},
		member{"cplx.npy", zip.Store, npy("<c8", false, []int64{2}, make([]byte, 16))},
		member{"rec.npy", zip.Store, npy("[('a', '<i4'), ('b', '<f8')]", false, []int64{1}, make([]byte, 12))},
		member{"defl.npy", zip.Deflate, npy("<f8", false, []int64{3}, f64)},
		member{"notes.txt", zip.Store, []byte("not an array")},
		member{"scalar.npy", zip.Store, npy("<f4", false, []int64{}, f32s(7))},
		member{"empty.npy", zip.Store, npy("<f4", false, []int64{0, 3}, nil)},
		member{"flags.npy", zip.Store, npy("|b1", false, []int64{3}, []byte{1, 0, 1})},
	)
	for _, cfg := range []struct {
		flags uint32
		ecc   string
	}{{0, "none"}, {1, "rs(16)"}, {0, "rs(64)"}} {
		file := foldOf(t, chunkOf("nuclear_arrays", CTypeNPZ, cfg.flags, cfg.ecc, payload))
		s := decodeBytes(t, file)
		check := func(name string, dt snapshot.DType, shape []int64, want []byte) {
			t.Helper()
			a := s.Array("nuclear_arrays/" + name)
			if a == nil {
				t.Fatalf("%s missing: %v", name, arrayNames(s))
			}
			if a.DType != dt || !equalShape(a.Shape, shape) || !bytes.Equal(data(t, a), want) {
				t.Fatalf("%s: %s%v % x, want %s%v % x", name, a.DType, a.Shape, data(t, a), dt, shape, want)
			}
		}
		check("be_f4", snapshot.F32, []int64{2, 3}, f32s(1, 2, 3, 4, 5, 6))
		var fc []byte
		for _, x := range []int16{1, 2, 3, 4, 5, 6} {
			fc = binary.LittleEndian.AppendUint16(fc, uint16(x))
		}
		check("fo_i2", snapshot.I16, []int64{2, 3}, fc)
		var bc []byte
		for _, x := range []int32{1, 2, 3, 4, 5, 6} {
			bc = binary.LittleEndian.AppendUint32(bc, uint32(x))
		}
		check("bef_i4", snapshot.I32, []int64{3, 2}, bc)
		check("cplx", snapshot.U8, []int64{16}, make([]byte, 16))
		check("rec", snapshot.U8, []int64{12}, make([]byte, 12))
		check("defl", snapshot.F64, []int64{3}, f64)
		check("scalar", snapshot.F32, []int64{}, f32s(7))
		check("empty", snapshot.F32, []int64{0, 3}, []byte{})
		check("flags", snapshot.Bool, []int64{3}, []byte{1, 0, 1})
		if a := s.Array("nuclear_arrays/cplx"); a.Attrs[AttrNPYDescr] != "<c8" || a.Attrs[AttrNPYShape] != "[2]" {
			t.Fatalf("cplx attrs %v", a.Attrs)
		}
		if a := s.Array("nuclear_arrays/rec"); a.Attrs[AttrNPYDescr] != "structured" {
			t.Fatalf("rec attrs %v", a.Attrs)
		}
		checkRoundTrip(t, file)
	}
}

func TestNPZMalformed(t *testing.T) {
	bad := map[string][]byte{
		"not zip":      []byte("garbage"),
		"bad magic":    zipOf(t, member{"a.npy", zip.Store, []byte("\x93NUMPX\x01\x00\x00\x00")}),
		"short data":   zipOf(t, member{"a.npy", zip.Store, npy("<f4", false, []int64{4}, make([]byte, 8))}),
		"huge shape":   zipOf(t, member{"a.npy", zip.Store, npy("<f4", false, []int64{1 << 40, 1 << 40}, nil)}),
		"bad header":   zipOf(t, member{"a.npy", zip.Store, []byte("\x93NUMPY\x01\x00\x05\x00{'x'}")}),
		"header len":   zipOf(t, member{"a.npy", zip.Store, []byte("\x93NUMPY\x01\x00\xff\xff{}")}),
		"version 9":    zipOf(t, member{"a.npy", zip.Store, []byte("\x93NUMPY\x09\x00\x00\x00")}),
		"missing keys": zipOf(t, member{"a.npy", zip.Store, []byte("\x93NUMPY\x01\x00\x02\x00{}")}),
	}
	for name, p := range bad {
		file := foldOf(t, chunkOf("nuclear_arrays", CTypeNPZ, 0, "none", p))
		if _, err := New().Decode(context.Background(), snapshot.Bytes(file), int64(len(file)), decodeOpts); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), `chunk "nuclear_arrays"`) {
			t.Errorf("%s: error %q does not name the chunk", name, err)
		}
	}
}

// sten builds safetensors bytes from a header object and data.
func sten(header string, data []byte) []byte {
	for (len(header))%8 != 0 {
		header += " "
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, data...)
}

func TestSTEN(t *testing.T) {
	raw := append(f32s(1, 2, 3, 4), 0x80, 0x3f, 0x00, 0x40, 0x40, 0x40, 1, 0, 0x38, 0x40, 0x44, 0x48)
	hdr := `{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},` +
		`"b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},"m":{"dtype":"BOOL","shape":[2],"data_offsets":[22,24]},` +
		`"q":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[24,28]},"z":{"dtype":"I32","shape":[0],"data_offsets":[28,28]}}`
	payload := sten(hdr, raw)
	for _, flags := range []uint32{0, 1} {
		file := foldOf(t, chunkOf("torch_state", CTypeSTEN, flags, "rs(32)", payload))
		s := decodeBytes(t, file)
		w := s.Array("torch_state/w")
		if w == nil || w.DType != snapshot.F32 || !bytes.Equal(data(t, w), f32s(1, 2, 3, 4)) {
			t.Fatalf("w: %+v", w)
		}
		if b := s.Array("torch_state/b"); b.DType != snapshot.BF16 || !equalShape(b.Shape, []int64{3}) {
			t.Fatalf("b: %s%v", b.DType, b.Shape)
		}
		q := s.Array("torch_state/q")
		if q.DType != snapshot.U8 || q.Attrs[AttrSTENDType] != "F8_E4M3" || q.Attrs[AttrSTENShape] != "[2,2]" {
			t.Fatalf("q: %s %v", q.DType, q.Attrs)
		}
		if z := s.Array("torch_state/z"); z.DType != snapshot.I32 || z.Data.Size() != 0 {
			t.Fatalf("z: %+v", z)
		}
		checkRoundTrip(t, file)
	}
	bad := map[string][]byte{
		"short":       []byte{1, 2},
		"hdr len":     binary.LittleEndian.AppendUint64(nil, 1<<40),
		"bad json":    sten(`{"a":`, nil),
		"out of data": sten(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 4)),
		"size":        sten(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 8)),
		"offsets":     sten(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`, make([]byte, 8)),
	}
	for name, p := range bad {
		file := foldOf(t, chunkOf("torch_state", CTypeSTEN, 0, "none", p))
		if _, err := New().Decode(context.Background(), snapshot.Bytes(file), int64(len(file)), decodeOpts); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestTSAVTorchFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/torch/*.pt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no torch files: %v", err)
	}
	want := map[string]struct {
		dt   snapshot.DType
		data []byte
	}{
		"float32":  {snapshot.F32, f32s(1.2, -3.4, 5.6, -7.8)},
		"bfloat16": {snapshot.BF16, []byte{0x9a, 0x3f, 0x5a, 0xc0, 0xb3, 0x40, 0xfa, 0xc0}},
		"float16":  {snapshot.F16, []byte{0xcd, 0x3c, 0xcd, 0xc2, 0x9a, 0x45, 0xcd, 0xc7}},
		"int64":    {snapshot.I64, []byte{1, 0, 0, 0, 0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0, 0, 0, 0, 0, 0xfc, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		"bool":     {snapshot.Bool, []byte{1, 0, 1, 0}},
		"uint8":    {snapshot.U8, []byte{1, 10, 100, 255}},
	}
	for _, f := range files {
		pt, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		kind := strings.Split(filepath.Base(f), "_")[1]
		w, ok := want[kind]
		if !ok {
			t.Fatalf("no expectation for %s", f)
		}
		file := foldOf(t, chunkOf("torch_state", CTypeTSAV, 1, "none", pt))
		s := decodeBytes(t, file)
		a := s.Array("torch_state/tensor")
		if a == nil {
			t.Fatalf("%s: no tensor: %v (%s)", f, arrayNames(s), s.Attrs[AttrChunks])
		}
		if a.DType != w.dt || !equalShape(a.Shape, []int64{4}) || !bytes.Equal(data(t, a), w.data) {
			t.Fatalf("%s: %s%v % x, want %s % x", f, a.DType, a.Shape, data(t, a), w.dt, w.data)
		}
		checkRoundTrip(t, file)
	}
}

// TestTSAVOpaque: a TSAV payload that is not a torch zip is kept whole,
// with a note.
func TestTSAVOpaque(t *testing.T) {
	for name, p := range map[string][]byte{
		"not zip":      []byte("legacy torch pickle"),
		"no data.pkl":  zipOf(t, member{"x/version", zip.Store, []byte("3\n")}),
		"bad pickle":   zipOf(t, member{"x/data.pkl", zip.Store, []byte("\x80\x02\xff")}),
		"huge frame":   zipOf(t, member{"x/data.pkl", zip.Store, []byte("\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7f.")}),
		"bin8 len":     zipOf(t, member{"x/data.pkl", zip.Store, []byte("\x80\x04\x8e\xff\xff\xff\xff\xff\xff\xff\x7f.")}),
		"unhashable":   zipOf(t, member{"x/data.pkl", zip.Store, []byte("\x80\x02ccollections\nOrderedDict\n)R]]s.")}),
		"short":        zipOf(t, member{"x/data.pkl", zip.Store, []byte("\x80\x02X\xff\xff\xff\x7fabc.")}),
		"no STOP":      zipOf(t, member{"x/data.pkl", zip.Store, []byte("\x80\x02}")}),
		"bad text int": zipOf(t, member{"x/data.pkl", zip.Store, []byte("I12")}),
	} {
		file := foldOf(t, chunkOf("torch_state", CTypeTSAV, 0, "none", p))
		s := decodeBytes(t, file)
		var recs []chunkRec
		if err := json.Unmarshal([]byte(s.Attrs[AttrChunks]), &recs); err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || recs[0].Note == "" || len(s.Arrays) != 1 {
			t.Fatalf("%s: recs %+v arrays %v", name, recs, arrayNames(s))
		}
		checkRoundTrip(t, file)
	}
}

// TestZstdFramesCarryContentSize: the reference readers decompress with a
// one-shot call that needs the frame content size; frames must also have
// no checksum (as Python's zstd at level 3 writes them).
func TestZstdFramesCarryContentSize(t *testing.T) {
	for _, n := range []int{0, 1, 75, 255, 256, 1024, 5000, 300000} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i % 251)
		}
		file := foldOf(t, chunkOf("metrics", CTypeJSON, 1, "none", p))
		comp := binary.BigEndian.Uint64(file[28+16:])
		frame := file[28+32 : 28+32+int(comp)]
		if len(frame) < 6 || !bytes.Equal(frame[:4], []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			t.Fatalf("n=%d: no zstd frame: % x", n, frame[:min(len(frame), 8)])
		}
		fhd := frame[4]
		if fhd&0x20 == 0 && fhd>>6 == 0 {
			t.Fatalf("n=%d: frame header 0x%02x has no content size", n, fhd)
		}
		if fhd&0x04 != 0 {
			t.Fatalf("n=%d: frame header 0x%02x has a checksum", n, fhd)
		}
		c, _ := rawChunks(t, file)
		if !bytes.Equal(c[0].payload, p) {
			t.Fatalf("n=%d: payload differs", n)
		}
	}
}
