package sharddir

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/snapd-ml/snapd/formats"
)

func seeds(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.index.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no seed index in testdata (%v)", err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		must(t, err)
		out[f] = b
	}
	return out
}

// TestMarshalIndexLikePython: MarshalIndex writes what Python's
// json.dumps(index, indent=2, sort_keys=True) + "\n" writes (Hugging
// Face's save_pretrained), checked against the real python3.
func TestMarshalIndexLikePython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	for name, b := range seeds(t) {
		x, err := ParseIndex(name, b, Limits{})
		must(t, err)
		got, err := MarshalIndex(x.Metadata, x.WeightMap)
		must(t, err)
		cmd := exec.Command(py, "-c", "import json,sys; d=json.load(sys.stdin); d.setdefault('metadata', {}); sys.stdout.write(json.dumps(d, indent=2, sort_keys=True) + '\\n')")
		cmd.Stdin = bytes.NewReader(b)
		want, err := cmd.Output()
		must(t, err)
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n%s\npython:\n%s", name, got, want)
		}
	}
}

func TestParseIndex(t *testing.T) {
	b := seeds(t)[filepath.Join("testdata", "pytorch_model.bin.index.json")]
	x, err := ParseIndex("p", b, Limits{})
	must(t, err)
	if string(x.Metadata) != `{"format":"pt","nested":{"a":[1,2.5,null,true,"é😀"]},"total_size":1500.0}` {
		t.Errorf("metadata %s", x.Metadata)
	}
	if !reflect.DeepEqual(x.Shards(), []string{"pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"}) {
		t.Errorf("shards %v", x.Shards())
	}
	for _, bad := range []string{``, `[]`, `{}`, `{"weight_map":{}}`, `{"weight_map":{"a":1}}`, `{"weight_map":{"a":"b"}} {}`,
		`{"metadata":[],"weight_map":{"a":"b"}}`, `{"metadata":{"x":1,"x":2},"weight_map":{"a":"b"}}`,
		`{"weight_map":{"a":"b"},"weight_map":{"a":"b"}}`, `{"weight_map":{"a":".."}}`, `{"weight_map":{"a":"x\u0000y"}}`,
		"{\"weight_map\":{\"a\":\"\xff\"}}"} {
		if _, err := ParseIndex("bad", []byte(bad), Limits{}); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsafe) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	deep := bytes.Repeat([]byte("["), 100)
	if _, err := ParseIndex("deep", append(append([]byte(`{"metadata":{"a":`), deep...), bytes.Repeat([]byte("]"), 100)...), Limits{}); !errors.Is(err, ErrLimit) && !errors.Is(err, ErrCorrupt) {
		t.Errorf("deep nesting: %v", err)
	}
}

// FuzzIndex: ParseIndex never panics, and whatever parses re-marshals to
// an index that parses to the same thing, which re-marshals to the same
// bytes.
func FuzzIndex(f *testing.F) {
	for _, b := range seeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := ParseIndex("f", b, Limits{MaxIndexEntries: 1000})
		if err != nil {
			var e *formats.Error
			if !errors.As(err, &e) {
				t.Fatalf("untyped error %v", err)
			}
			// Offsets are the index's (jsonerr rescans encoding/json's).
			if e.Offset > int64(len(b)) {
				t.Fatalf("offset %d beyond the %d-byte index: %v", e.Offset, len(b), err)
			}
			return
		}
		out, err := MarshalIndex(x.Metadata, x.WeightMap)
		if err != nil {
			t.Fatal(err)
		}
		y, err := ParseIndex("f2", out, Limits{MaxIndexEntries: 1000})
		if err != nil {
			t.Fatalf("re-parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(x.WeightMap, y.WeightMap) {
			t.Fatal("weight_map changed")
		}
		want := x.Metadata
		if want == nil {
			want = []byte("{}")
		}
		if !bytes.Equal(want, y.Metadata) {
			t.Fatalf("metadata %s -> %s", x.Metadata, y.Metadata)
		}
		out2, _ := MarshalIndex(y.Metadata, y.WeightMap)
		if !bytes.Equal(out, out2) {
			t.Fatal("not canonical")
		}
	})
}

// FuzzOpen: a fuzzed index beside real shards never panics Open, and
// whatever opens has exactly the index's tensors.
func FuzzOpen(f *testing.F) {
	for _, b := range seeds(f) {
		f.Add(b)
	}
	// One directory per fuzz process (inputs run one at a time in it):
	// only the index is rewritten per input.
	dir := makeHF(f)
	f.Fuzz(func(t *testing.T, idx []byte) {
		must(t, os.WriteFile(filepath.Join(dir, hfIdx), idx, 0o644))
		d, err := Open(context.Background(), dir, registry(), Options{Limits: Limits{MaxIndexEntries: 1000}})
		if err != nil {
			return
		}
		defer d.Close()
		x, err := ParseIndex("x", idx, Limits{})
		if err != nil {
			t.Fatalf("opened, but the index does not parse: %v", err)
		}
		if len(d.Snapshot.Arrays) != len(x.WeightMap) {
			t.Fatalf("%d arrays for %d index entries", len(d.Snapshot.Arrays), len(x.WeightMap))
		}
	})
}
