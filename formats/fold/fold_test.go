package fold

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/snapshot"
)

// Expected values from fixtures/fold/EXPECTED.md.
const (
	shaWF32  = "2c7b39d6fab2f8ae8c3629283d950ca95e9a53c2ca10d6912c903697a289f3f1"
	shaBF16  = "d96f99321b4c496e2acafe72b89c856ae274dd019582b8942bd579fcc61c0ee9"
	shaNI64  = "67c21f821a9b604257c1561d6b51b6f0f7348ea0986329d35a8a03193cc431c6"
	shaMU8   = "3f2d1552cdc7483f40dd720c80b900225dfecfd5cae7cd168d79ab6ee5959885"
	shaLLM   = "fbcbab4da210901896d36a3a9e8c274e1d461ae5badf208b59b27e4c63c74e02"
	shaLLM26 = "12f550a4fb7c9490da7c937498b01942975ed955d7cc4ff9fe468e0e2bea573e"
)

type wantArray struct {
	dtype snapshot.DType
	shape []int64
	sha   string
}

var setA = map[string]wantArray{
	"nuclear_arrays/w_f32": {snapshot.F32, []int64{2, 3}, shaWF32},
	"nuclear_arrays/b_f16": {snapshot.F16, []int64{4}, shaBF16},
	"nuclear_arrays/n_i64": {snapshot.I64, []int64{5}, shaNI64},
	"nuclear_arrays/m_u8":  {snapshot.U8, []int64{2, 3}, shaMU8},
}

