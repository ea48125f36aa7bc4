package ztensor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/snapshot"
)

// fixtureDir is the shared fixture directory; the tests use the copies in
// testdata/ and only check that they are still identical to it.
const fixtureDir = "../../../shared/fixtures/ztensor"

// wantArray is one expected array of a decoded fixture (values from
// shared/fixtures/ztensor/EXPECTED.md).
type wantArray struct {
	name   string
	dtype  snapshot.DType
	shape  []int64
	sha256 string // of the raw (decoded) little-endian bytes
	attrs  map[string]string
}

type fixture struct {
	file      string
	size      int
	sha256    string
	mOff      int64
	mSize     int
	mSHA256   string
	order     []string // tensor order (blob order)
	arrays    []wantArray
	rawOnly   bool // every component raw: the whole file re-encodes byte for byte
	zeroCopy  []string
	checkVals func(t *testing.T, s *snapshot.Snapshot)
}

func coo(role, dtype, shape string) map[string]string {
	return map[string]string{"ztensor.name": "coo.f32", "ztensor.format": "sparse_coo", "ztensor.role": role,
		"ztensor.dtype": dtype, "ztensor.shape": shape, "ztensor.digest": "crc32c"}
}

func csr(name, role, dtype, shape string, zstd bool) map[string]string {
	m := map[string]string{"ztensor.name": name, "ztensor.format": "sparse_csr", "ztensor.role": role,
		"ztensor.dtype": dtype, "ztensor.shape": shape}
	if zstd {
		m["ztensor.encoding"] = "zstd"
		m["ztensor.digest"] = "crc32c"
	}
	return m
}

