package torch

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/formats/pickle"
	"github.com/snapd-ml/snapd/snapshot"
)

type expTensor struct {
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	SHA256 string  `json:"sha256"`
}

// torchDTypes: the torch dtype names of EXPECTED.json.
var torchDTypes = torchDTypeNames

// expected reads testdata/EXPECTED.json (a copy of
// shared/fixtures/torch/EXPECTED.json).
func expected(t *testing.T) map[string]map[string]expTensor {
	t.Helper()
	raw, err := os.ReadFile("testdata/EXPECTED.json")
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]expTensor{}
	for file, msg := range top {
		var nested struct {
			Paths map[string]expTensor `json:"tensors_by_path"`
		}
		if json.Unmarshal(msg, &nested) == nil && nested.Paths != nil {
			out[file] = nested.Paths
			continue
		}
		var flat map[string]expTensor
		if err := json.Unmarshal(msg, &flat); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out[file] = flat
	}
	if len(out) < 4 {
		t.Fatalf("EXPECTED.json lists %d files", len(out))
	}
	return out
}

func decodeFile(t *testing.T, path string) *snapshot.Snapshot {
	t.Helper()
	m, err := snapshot.MapFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	c := New()
	head := m.Bytes()[:min(len(m.Bytes()), formats.SniffLen)]
	if !c.Sniff(head) {
		t.Fatalf("%s: Sniff refuses it", path)
	}
	s, err := c.Decode(context.Background(), m, m.Size(), formats.DecodeOptions{Name: filepath.Base(path)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

func digest(t *testing.T, a *snapshot.Array) string {
	t.Helper()
	b, err := snapshot.ReadAll(a.Data)
	if err != nil {
		t.Fatalf("%s: %v", a.Name, err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func checkExpected(t *testing.T, s *snapshot.Snapshot, want map[string]expTensor) {
	t.Helper()
	var names []string
	for _, a := range s.Arrays {
		names = append(names, a.Name)
	}
	var wantNames []string
	for n := range want {
		wantNames = append(wantNames, n)
	}
	sort.Strings(names)
	sort.Strings(wantNames)
	if !reflect.DeepEqual(names, wantNames) {
		t.Fatalf("arrays %v, want %v", names, wantNames)
	}
	for _, a := range s.Arrays {
		w := want[a.Name]
		if a.DType != torchDTypes[w.DType] || !reflect.DeepEqual(a.Shape, append([]int64{}, w.Shape...)) {
			t.Errorf("%s: %s %v, want %s %v", a.Name, a.DType, a.Shape, w.DType, w.Shape)
		}
		if got := digest(t, a); got != w.SHA256 {
			t.Errorf("%s: sha256 %s, want %s", a.Name, got, w.SHA256)
		}
	}
}

// TestFixtures: every fixture written by torch 1.13.1 decodes to exactly
// the tensors of EXPECTED.json.
func TestFixtures(t *testing.T) {
	exp := expected(t)
	for file, want := range exp {
		t.Run(file, func(t *testing.T) {
			s := decodeFile(t, filepath.Join("testdata", file))
			checkExpected(t, s, want)
		})
	}
}

// TestTies: tied tensors are two arrays recorded with one storage.
func TestTies(t *testing.T) {
	for _, f := range []string{"state_dict.pt", "state_dict_legacy.pt"} {
		s := decodeFile(t, filepath.Join("testdata", f))
		a, b := s.Array("emb.weight"), s.Array("head.weight")
		if a == nil || b == nil || a.Attrs[AttrStorage] == "" || a.Attrs[AttrStorage] != b.Attrs[AttrStorage] {
			t.Fatalf("%s: tie not recorded: %v %v", f, a.Attrs, b.Attrs)
		}
		if s.Array("fc.weight").Attrs != nil {
			t.Errorf("%s: untied fc.weight has attrs %v", f, s.Array("fc.weight").Attrs)
		}
	}
	s := decodeFile(t, "testdata/mixed_views.pt")
	st := s.Array("base").Attrs[AttrStorage]
	for _, n := range []string{"row_view", "transposed", "strided"} {
		if s.Array(n).Attrs[AttrStorage] != st {
			t.Errorf("%s: storage %q, want base's %q", n, s.Array(n).Attrs[AttrStorage], st)
		}
	}
}

// encode writes s as .pt bytes.
func encode(t *testing.T, s *snapshot.Snapshot) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := New().Encode(context.Background(), &buf, s, formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func decodeBytes(t *testing.T, b []byte) *snapshot.Snapshot {
	t.Helper()
	s, err := New().Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: "mem.pt"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRewrite: decode → encode → decode gives the same snapshot, and
// encoding is deterministic and a fixed point (encode(decode(encode(x)))
// is byte-identical to encode(x)).
func TestRewrite(t *testing.T) {
	for file := range expected(t) {
		t.Run(file, func(t *testing.T) {
			s := decodeFile(t, filepath.Join("testdata", file))
			pt := encode(t, s)
			if !bytes.Equal(pt, encode(t, s)) {
				t.Fatal("two encodings differ")
			}
			s2 := decodeBytes(t, pt)
			formatstest.EqualSorted(t, s, s2)
			if pt2 := encode(t, s2); !bytes.Equal(pt, pt2) {
				t.Fatal("re-encoding the decoded file changes it")
			}
			checkAlignment(t, pt)
		})
	}
}

// checkAlignment: every member's data starts on a 64-byte boundary.
func checkAlignment(t *testing.T, pt []byte) {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(pt), int64(len(pt)))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range zr.File {
		off, err := f.DataOffset()
		if err != nil || off%64 != 0 || f.Method != zip.Store {
			t.Errorf("%s: data at %d, method %d (%v)", f.Name, off, f.Method, err)
		}
	}
}

// TestEncodeChecks: what Encode refuses, and what Lossy drops.
func TestEncodeChecks(t *testing.T) {
	s := decodeFile(t, "testdata/state_dict.pt")
	ctx := context.Background()
	// An array the tree does not reference.
	s.Arrays = append(s.Arrays, &snapshot.Array{Name: "extra", DType: snapshot.F32, Shape: []int64{1}, Data: snapshot.Bytes(make([]byte, 4))})
	var buf bytes.Buffer
	if err := New().Encode(ctx, &buf, s, formats.EncodeOptions{}); !errors.Is(err, formats.ErrLossy) {
		t.Fatalf("unreferenced array: %v", err)
	}
	if err := New().Encode(ctx, &buf, s, formats.EncodeOptions{Lossy: true}); err != nil {
		t.Fatalf("lossy: %v", err)
	}
	s.Arrays = s.Arrays[:len(s.Arrays)-1]
	// Tied arrays edited apart.
	emb := s.Array("emb.weight")
	b, _ := snapshot.ReadAll(emb.Data)
	b = append([]byte{}, b...)
	b[0] ^= 1
	emb.Data = snapshot.Bytes(b)
	if err := New().Encode(ctx, &buf, s, formats.EncodeOptions{}); !errors.Is(err, ErrInvalidSnapshot) || !strings.Contains(err.Error(), "bytes differ") {
		t.Fatalf("diverged tie: %v", err)
	}
	// A dtype torch 1.13 has no storage for: written as torch 2.x does
	// (_rebuild_tensor_v3 of an untyped storage).
	u := &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "u", DType: snapshot.U32, Shape: []int64{1}, Data: snapshot.Bytes([]byte{1, 2, 3, 4})}}}
	buf.Reset()
	if err := New().Encode(ctx, &buf, u, formats.EncodeOptions{}); err != nil {
		t.Fatalf("u32: %v", err)
	}
	if !bytes.Contains(buf.Bytes(), []byte("_rebuild_tensor_v3")) || !bytes.Contains(buf.Bytes(), []byte("torch\nuint32\n")) {
		t.Fatal("u32 not written through _rebuild_tensor_v3")
	}
	u2, err := New().Decode(ctx, snapshot.Bytes(buf.Bytes()), int64(buf.Len()), formats.DecodeOptions{})
	if err != nil || u2.Array("u").DType != snapshot.U32 {
		t.Fatalf("u32 back: %v", err)
	}
	// A storage size that overflows.
	o := decodeFile(t, "testdata/state_dict.pt")
	o.Array("emb.weight").Attrs[AttrStorageNumel] = "4611686018427387905"
	if err := New().Encode(ctx, &buf, o, formats.EncodeOptions{}); !errors.Is(err, ErrInvalidSnapshot) {
		t.Fatalf("overflowing storage_numel: %v", err)
	}
	// Hostile attributes.
	for _, tree := range []string{`[1]`, `{"int":"x"}`, `{"odict":[[{"tensor":"nope"},null]]}`, `{"tensor":"missing"}`, strings.Repeat(`{"list":[`, 2000) + strings.Repeat(`]}`, 2000)} {
		bad := &snapshot.Snapshot{Attrs: map[string]string{AttrTree: tree}}
		if err := New().Encode(ctx, &buf, bad, formats.EncodeOptions{}); err == nil {
			t.Errorf("tree %.40s accepted", tree)
		}
	}
}

// relayout rewrites a torch 1.13 zip fixture as torch 2.x lays it out
// (directory "archive", byteorder, .format_version, .data/version,
// .data/serialization_id records); with big it stores every storage
// big-endian and says so in byteorder.
func relayout(t *testing.T, path string, big bool) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	add := func(name string, data []byte) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: "archive/" + name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	order := "little"
	if big {
		order = "big"
	}
	add("byteorder", []byte(order))
	for _, f := range zr.File {
		rc, _ := f.Open()
		data, _ := io.ReadAll(rc)
		rc.Close()
		rel := f.Name[strings.IndexByte(f.Name, '/')+1:]
		if big && strings.HasPrefix(rel, "data/") {
			swapBytes(data, storageElemSize(t, zr, rel))
		}
		add(rel, data)
	}
	add(".format_version", []byte("1"))
	add(".data/version", []byte("3\n"))
	add(".data/serialization_id", []byte("1234567890123456789012345678901234567890"))
	zw.Close()
	return out.Bytes()
}

// storageElemSize finds the element size of storage member rel ("data/3")
// from the class in its persistent id in data.pkl.
func storageElemSize(t *testing.T, zr *zip.Reader, rel string) int {
	t.Helper()
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/data.pkl") {
			rc, _ := f.Open()
			pkl, _ := io.ReadAll(rc)
			rc.Close()
			var es int
			persist := func(pid any) (any, error) {
				tp := pid.(*pickle.Tuple)
				dt := tp.Items[1].(*pickle.Global).Value.(storageClass).dtype
				if "data/"+tp.Items[2].(string) == rel {
					es = dt.Size()
				}
				return &storageVal{key: tp.Items[2].(string), dtype: dt}, nil
			}
			if _, err := pickle.Load(context.Background(), pkl, pickle.Options{Resolve: resolve, Persistent: persist}); err != nil {
				t.Fatal(err)
			}
			return es
		}
	}
	t.Fatal("no data.pkl")
	return 0
}

// TestTorch2Layout: the fixtures laid out as torch 2.x writes them, and
// with big-endian storages, decode to the same tensors.
func TestTorch2Layout(t *testing.T) {
	exp := expected(t)
	for _, file := range []string{"state_dict.pt", "mixed_views.pt", "training_checkpoint.pt"} {
		for _, big := range []bool{false, true} {
			b := relayout(t, filepath.Join("testdata", file), big)
			s, err := New().Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: file})
			if err != nil {
				t.Fatalf("%s big=%v: %v", file, big, err)
			}
			checkExpected(t, s, exp[file])
		}
	}
}