func withSet(extra map[string]wantArray, base map[string]wantArray) map[string]wantArray {
	out := map[string]wantArray{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

var eccArrays = map[string]wantArray{
	"llm_manifest":         {snapshot.U8, []int64{26}, shaLLM26},
	"nuclear_arrays/w_f32": {snapshot.F32, []int64{8, 8}, "a48e1749a86d4a9a2293e837c3f5f6671ca1e67f5137cc2f9a34de6d5f1549f0"},
	"nuclear_arrays/m_u8":  {snapshot.U8, []int64{10}, "1f825aa2f0020ef7cf91dfa30da4668d791c5d4824fc8e41354b89ec05795ab3"},
}

var decodeOpts = formats.DecodeOptions{Name: "test.fold"}

var fixtures = []struct {
	file     string
	size     int64
	sha      string
	arrays   map[string]wantArray
	hashForm string
	eccNote  bool // the spec-era ECC inconsistency is reported
}{
	{"basic_nocomp.fold", 2126, "bf9bec82b578aaa1e59a7181d102fa78b09fb558f713ee733694fd133770d73c",
		withSet(map[string]wantArray{"llm_manifest": {snapshot.U8, []int64{75}, shaLLM}}, setA), "hex", false},
	{"zstd_tsav_npz.fold", 2756, "2afa0728b05488603cf9207c96666a14ee85d1ce4826e6aa2afeb5d67f160e5a",
		withSet(map[string]wantArray{
			"llm_manifest":                  {snapshot.U8, []int64{75}, shaLLM},
			"metrics":                       {snapshot.U8, []int64{24}, "47f9049f6c7e206dcc4457a51df8df5e61d60b6a0f4ee89d806d77617ac5d987"},
			"torch_state/state_dict.w_f32":  {snapshot.F32, []int64{2, 3}, shaWF32},
			"torch_state/state_dict.e_bf16": {snapshot.BF16, []int64{3}, "45e24ed8841a994293b3a44011f7e7b3222853676b6bfa0e2d26d3436d78a5ea"},
			"torch_state/state_dict.n_i64":  {snapshot.I64, []int64{3}, "d6c3f800c1b53a78e97d97be229f84126df8d4c2c3c4d2ae3165b1dbb5f34a19"},
		}, setA), "hex", false},
	{"ecc_rs32_spec_era.mind", 1940, "03783f24c3f50acd31e8d3f8713955074036a1adec36b6e3eca4b1da2ec9e069", eccArrays, "hex", true},
	{"ecc_rs32_head.mind", 2203, "2055f2e2c16a1ce54c8adf4f55c7cb0f15545f7688f226f7a8fc6015337cf89f", eccArrays, "sha256", false},
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeBytes(t testing.TB, b []byte) *snapshot.Snapshot {
	t.Helper()
	s, _ := decodeDiag(t, b)
	return s
}

// decodeDiag decodes b and returns the reader's diagnostics, one string
// each.
func decodeDiag(t testing.TB, b []byte) (*snapshot.Snapshot, string) {
	t.Helper()
	var diags []string
	s, err := New().Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{
		Diagnostic: func(d formats.Diagnostic) { diags = append(diags, d.String()) }})
	if err != nil {
		t.Fatal(err)
	}
	return s, strings.Join(diags, "\n")
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func data(t testing.TB, a *snapshot.Array) []byte {
	t.Helper()
	b, err := snapshot.ReadAll(a.Data)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFixturesMatchExpected(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.file, func(t *testing.T) {
			b := readFixture(t, fx.file)
			if int64(len(b)) != fx.size || sha(b) != fx.sha {
				t.Fatalf("fixture copy differs from EXPECTED.md")
			}
			if !New().Sniff(b[:formats.SniffLen]) {
				t.Fatal("Sniff rejects fixture")
			}
			s, diag := decodeDiag(t, b)
			if err := s.Validate(); err != nil {
				t.Fatal(err)
			}
			for name, w := range fx.arrays {
				a := s.Array(name)
				if a == nil {
					t.Fatalf("array %q missing; have %v", name, arrayNames(s))
				}
				if a.DType != w.dtype || !equalShape(a.Shape, w.shape) {
					t.Errorf("%s: %s%v, want %s%v", name, a.DType, a.Shape, w.dtype, w.shape)
				}
				if got := sha(data(t, a)); got != w.sha {
					t.Errorf("%s: sha256 %s, want %s", name, got, w.sha)
				}
			}
			if got := s.Attrs[AttrHashForm]; got != fx.hashForm {
				t.Errorf("hash form %q, want %q", got, fx.hashForm)
			}
			// ECC reports are diagnostics, never snapshot attributes
			// (they broke X -> WTXT -> X fixed points).
			if note := diag != ""; note != fx.eccNote {
				t.Errorf("ecc diagnostics %q, want present=%v", diag, fx.eccNote)
			}
			if fx.eccNote && !strings.Contains(diag, "blocks 0,1,2 ") {
				t.Errorf("spec-era ECC report %q does not name blocks 0,1,2", diag)
			}
			for k := range s.Attrs {
				if strings.Contains(k, "ecc_status") {
					t.Errorf("diagnostic attribute %s stored in the snapshot", k)
				}
			}
		})
	}
}

// TestZeroCopy: uncompressed tensor data aliases the input bytes.
func TestZeroCopy(t *testing.T) {
	b := readFixture(t, "basic_nocomp.fold")
	s := decodeBytes(t, b)
	d, ok := snapshot.BytesOf(s.Array("nuclear_arrays/w_f32").Data)
	if !ok || len(d) == 0 {
		t.Fatal("not memory-backed")
	}
	base := &b[0]
	p := &d[0]
	if uintptrOf(p) < uintptrOf(base) || uintptrOf(p) >= uintptrOf(base)+uintptr(len(b)) {
		t.Fatal("tensor data was copied, want a sub-slice of the input")
	}
}

func TestValuesSetA(t *testing.T) {
	s := decodeBytes(t, readFixture(t, "basic_nocomp.fold"))
	w := data(t, s.Array("nuclear_arrays/w_f32"))
	want := []float32{1.5, -2, 3.25, 4, 5.5, -6.75}
	for i, v := range want {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:])); got != v {
			t.Fatalf("w_f32[%d] = %v, want %v", i, got, v)
		}
	}
	n := data(t, s.Array("nuclear_arrays/n_i64"))
	if got := int64(binary.LittleEndian.Uint64(n)); got != math.MinInt64 {
		t.Fatalf("n_i64[0] = %d", got)
	}
}