var fixtures = []fixture{
	{
		file: "dense_dtypes.zt", size: 1119, sha256: "589c943fea7f03cb450ae48d5781282696ed7d7926a2d38f3dd7bda65436df52",
		mOff: 452, mSize: 659, mSHA256: "3bc0d999a08015e621e6117bc3bc819138d96d549982535026e5510179169495",
		order: []string{"w.f32", "b.f16", "e.bf16", "n.i64", "m.u8", "s.f64", "flags.bool"},
		arrays: []wantArray{
			{"w.f32", snapshot.F32, []int64{2, 3}, "2c7b39d6fab2f8ae8c3629283d950ca95e9a53c2ca10d6912c903697a289f3f1", nil},
			{"b.f16", snapshot.F16, []int64{4}, "d96f99321b4c496e2acafe72b89c856ae274dd019582b8942bd579fcc61c0ee9", nil},
			{"e.bf16", snapshot.BF16, []int64{3}, "45e24ed8841a994293b3a44011f7e7b3222853676b6bfa0e2d26d3436d78a5ea", map[string]string{"ztensor.digest": "crc32c"}},
			{"n.i64", snapshot.I64, []int64{5}, "67c21f821a9b604257c1561d6b51b6f0f7348ea0986329d35a8a03193cc431c6", nil},
			{"m.u8", snapshot.U8, []int64{2, 3}, "3f2d1552cdc7483f40dd720c80b900225dfecfd5cae7cd168d79ab6ee5959885", map[string]string{"ztensor.digest": "crc32c"}},
			{"s.f64", snapshot.F64, []int64{}, "b084f39eda8626830f0da93e237409eadcb6558d500c155a438c4dba38d4ba98", nil},
			{"flags.bool", snapshot.Bool, []int64{4}, "52a5c4a10657220cac05c63adfa923c7771c55d868a58ee360eb3d1511985c3e", nil},
		},
		rawOnly:  true,
		zeroCopy: []string{"w.f32", "b.f16", "e.bf16", "n.i64", "m.u8", "s.f64", "flags.bool"},
		checkVals: func(t *testing.T, s *snapshot.Snapshot) {
			f32 := le(t, s, "w.f32")
			wantBytes(t, "w.f32", f32, f32le(1.5, -2, 3.25, 4, 5.5, -6.75))
			wantBytes(t, "e.bf16", le(t, s, "e.bf16"), []byte{0x80, 0x3F, 0x20, 0xC0, 0x49, 0x40})
			wantBytes(t, "flags.bool", le(t, s, "flags.bool"), []byte{1, 0, 1, 1})
			wantBytes(t, "m.u8", le(t, s, "m.u8"), []byte{0, 1, 2, 253, 254, 255})
		},
	},
	{
		file: "zstd_crc32c.zt", size: 711, sha256: "a4daa3df8b15da61c2963b8798e4893c7ea927c5c7781f89d91c95d083d16754",
		mOff: 323, mSize: 380, mSHA256: "25e45c67df2b5868ba438e48c76fd7ccf752cb57aa0ba9504baba17fcb112067",
		order: []string{"big.f32", "seq.i64", "raw.u8"},
		arrays: []wantArray{
			{"big.f32", snapshot.F32, []int64{64, 8}, "624d9363cce4890453ccc8d624c72d5380b39f6010f7a3d0c9895857e0dcc21c", map[string]string{"ztensor.encoding": "zstd", "ztensor.digest": "crc32c"}},
			{"seq.i64", snapshot.I64, []int64{100}, "96bdba67cd0b5e6dc0f9e399f66b17eae627eac812d0620119e87687d789546a", map[string]string{"ztensor.encoding": "zstd"}},
			{"raw.u8", snapshot.U8, []int64{3}, "66a6757151f8ee55db127716c7e3dce0be8074b64e20eda542e5c1e46ca9c41e", map[string]string{"ztensor.digest": "crc32c"}},
		},
		zeroCopy: []string{"raw.u8"},
		checkVals: func(t *testing.T, s *snapshot.Snapshot) {
			var want []float32
			for i := 0; i < 512; i++ {
				want = append(want, float32(i%7))
			}
			wantBytes(t, "big.f32", le(t, s, "big.f32"), f32le(want...))
			var seq []byte
			for i := 0; i < 100; i++ {
				seq = binary.LittleEndian.AppendUint64(seq, uint64(i))
			}
			wantBytes(t, "seq.i64", le(t, s, "seq.i64"), seq)
		},
	},
	{
		file: "sparse_csr_coo.zt", size: 1247, sha256: "31df98c77ca2a27ba7f2f69839ad90fa502403cd77844456038ad76dce23fb84",
		mOff: 606, mSize: 633, mSHA256: "37b7d2db615e055779e77717703d193815a454d58258b3dc18897a6b3d671749",
		order: []string{"csr.f32", "coo.f32", "csr_zstd.i32"},
		arrays: []wantArray{
			{"csr.f32.values", snapshot.F32, []int64{5}, "27ac02b7a8758e3644a3f36ff881f3b955d57c82c6f26af3334800bb0c84ad51", csr("csr.f32", "values", "float32", "[4,5]", false)},
			{"csr.f32.indices", snapshot.U64, []int64{5}, "a50092f3a69dc13db5876afceb99c47ae5bb8dc0b7ccc0b46477ef86179ad152", csr("csr.f32", "indices", "float32", "[4,5]", false)},
			{"csr.f32.indptr", snapshot.U64, []int64{5}, "c8e5dd295e9a13c2d4bd83712ea464b10e42fbb94b74279ee82c2efc36221267", csr("csr.f32", "indptr", "float32", "[4,5]", false)},
			{"coo.f32.values", snapshot.F32, []int64{4}, "a35bc870f96a76d3822da84df3793b5b3b4c37dd919dd458df5c5fba2a27fc1d", coo("values", "float32", "[3,4,5]")},
			{"coo.f32.coords", snapshot.U64, []int64{3, 4}, "773a4c2abf65b5622cc6856bba7e24e9ec8c3c21c604b4b807c7e7286bcdedd5", coo("coords", "float32", "[3,4,5]")},
			{"csr_zstd.i32.values", snapshot.I32, []int64{3}, "df3cb1ae640ffe59ede40fe0ead4268c0e47b1ffd7da0d131ae66d11384bdec9", csr("csr_zstd.i32", "values", "int32", "[3,3]", true)},
			{"csr_zstd.i32.indices", snapshot.U64, []int64{3}, "ab25350e3e65efebe24584461683ecda68725576e825e550038b90e7b1479946", csr("csr_zstd.i32", "indices", "int32", "[3,3]", true)},
			{"csr_zstd.i32.indptr", snapshot.U64, []int64{4}, "a1e03200f1f82ad2c1cec8795c271aaecf98f5aa2d151d2229ec5fa0c177cf77", csr("csr_zstd.i32", "indptr", "int32", "[3,3]", true)},
		},
		zeroCopy: []string{"csr.f32.values", "csr.f32.indices", "csr.f32.indptr", "coo.f32.values", "coo.f32.coords"},
		checkVals: func(t *testing.T, s *snapshot.Snapshot) {
			wantBytes(t, "csr.f32.values", le(t, s, "csr.f32.values"), f32le(1.5, 2, 3, -4, 5.25))
			wantBytes(t, "coo.f32.coords", le(t, s, "coo.f32.coords"), u64le(0, 1, 2, 2, 0, 3, 1, 3, 4, 0, 2, 4))
			wantBytes(t, "csr_zstd.i32.indptr", le(t, s, "csr_zstd.i32.indptr"), u64le(0, 1, 2, 3))
		},
	},
	{
		file: "empty.zt", size: 80, sha256: "93485922cd2faeabed6b3fec77bd2b29106422a2f5b90c884deb321a4e1e71f8",
		mOff: 8, mSize: 64, mSHA256: "62c4f383581070822079620d29b8ef5226e69b9412598ad3e857c0bac8dec08f",
		order:   []string{},
		rawOnly: true,
	},
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeBytes(b []byte) (*snapshot.Snapshot, error) {
	return Codec{}.Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: "test.zt"})
}

