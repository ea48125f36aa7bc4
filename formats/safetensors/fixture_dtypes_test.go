package safetensors

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

const torch2 = "../../../shared/fixtures/torch2/"

// torchDTypes maps the torch dtype names of EXPECTED.json to snapshot
// dtypes.
var torchDTypes = map[string]snapshot.DType{
	"float64": snapshot.F64, "float32": snapshot.F32, "float16": snapshot.F16, "bfloat16": snapshot.BF16,
	"int64": snapshot.I64, "int32": snapshot.I32, "int16": snapshot.I16, "int8": snapshot.I8, "uint8": snapshot.U8,
	"bool": snapshot.Bool, "float8_e4m3fn": snapshot.F8E4M3, "float8_e5m2": snapshot.F8E5M2,
	"float8_e8m0fnu": snapshot.F8E8M0, "complex64": snapshot.C64, "complex128": snapshot.C128,
}

// TestTorch2DTypes: the safetensors library's own file with F8_E4M3 and
// F8_E5M2 tensors decodes to f8e4m3 / f8e5m2 arrays of the real shape
// (not bytes), every tensor matching EXPECTED.json (dtype, shape, SHA-256
// of the raw bytes); safetensors -> WTXT -> safetensors gives the same
// tensors and metadata, and encodes again to the same bytes.
func TestTorch2DTypes(t *testing.T) {
	raw, err := os.ReadFile(torch2 + "st/dtypes.safetensors")
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("shared fixtures not present")
	} else if err != nil {
		t.Fatal(err)
	}
	ej, err := os.ReadFile(torch2 + "EXPECTED.json")
	if err != nil {
		t.Fatal(err)
	}
	var expected map[string]map[string][3]json.RawMessage
	if err := json.Unmarshal(ej, &expected); err != nil {
		t.Fatal(err)
	}
	want := expected["st/dtypes.safetensors"]
	s, err := New().Decode(context.Background(), snapshot.Bytes(raw), int64(len(raw)), formats.DecodeOptions{Name: "dtypes.safetensors"})
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, s *snapshot.Snapshot) {
		t.Helper()
		if len(s.Arrays) != len(want) {
			t.Fatalf("%d arrays, EXPECTED has %d", len(s.Arrays), len(want))
		}
		for name, w := range want {
			var dt, sum string
			var shape []int64
			json.Unmarshal(w[0], &dt)
			json.Unmarshal(w[1], &shape)
			json.Unmarshal(w[2], &sum)
			a := s.Array(name)
			if a == nil {
				t.Fatalf("array %q missing", name)
			}
			if shape == nil {
				shape = []int64{}
			}
			got := a.Shape
			if got == nil {
				got = []int64{}
			}
			if a.DType != torchDTypes[dt] || !reflect.DeepEqual(got, shape) || len(a.Attrs) != 0 {
				t.Fatalf("array %q: %s %v %v, want %s (%s) %v", name, a.DType, a.Shape, a.Attrs, torchDTypes[dt], dt, shape)
			}
			b, err := snapshot.ReadAll(a.Data)
			if err != nil {
				t.Fatal(err)
			}
			if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != sum {
				t.Fatalf("array %q: sha256 %x, want %s", name, h, sum)
			}
		}
		if !strings.Contains(s.Attrs[AttrMetadata], "real safetensors 0.5") {
			t.Fatalf("metadata %q", s.Attrs[AttrMetadata])
		}
	}
	check(t, s)
	for _, n := range []string{"f8e4m3", "f8e5m2"} {
		if s.Array(n).DType.String() != n {
			t.Fatalf("array %q is %s", n, s.Array(n).DType)
		}
	}

	// safetensors -> WTXT (a real encode and decode) -> safetensors.
	s.Meta = snapshot.DefaultMeta()
	s.Meta.TS = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var w bytes.Buffer
	if _, err := wtxt.Encode(context.Background(), &w, s, wtxt.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{" dtype=f8e4m3 shape=16,8 ", " dtype=f8e5m2 shape=16,8 ", "tensor_ext"} {
		if !bytes.Contains(w.Bytes(), []byte(line)) {
			t.Fatalf("WTXT lacks %q", line)
		}
	}
	ws, err := wtxt.New().Decode(context.Background(), bytes.NewReader(w.Bytes()), int64(w.Len()), formats.DecodeOptions{Name: "dtypes.wtxt"})
	if err != nil {
		t.Fatal(err)
	}
	check(t, ws)
	var out bytes.Buffer
	if err := New().Encode(context.Background(), &out, ws, formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	back, err := New().Decode(context.Background(), snapshot.Bytes(out.Bytes()), int64(out.Len()), formats.DecodeOptions{Name: "back.safetensors"})
	if err != nil {
		t.Fatal(err)
	}
	check(t, back)
	var again bytes.Buffer
	if err := New().Encode(context.Background(), &again, back, formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), out.Bytes()) {
		t.Fatal("second encode differs")
	}
	t.Logf("re-encoded file is byte-identical to the library's: %v", bytes.Equal(out.Bytes(), raw))
}

// TestC128Refused: safetensors has no complex128: Encode names the array,
// the dtype and the format (formats.DTypeError, ErrLossy and
// ErrUnsupported), and with Lossy drops the array and reports it.
func TestC128Refused(t *testing.T) {
	s := &snapshot.Snapshot{Arrays: []*snapshot.Array{
		{Name: "z", DType: snapshot.C128, Shape: []int64{2}, Data: snapshot.Bytes(make([]byte, 32))},
		{Name: "c", DType: snapshot.C64, Shape: []int64{2}, Data: snapshot.Bytes(make([]byte, 16))},
	}}
	var buf bytes.Buffer
	err := New().Encode(context.Background(), &buf, s, formats.EncodeOptions{})
	var de *formats.DTypeError
	if !errors.As(err, &de) || de.Array != "z" || de.DType != snapshot.C128 || !errors.Is(err, formats.ErrLossy) || !errors.Is(err, formats.ErrUnsupported) ||
		!strings.Contains(err.Error(), `array "z": dtype c128 has no safetensors counterpart`) || buf.Len() != 0 {
		t.Fatalf("%v (%d bytes written)", err, buf.Len())
	}
	var lost []formats.Loss
	if err := New().Encode(context.Background(), &buf, s, formats.EncodeOptions{Lossy: true, Lost: func(l formats.Loss) { lost = append(lost, l) }}); err != nil {
		t.Fatal(err)
	}
	if len(lost) != 1 || lost[0].String() != `safetensors: array "z": array dropped (dtype c128): safetensors 0.5 has no complex128` {
		t.Fatalf("lost %v", lost)
	}
	back, err := New().Decode(context.Background(), snapshot.Bytes(buf.Bytes()), int64(buf.Len()), formats.DecodeOptions{})
	if err != nil || len(back.Arrays) != 1 || back.Arrays[0].DType != snapshot.C64 || !strings.Contains(buf.String(), `"dtype":"C64"`) {
		t.Fatalf("%v %v", err, back)
	}
}