func arrayNames(s *snapshot.Snapshot) []string {
	var out []string
	for _, a := range s.Arrays {
		out = append(out, a.Name)
	}
	return out
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// viaWTXT simulates what the WTXT writer and reader preserve: names,
// dtypes, shapes, bytes (copied), attrs through EncodeAttrs/ApplyAttrs,
// arrays sorted by name.
func viaWTXT(t testing.TB, s *snapshot.Snapshot) *snapshot.Snapshot {
	t.Helper()
	doc, err := snapshot.EncodeAttrs(s)
	if err != nil {
		t.Fatal(err)
	}
	out := &snapshot.Snapshot{}
	for _, a := range s.Sorted() {
		out.Arrays = append(out.Arrays, &snapshot.Array{Name: a.Name, DType: a.DType, Shape: append([]int64(nil), a.Shape...),
			Data: snapshot.Bytes(append([]byte(nil), data(t, a)...))})
	}
	if doc != nil {
		if err := snapshot.ApplyAttrs(out, doc); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func encode(t testing.TB, s *snapshot.Snapshot) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := New().Encode(context.Background(), &buf, s, formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// chunkPayloads returns name, ctype, flags, uncompressed payload and
// ecc_algo of every chunk by decoding the file's structure directly.
type rawChunk struct {
	name, ctype, algo string
	flags             uint32
	payload           []byte
}

func rawChunks(t testing.TB, b []byte) ([]rawChunk, *jvalue) {
	t.Helper()
	indexOff := binary.BigEndian.Uint64(b[12:])
	indexLen := binary.BigEndian.Uint64(b[20:])
	root, err := parseJSON(b[indexOff : indexOff+indexLen])
	if err != nil {
		t.Fatal(err)
	}
	var out []rawChunk
	for _, c := range root.get("chunks").arr {
		off, _ := c.get("offset").asInt64()
		h := b[off : off+32]
		comp := binary.BigEndian.Uint64(h[16:])
		stored := b[off+32 : off+32+int64(comp)]
		rc := rawChunk{ctype: string(h[:4]), flags: binary.BigEndian.Uint32(h[4:])}
		rc.name, _ = c.get("name").asString()
		rc.algo, _ = c.get("ecc_algo").asString()
		rc.payload = stored
		if rc.flags == 1 {
			p, err := formats.NewBudget(1<<30).DecompressZstd(context.Background(), bytes.NewReader(stored), int64(binary.BigEndian.Uint64(h[8:])), true, "test")
			if err != nil {
				t.Fatal(err)
			}
			rc.payload = p
		}
		out = append(out, rc)
	}
	return out, root
}

func TestRoundTrip(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.file, func(t *testing.T) {
			orig := readFixture(t, fx.file)
			re := checkRoundTrip(t, orig)
			// Uncompressed files with correct ECC re-encode byte for byte.
			if fx.file == "basic_nocomp.fold" || fx.file == "ecc_rs32_head.mind" {
				if !bytes.Equal(orig, re) {
					t.Fatalf("re-encoded file differs from the reference file")
				}
			}
		})
	}
}

// checkRoundTrip decodes orig, passes the snapshot through a simulated
// WTXT, re-encodes and checks that the rebuilt file decodes to the same
// snapshot and carries the same chunks (payload bytes, names, ctypes,
// flags, ECC level), metadata and created_at_unix. It returns the rebuilt
// file.
func checkRoundTrip(t *testing.T, orig []byte) []byte {
	t.Helper()
	s1 := decodeBytes(t, orig)
	re := encode(t, viaWTXT(t, s1))
	s2 := decodeBytes(t, re)
	formatstest.EqualSorted(t, s1, s2)
	c1, r1 := rawChunks(t, orig)
	c2, r2 := rawChunks(t, re)
	if len(c1) != len(c2) {
		t.Fatalf("%d chunks, want %d", len(c2), len(c1))
	}
	for i := range c1 {
		a, b := c1[i], c2[i]
		if a.name != b.name || a.ctype != b.ctype || a.flags != b.flags || a.algo != b.algo || !bytes.Equal(a.payload, b.payload) {
			t.Fatalf("chunk %d: %s/%s/%d/%s vs %s/%s/%d/%s, payload equal %v", i, a.name, a.ctype, a.flags, a.algo, b.name, b.ctype, b.flags, b.algo, bytes.Equal(a.payload, b.payload))
		}
	}
	m1 := r1.get("metadata").without("manifest_hash").without("chunk_hashes")
	m2 := r2.get("metadata").without("manifest_hash").without("chunk_hashes")
	if indexJSON(m1) != indexJSON(m2) || indexJSON(r1.get("created_at_unix")) != indexJSON(r2.get("created_at_unix")) {
		t.Fatalf("metadata differs:\n%s\n%s", indexJSON(m1), indexJSON(m2))
	}
	// Re-encoding the rebuilt file is stable.
	if re2 := encode(t, viaWTXT(t, s2)); !bytes.Equal(re, re2) {
		t.Fatal("second re-encode differs from the first")
	}
	return re
}

// TestSpecEraECCFixed: re-encoding writes correct per-block parity, so the
// rebuilt file equals ecc_rs32_spec_era.mind except for the 96 stale ECC
// bytes of nuclear_arrays blocks 0–2.
func TestSpecEraECCFixed(t *testing.T) {
	orig := readFixture(t, "ecc_rs32_spec_era.mind")
	re := encode(t, viaWTXT(t, decodeBytes(t, orig)))
	if len(re) != len(orig) {
		t.Fatalf("size %d, want %d", len(re), len(orig))
	}
	var diff []int
	for i := range orig {
		if orig[i] != re[i] {
			diff = append(diff, i)
		}
	}
	if len(diff) == 0 || diff[0] < 920 || diff[len(diff)-1] >= 920+96 {
		t.Fatalf("differences at %v, want only inside [920, 1016)", diff)
	}
	// And the head fixture holds exactly these ECC bytes.
	head := readFixture(t, "ecc_rs32_head.mind")
	if !bytes.Equal(re[920:1048], head[920:1048]) {
		t.Fatal("rebuilt ECC differs from the correct parity in ecc_rs32_head.mind")
	}
}

func TestECCCorrection(t *testing.T) {
	orig := readFixture(t, "ecc_rs32_head.mind")
	want := decodeBytes(t, orig)
	// Three single-byte errors in three blocks of nuclear_arrays (payload
	// at [150, 920)), plus 16 errors (capacity) in block 1, plus errors in
	// llm_manifest's payload and in its parity.
	b := append([]byte(nil), orig...)
	for _, p := range []int{150 + 5, 150 + 300, 150 + 700, 60 + 3, 86 + 1} {
		b[p] ^= 0x5a
	}
	for i := 0; i < 15; i++ {
		b[150+223+10+i*7] ^= byte(i + 1)
	}
	s, diag := decodeDiag(t, b)
	formatstest.EqualSorted(t, want, s)
	if !strings.Contains(diag, "corrected") {
		t.Fatalf("ecc diagnostics %q", diag)
	}
	// 17 errors in one block: beyond rs(32) capacity → checksum error.
	b = append([]byte(nil), orig...)
	for i := 0; i < 17; i++ {
		b[150+i*3] ^= 0xff
	}
	_, err := New().Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: "x.mind"})
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("17 errors in one block: %v, want ErrChecksum", err)
	}
}