func encodeBytes(t testing.TB, s *snapshot.Snapshot) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := (Codec{}).Encode(context.Background(), &buf, s, formats.EncodeOptions{}); err != nil {
		t.Fatalf("encode: %v", err)
	}
	return buf.Bytes()
}

func le(t *testing.T, s *snapshot.Snapshot, name string) []byte {
	t.Helper()
	a := s.Array(name)
	if a == nil {
		t.Fatalf("array %q missing", name)
	}
	b, err := snapshot.ReadAll(a.Data)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wantBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Errorf("%s: bytes %x, want %x", what, got, want)
	}
}

func f32le(v ...float32) []byte {
	var b []byte
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

func u64le(v ...uint64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// TestFixturesMatchShared makes sure testdata/ is a faithful copy.
func TestFixturesMatchShared(t *testing.T) {
	for _, f := range fixtures {
		local := readFixture(t, f.file)
		if len(local) != f.size || sha(local) != f.sha256 {
			t.Errorf("%s: testdata copy has %d bytes sha256 %s, EXPECTED.md says %d %s", f.file, len(local), sha(local), f.size, f.sha256)
		}
		shared, err := os.ReadFile(filepath.Join(fixtureDir, f.file))
		if err != nil {
			t.Logf("shared fixture not available: %v", err)
			continue
		}
		if !bytes.Equal(local, shared) {
			t.Errorf("%s: testdata copy differs from %s", f.file, fixtureDir)
		}
	}
}

// readerAtOnly hides the memory behind a ReaderAt so Decode takes the
// streaming (non zero-copy) path.
type readerAtOnly struct{ r io.ReaderAt }

func (r readerAtOnly) ReadAt(p []byte, off int64) (int, error) { return r.r.ReadAt(p, off) }

func TestDecodeFixtures(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.file, func(t *testing.T) {
			b := readFixture(t, f.file)
			for _, path := range []string{"bytes", "readerat"} {
				var r io.ReaderAt = snapshot.Bytes(b)
				if path == "readerat" {
					r = readerAtOnly{bytes.NewReader(b)}
				}
				s, err := Codec{}.Decode(context.Background(), r, int64(len(b)), formats.DecodeOptions{Name: f.file})
				if err != nil {
					t.Fatalf("%s: decode: %v", path, err)
				}
				checkSnapshot(t, f, s)
				if err := s.Validate(); err != nil {
					t.Errorf("%s: Validate: %v", path, err)
				}
				if path == "bytes" {
					for _, name := range f.zeroCopy {
						d, ok := snapshot.BytesOf(s.Array(name).Data)
						if !ok || len(d) == 0 || !inside(d, b) {
							t.Errorf("array %q: raw data is not a zero-copy slice of the input", name)
						}
					}
				}
			}
		})
	}
}

func inside(sub, whole []byte) bool {
	if len(sub) == 0 {
		return false
	}
	p := &sub[0]
	for i := range whole {
		if &whole[i] == p {
			return i+len(sub) <= len(whole)
		}
	}
	return false
}

