package torch

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/snapshot"
)

// expected2 reads testdata/torch2/EXPECTED.json (the pt/ entries of
// shared/fixtures/torch2/EXPECTED.json): file -> tensor -> [torch dtype,
// shape, sha256 of the raw C-order little-endian bytes].
func expected2(t *testing.T) map[string]map[string]expTensor {
	t.Helper()
	raw, err := os.ReadFile("testdata/torch2/EXPECTED.json")
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]map[string][3]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]expTensor{}
	for file, tensors := range top {
		out[file] = map[string]expTensor{}
		for name, v := range tensors {
			var e expTensor
			if json.Unmarshal(v[0], &e.DType) != nil || json.Unmarshal(v[1], &e.Shape) != nil || json.Unmarshal(v[2], &e.SHA256) != nil {
				t.Fatalf("%s %s: malformed entry", file, name)
			}
			if e.Shape == nil {
				e.Shape = []int64{}
			}
			out[file][name] = e
		}
	}
	if len(out) != 5 {
		t.Fatalf("EXPECTED.json lists %d files", len(out))
	}
	return out
}

// TestTorch2Fixtures: every fixture written by torch 2.6 (zip layout with
// its 2.x records, fp8 through _rebuild_tensor_v3, complex64, views, the
// legacy layout) decodes to exactly the tensors of EXPECTED.json; encoded
// again and decoded, it gives the same tensors, and the re-encoding is a
// fixed point.
func TestTorch2Fixtures(t *testing.T) {
	for file, want := range expected2(t) {
		t.Run(file, func(t *testing.T) {
			s := decodeFile(t, filepath.Join("testdata/torch2", file))
			checkExpected(t, s, want)
			ctx := context.Background()
			var pt bytes.Buffer
			if err := New().Encode(ctx, &pt, s, formats.EncodeOptions{}); err != nil {
				t.Fatal(err)
			}
			s2, err := New().Decode(ctx, snapshot.Bytes(pt.Bytes()), int64(pt.Len()), formats.DecodeOptions{Name: "again.pt"})
			if err != nil {
				t.Fatal(err)
			}
			checkExpected(t, s2, want)
			formatstest.EqualSorted(t, s, s2)
			var pt2 bytes.Buffer
			if err := New().Encode(ctx, &pt2, s2, formats.EncodeOptions{}); err != nil || !bytes.Equal(pt.Bytes(), pt2.Bytes()) {
				t.Fatalf("re-encoding differs (%v)", err)
			}
		})
	}
}