func TestCorruptionDetected(t *testing.T) {
	orig := readFixture(t, "basic_nocomp.fold")
	cases := map[string]func(b []byte){
		"magic":        func(b []byte) { b[0] = 'X' },
		"header_len":   func(b []byte) { b[11] = 29 },
		"index_len":    func(b []byte) { binary.BigEndian.PutUint64(b[20:], 1<<40) },
		"payload byte": func(b []byte) { b[28+32+5] ^= 1 },
		"index json":   func(b []byte) { b[1233] = '[' },
		"manifest":     func(b []byte) { i := bytes.Index(b, []byte(`"model_type":"Fixture"`)); b[i+14] = 'f' },
		"chunk hash": func(b []byte) {
			i := bytes.Index(b, []byte(`"llm_manifest":"fbcb`))
			b[i+16] = 'e'
		},
		"comp_len": func(b []byte) { binary.BigEndian.PutUint64(b[28+16:], 1<<35) },
	}
	for name, mut := range cases {
		b := append([]byte(nil), orig...)
		mut(b)
		_, err := New().Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: "t.fold"})
		if err == nil {
			t.Errorf("%s: corruption not detected", name)
			continue
		}
		if !strings.HasPrefix(err.Error(), "t.fold: ") {
			t.Errorf("%s: error %q does not name the file", name, err)
		}
	}
}

func TestTruncationNeverPanics(t *testing.T) {
	for _, fx := range fixtures {
		orig := readFixture(t, fx.file)
		for n := 0; n < len(orig); n++ {
			b := orig[:n]
			if _, err := New().Decode(context.Background(), snapshot.Bytes(b), int64(n), formats.DecodeOptions{}); err == nil {
				t.Fatalf("%s truncated to %d bytes decoded without error", fx.file, n)
			}
		}
	}
}