func checkSnapshot(t *testing.T, f fixture, s *snapshot.Snapshot) {
	t.Helper()
	if s.Attrs[attrVersion] != "1.0" || s.Attrs[attrGenerator] != "zTensor-Rust v0.1.0" || s.Attrs[attrAttributes] != "{}" {
		t.Errorf("snapshot attrs %v", s.Attrs)
	}
	wantOrder, _ := marshalJSON(f.order)
	if s.Attrs[attrOrder] != string(wantOrder) {
		t.Errorf("order %s, want %s", s.Attrs[attrOrder], wantOrder)
	}
	if len(s.Arrays) != len(f.arrays) {
		t.Fatalf("%d arrays, want %d", len(s.Arrays), len(f.arrays))
	}
	for i, w := range f.arrays {
		a := s.Arrays[i]
		if a.Name != w.name || a.DType != w.dtype || !reflect.DeepEqual(a.Shape, w.shape) {
			t.Errorf("array %d: %s %s %v, want %s %s %v", i, a.Name, a.DType, a.Shape, w.name, w.dtype, w.shape)
		}
		data, err := snapshot.ReadAll(a.Data)
		if err != nil {
			t.Fatal(err)
		}
		if got := sha(data); got != w.sha256 {
			t.Errorf("array %s: sha256 %s, want %s", a.Name, got, w.sha256)
		}
		if len(a.Attrs) != 0 || len(w.attrs) != 0 {
			if !reflect.DeepEqual(a.Attrs, w.attrs) {
				t.Errorf("array %s: attrs %v, want %v", a.Name, a.Attrs, w.attrs)
			}
		}
	}
	if f.checkVals != nil {
		f.checkVals(t, s)
	}
}

// TestManifestBytes: every fixture's manifest is where EXPECTED.md says,
// and parsing then re-emitting it reproduces the stored bytes exactly.
func TestManifestBytes(t *testing.T) {
	for _, f := range fixtures {
		b := readFixture(t, f.file)
		msize := binary.LittleEndian.Uint64(b[len(b)-8:])
		if int(msize) != f.mSize || int64(len(b))-8-int64(msize) != f.mOff {
			t.Fatalf("%s: manifest at %d size %d, want %d %d", f.file, int64(len(b))-8-int64(msize), msize, f.mOff, f.mSize)
		}
		mb := b[f.mOff : f.mOff+int64(f.mSize)]
		if sha(mb) != f.mSHA256 {
			t.Fatalf("%s: manifest sha256 %s", f.file, sha(mb))
		}
		m, err := parseManifest(mb)
		if err != nil {
			t.Fatalf("%s: %v", f.file, err)
		}
		if got := m.marshal(); !bytes.Equal(got, mb) {
			t.Errorf("%s: re-emitted manifest differs:\n got %x\nwant %x", f.file, got, mb)
		}
	}
	// EXPECTED.md spells out the empty manifest.
	want, _ := hex.DecodeString(strings.ReplaceAll("a4 67 76657273696f6e 63 312e30 69 67656e657261746f72 73 7a54656e736f722d527573742076302e312e30 6a 61747472696275746573 a0 67 74656e736f7273 a0", " ", ""))
	empty := &manifest{Version: DefaultVersion, Generator: DefaultGenerator, Attributes: map[string]string{}, Tensors: map[string]*tensorEntry{}}
	if got := empty.marshal(); !bytes.Equal(got, want) {
		t.Errorf("empty manifest %x, want %x", got, want)
	}
}

func TestCBORIntegers(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{{0, "00"}, {23, "17"}, {24, "1818"}, {64, "1840"}, {255, "18ff"}, {256, "190100"}, {65535, "19ffff"},
		{65536, "1a00010000"}, {1<<32 - 1, "1affffffff"}, {1 << 32, "1b0000000100000000"}, {1<<64 - 1, "1bffffffffffffffff"}} {
		var e cborEnc
		e.uint(c.n)
		if got := hex.EncodeToString(e.b); got != c.want {
			t.Errorf("uint %d: %s, want %s", c.n, got, c.want)
		}
	}
}

// TestRoundTrip: fixture → snapshot → WTXT → Encode → Decode preserves
// everything; raw-only fixtures re-encode to the identical file.
func TestRoundTrip(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.file, func(t *testing.T) {
			b := readFixture(t, f.file)
			s1, err := decodeBytes(b)
			if err != nil {
				t.Fatal(err)
			}
			out := encodeBytes(t, formatstest.SimulateWTXT(t, s1))
			if f.rawOnly && !bytes.Equal(out, b) {
				t.Errorf("re-encoded file differs from the fixture (%d vs %d bytes, sha256 %s)", len(out), len(b), sha(out))
			}
			s2, err := decodeBytes(out)
			if err != nil {
				t.Fatalf("decode re-encoded: %v", err)
			}
			formatstest.Equal(t, s2, s1)
			// Encoding is deterministic, also for zstd components.
			if again := encodeBytes(t, formatstest.SimulateWTXT(t, s2)); !bytes.Equal(again, out) {
				t.Errorf("second re-encode differs from the first")
			}
		})
	}
}