// TestFileBackedReader: a non-memory ReaderAt decodes to the same snapshot.
func TestFileBackedReader(t *testing.T) {
	for _, fx := range fixtures {
		b := readFixture(t, fx.file)
		s1 := decodeBytes(t, b)
		s2, err := New().Decode(context.Background(), bytes.NewReader(b), int64(len(b)), formats.DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		formatstest.EqualSorted(t, s1, s2)
	}
}

// TestForeignSnapshot: arrays without FOLD attributes go to a STEN chunk.
func TestForeignSnapshot(t *testing.T) {
	s := &snapshot.Snapshot{Arrays: []*snapshot.Array{
		{Name: "b", DType: snapshot.BF16, Shape: []int64{2}, Data: snapshot.Bytes{1, 2, 3, 4}},
		{Name: "a/x", DType: snapshot.F32, Shape: []int64{}, Data: snapshot.Bytes{0, 0, 128, 63}},
		{Name: "z", DType: snapshot.I64, Shape: []int64{0, 3}, Data: snapshot.Bytes{}},
	}}
	b := encode(t, s)
	s2 := decodeBytes(t, b)
	for _, a := range s.Arrays {
		got := s2.Array("torch_state/" + a.Name)
		if got == nil || got.DType != a.DType || !equalShape(got.Shape, a.Shape) || !bytes.Equal(data(t, got), data(t, a)) {
			t.Fatalf("array %s not preserved: %+v", a.Name, got)
		}
	}
	// Deterministic output and stable re-encoding.
	if !bytes.Equal(b, encode(t, s)) {
		t.Fatal("encoding is not deterministic")
	}
	b2 := encode(t, viaWTXT(t, s2))
	if !bytes.Equal(b, b2) {
		t.Fatal("decode→encode of a snapd-written file changed it")
	}
}

func TestModifiedArrayRefused(t *testing.T) {
	s := viaWTXT(t, decodeBytes(t, readFixture(t, "basic_nocomp.fold")))
	a := s.Array("nuclear_arrays/w_f32")
	d := data(t, a)
	d[0] ^= 1
	var buf bytes.Buffer
	err := New().Encode(context.Background(), &buf, s, formats.EncodeOptions{})
	if !errors.Is(err, ErrModified) {
		t.Fatalf("got %v, want ErrModified", err)
	}
}

func TestSortedKeysOrderIndependent(t *testing.T) {
	// The chunk order survives WTXT's name sort.
	s := viaWTXT(t, decodeBytes(t, readFixture(t, "zstd_tsav_npz.fold")))
	names := arrayNames(s)
	if !sort.StringsAreSorted(names) {
		t.Fatal("viaWTXT did not sort")
	}
	c, _ := rawChunks(t, encode(t, s))
	var got []string
	for _, x := range c {
		got = append(got, x.name)
	}
	if strings.Join(got, ",") != "torch_state,llm_manifest,metrics,nuclear_arrays" {
		t.Fatalf("chunk order %v", got)
	}
}

func uintptrOf(p *byte) uintptr { return uintptr(unsafe.Pointer(p)) }

// withIndex returns b with its index replaced by edit(index).
func withIndex(t *testing.T, b []byte, edit func(root *jvalue)) []byte {
	t.Helper()
	off := binary.BigEndian.Uint64(b[12:])
	n := binary.BigEndian.Uint64(b[20:])
	root, err := parseJSON(b[off : off+n])
	if err != nil {
		t.Fatal(err)
	}
	edit(root)
	idx := indexJSON(root)
	out := append([]byte(nil), b[:off]...)
	binary.BigEndian.PutUint64(out[20:], uint64(len(idx)))
	return append(out, idx...)
}

func TestHashForms(t *testing.T) {
	orig := readFixture(t, "basic_nocomp.fold")
	// hmac-sha256 values cannot be checked without the key: accepted.
	hm := withIndex(t, orig, func(root *jvalue) {
		meta := root.get("metadata")
		meta.set("manifest_hash", jstr("hmac-sha256:00ff"))
		for _, c := range root.get("chunks").arr {
			c.set("sha256", jstr("hmac-sha256:abcd"))
		}
		meta.set("chunk_hashes", &jvalue{kind: jObject, obj: []jmember{{"llm_manifest", jstr("hmac-sha256:1234")}}})
	})
	s := decodeBytes(t, hm)
	if s.Attrs[AttrHashForm] != "sha256" {
		t.Fatalf("hash form %q", s.Attrs[AttrHashForm])
	}
	// Upper-case hex is accepted; a wrong prefixed digest is not.
	up := withIndex(t, orig, func(root *jvalue) {
		c := root.get("chunks").arr[0]
		h, _ := c.get("sha256").asString()
		c.set("sha256", jstr(strings.ToUpper(h)))
	})
	decodeBytes(t, up)
	bad := withIndex(t, orig, func(root *jvalue) {
		root.get("chunks").arr[0].set("sha256", jstr("sha256:"+strings.Repeat("0", 64)))
	})
	if _, err := New().Decode(context.Background(), snapshot.Bytes(bad), int64(len(bad)), decodeOpts); !errors.Is(err, ErrChecksum) {
		t.Fatalf("wrong digest: %v", err)
	}
	for _, v := range []string{"sha256:xyz", "md5:00", "", "hmac-sha256:"} {
		m := withIndex(t, orig, func(root *jvalue) { root.get("chunks").arr[0].set("sha256", jstr(v)) })
		if _, err := New().Decode(context.Background(), snapshot.Bytes(m), int64(len(m)), decodeOpts); !errors.Is(err, ErrFormat) {
			t.Errorf("sha256 %q: %v, want ErrFormat", v, err)
		}
	}
}

func TestIndexSemantics(t *testing.T) {
	orig := readFixture(t, "basic_nocomp.fold")
	cases := map[string]struct {
		edit func(root *jvalue)
		want error
	}{
		"format":    {func(r *jvalue) { r.set("format", jstr("mind")) }, ErrFormat},
		"encrypted": {func(r *jvalue) { r.get("chunks").arr[0].set("encrypted", &jvalue{kind: jBool, b: true}) }, ErrUnsupported},
		"ecc_algo":  {func(r *jvalue) { r.get("chunks").arr[0].set("ecc_algo", jstr("ldpc")) }, ErrFormat},
		"offset":    {func(r *jvalue) { r.get("chunks").arr[0].set("offset", jint(1<<40)) }, ErrTruncated},
		"no chunks": {func(r *jvalue) { r.set("chunks", jstr("x")) }, ErrFormat},
	}
	for name, c := range cases {
		b := withIndex(t, orig, c.edit)
		if _, err := New().Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), decodeOpts); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	// Duplicate chunk names: both chunks are read, chunk_hashes names the
	// last, array names are made unique, and the file round-trips.
	dup := withIndex(t, orig, func(r *jvalue) {
		r.get("chunks").arr[1].set("name", jstr("llm_manifest"))
		r.get("metadata").set("chunk_hashes", &jvalue{kind: jObject, obj: []jmember{{"llm_manifest", r.get("chunks").arr[1].get("sha256")}}})
		r.get("metadata").set("manifest_hash", jstr(func() string {
			sum := sha256.Sum256([]byte(canonicalJSON(r.get("metadata").without("manifest_hash"))))
			return hex.EncodeToString(sum[:])
		}()))
	})
	s := decodeBytes(t, dup)
	if s.Array("llm_manifest") == nil || s.Array("llm_manifest.1") == nil || s.Array("llm_manifest/w_f32") == nil {
		t.Fatalf("duplicate names: %v", arrayNames(s))
	}
	checkRoundTrip(t, dup)
}