// TestEncodeForeignSnapshot: a snapshot from elsewhere (no ztensor attrs)
// becomes dense raw tensors in snapshot order, with the reference's layout.
func TestEncodeForeignSnapshot(t *testing.T) {
	s := &snapshot.Snapshot{Arrays: []*snapshot.Array{
		{Name: "z", DType: snapshot.F32, Shape: []int64{2}, Data: snapshot.Bytes(f32le(1, 2))},
		{Name: "a", DType: snapshot.I8, Shape: []int64{0}},
		{Name: "m", DType: snapshot.U16, Shape: []int64{}, Data: snapshot.Bytes{7, 0}},
	}}
	out := encodeBytes(t, s)
	m, err := parseManifest(out[len(out)-8-int(binary.LittleEndian.Uint64(out[len(out)-8:])) : len(out)-8])
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]componentEntry{"z": {Offset: 64, Length: 8}, "a": {Offset: 128, Length: 0}, "m": {Offset: 128, Length: 2}}
	for name, c := range want {
		if got := m.Tensors[name].Components["data"]; got != c {
			t.Errorf("%s: %+v, want %+v", name, got, c)
		}
	}
	s2, err := decodeBytes(out)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Attrs[attrOrder] != `["z","a","m"]` {
		t.Errorf("order %s", s2.Attrs[attrOrder])
	}
	// Foreign attributes are lossy unless allowed.
	s.Attrs = map[string]string{"safetensors.metadata": "{}"}
	err = Codec{}.Encode(context.Background(), io.Discard, s, formats.EncodeOptions{})
	if !errors.Is(err, formats.ErrLossy) {
		t.Errorf("foreign snapshot attr: %v, want ErrLossy", err)
	}
	if err := (Codec{}).Encode(context.Background(), io.Discard, s, formats.EncodeOptions{Lossy: true}); err != nil {
		t.Errorf("lossy encode: %v", err)
	}
	s.Attrs = nil
	s.Arrays[0].Attrs = map[string]string{"aero.quant": "x"}
	if err := (Codec{}).Encode(context.Background(), io.Discard, s, formats.EncodeOptions{}); !errors.Is(err, formats.ErrLossy) || !strings.Contains(err.Error(), `"z"`) {
		t.Errorf("foreign array attr: %v, want ErrLossy naming array z", err)
	}
}

// TestNames: names outside WTXT's alphabet, the reserved name and
// collisions get deterministic legal names and survive a round trip.
func TestNames(t *testing.T) {
	s := &snapshot.Snapshot{Arrays: []*snapshot.Array{
		{Name: "ok", DType: snapshot.U8, Shape: []int64{1}, Data: snapshot.Bytes{1}},
		{Name: "x", DType: snapshot.U8, Shape: []int64{1}, Data: snapshot.Bytes{2}, Attrs: map[string]string{"ztensor.name": "layer 1/w€"}},
		{Name: "y", DType: snapshot.U8, Shape: []int64{1}, Data: snapshot.Bytes{3}, Attrs: map[string]string{"ztensor.name": "layer_1/w___"}},
		{Name: "q", DType: snapshot.U8, Shape: []int64{1}, Data: snapshot.Bytes{4}, Attrs: map[string]string{"ztensor.name": "__snapd_attrs__"}},
		{Name: "e", DType: snapshot.U8, Shape: []int64{1}, Data: snapshot.Bytes{5}, Attrs: map[string]string{"ztensor.name": ""}},
	}}
	s1, err := decodeBytes(encodeBytes(t, s))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range s1.Arrays {
		got[a.Name] = a.Attrs["ztensor.name"]
		if !snapshot.PortableName(a.Name) {
			t.Errorf("illegal array name %q", a.Name)
		}
	}
	want := map[string]string{"ok": "", "layer_1/w___": "", "layer_1/w___-2": "layer 1/w€", "__snapd_attrs__-2": "__snapd_attrs__", "_": ""}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
	s2, err := decodeBytes(encodeBytes(t, formatstest.SimulateWTXT(t, s1)))
	if err != nil {
		t.Fatal(err)
	}
	formatstest.Equal(t, s2, s1)
}

// TestSparseAndDigestEncode builds sparse, zstd and sha256 tensors from a
// snapshot and reads them back.
func TestSparseAndDigestEncode(t *testing.T) {
	s := &snapshot.Snapshot{
		Attrs: map[string]string{"ztensor.attributes": `{"license":"MIT","b":"<&>"}`, "ztensor.generator": "snapd test", "ztensor.version": "1.0"},
		Arrays: []*snapshot.Array{
			{Name: "d", DType: snapshot.BF16, Shape: []int64{2, 2}, Data: snapshot.Bytes{1, 2, 3, 4, 5, 6, 7, 8},
				Attrs: map[string]string{"ztensor.encoding": "zstd", "ztensor.digest": "sha256"}},
			{Name: "c.values", DType: snapshot.F64, Shape: []int64{1}, Data: snapshot.Bytes(u64le(42)),
				Attrs: map[string]string{"ztensor.name": "c", "ztensor.format": "sparse_coo", "ztensor.role": "values", "ztensor.dtype": "float64", "ztensor.shape": "[2,3]", "ztensor.digest": "sha256"}},
			{Name: "c.coords", DType: snapshot.U64, Shape: []int64{2, 1}, Data: snapshot.Bytes(u64le(1, 2)),
				Attrs: map[string]string{"ztensor.name": "c", "ztensor.format": "sparse_coo", "ztensor.role": "coords", "ztensor.dtype": "float64", "ztensor.shape": "[2,3]", "ztensor.encoding": "zstd"}},
			{Name: "q.data", DType: snapshot.U8, Shape: []int64{3}, Data: snapshot.Bytes{9, 9, 9},
				Attrs: map[string]string{"ztensor.name": "q", "ztensor.format": "quantized_4bit", "ztensor.role": "data", "ztensor.dtype": "uint8", "ztensor.shape": "[2,3]"}},
			{Name: "q.scale", DType: snapshot.U8, Shape: []int64{2}, Data: snapshot.Bytes{1, 2},
				Attrs: map[string]string{"ztensor.name": "q", "ztensor.format": "quantized_4bit", "ztensor.role": "scale", "ztensor.dtype": "uint8", "ztensor.shape": "[2,3]", "ztensor.digest": "crc32c"}},
		},
	}
	out := encodeBytes(t, s)
	s1, err := decodeBytes(out)
	if err != nil {
		t.Fatal(err)
	}
	if s1.Attrs[attrAttributes] != `{"b":"<&>","license":"MIT"}` || s1.Attrs[attrGenerator] != "snapd test" {
		t.Errorf("attrs %v", s1.Attrs)
	}
	for _, a := range s.Arrays {
		g := s1.Array(a.Name)
		if g == nil {
			t.Fatalf("array %q missing", a.Name)
		}
		gd, _ := snapshot.ReadAll(g.Data)
		wd, _ := snapshot.ReadAll(a.Data)
		if g.DType != a.DType || !reflect.DeepEqual(g.Shape, a.Shape) || !bytes.Equal(gd, wd) || !reflect.DeepEqual(g.Attrs, a.Attrs) {
			t.Errorf("array %s: %s %v %x %v; want %s %v %x %v", a.Name, g.DType, g.Shape, gd, g.Attrs, a.DType, a.Shape, wd, a.Attrs)
		}
	}
	s2, err := decodeBytes(encodeBytes(t, formatstest.SimulateWTXT(t, s1)))
	if err != nil {
		t.Fatal(err)
	}
	formatstest.Equal(t, s2, s1)
}

func TestCodecInterface(t *testing.T) {
	c := New()
	if c.Name() != "ztensor" || !reflect.DeepEqual(c.Extensions(), []string{".zt"}) {
		t.Errorf("name %q extensions %v", c.Name(), c.Extensions())
	}
	for _, f := range fixtures {
		if !c.Sniff(head(readFixture(t, f.file))) {
			t.Errorf("%s: Sniff false", f.file)
		}
	}
	for _, head := range []string{"", "ZTEN100", "ZTEN0001", "\x89ZT2\r\n\x1a\n", "PK\x03\x04"} {
		if c.Sniff([]byte(head)) {
			t.Errorf("Sniff(%q) true", head)
		}
	}
	reg := formats.NewRegistry(c)
	if got, err := reg.ByExtension("model.ZT"); err != nil || got.Name() != "ztensor" {
		t.Errorf("ByExtension: %v %v", got, err)
	}
}

func head(b []byte) []byte {
	if len(b) > formats.SniffLen {
		return b[:formats.SniffLen]
	}
	return b
}