func TestContextCanceled(t *testing.T) {
	b := readFixture(t, "basic_nocomp.fold")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := New().Decode(ctx, snapshot.Bytes(b), int64(len(b)), decodeOpts); !errors.Is(err, context.Canceled) {
		t.Fatalf("decode: %v", err)
	}
	s := decodeBytes(t, b)
	if err := New().Encode(ctx, &bytes.Buffer{}, s, formats.EncodeOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("encode: %v", err)
	}
}

func TestCodecIdentity(t *testing.T) {
	c := New()
	if c.Name() != "fold" || strings.Join(c.Extensions(), ",") != ".fold,.mind" {
		t.Fatalf("%s %v", c.Name(), c.Extensions())
	}
	if c.Sniff([]byte("FOLDv2\x00\x00")) || c.Sniff(nil) {
		t.Fatal("Sniff accepts a wrong magic")
	}
}

func TestForeignAttrsLossy(t *testing.T) {
	s := &snapshot.Snapshot{
		Attrs:  map[string]string{"safetensors.metadata": "{}"},
		Arrays: []*snapshot.Array{{Name: "a", DType: snapshot.U8, Shape: []int64{1}, Data: snapshot.Bytes{7}, Attrs: map[string]string{"ztensor.format": "dense"}}},
	}
	err := New().Encode(context.Background(), &bytes.Buffer{}, s, formats.EncodeOptions{})
	if !errors.Is(err, formats.ErrLossy) {
		t.Fatalf("got %v, want ErrLossy", err)
	}
	var buf bytes.Buffer
	if err := New().Encode(context.Background(), &buf, s, formats.EncodeOptions{Lossy: true}); err != nil {
		t.Fatal(err)
	}
	if a := decodeBytes(t, buf.Bytes()).Array("torch_state/a"); a == nil || data(t, a)[0] != 7 {
		t.Fatal("array lost")
	}
}
