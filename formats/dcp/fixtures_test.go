package dcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/formats/torch"
	"github.com/snapd-ml/snapd/snapshot"
)

// fixtures holds real torch 2.6 DCP checkpoints (dcp1: one process;
// dcp2: two ranks, DTensor Shard(0), a replicated tensor, an int leaf)
// and EXPECTED.json, written by make_fixtures.py beside them.
const fixtures = "../../../shared/fixtures/torch2"

// expected reads EXPECTED.json's entry for a fixture: tensor name ->
// [dtype, shape, sha256 of the whole tensor's C-order bytes].
func expected(t *testing.T, name string) map[string][3]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, "EXPECTED.json"))
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]map[string][3]any
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatal(err)
	}
	m := all[name]
	if len(m) == 0 {
		t.Fatalf("EXPECTED.json has no %s", name)
	}
	return m
}

var wantDType = map[string]snapshot.DType{"float32": snapshot.F32, "bfloat16": snapshot.BF16, "int64": snapshot.I64}

// checkExpected compares s's tensors with EXPECTED.json and returns the
// names of its other (non-tensor) arrays.
func checkExpected(t *testing.T, s *snapshot.Snapshot, want map[string][3]any) []string {
	t.Helper()
	for name, w := range want {
		a := s.Array(name)
		if a == nil {
			t.Errorf("tensor %s missing", name)
			continue
		}
		if a.DType != wantDType[w[0].(string)] {
			t.Errorf("%s: dtype %s, want %s", name, a.DType, w[0])
		}
		if got, wantShape := fmt.Sprint(a.Shape), fmt.Sprint(w[1]); got != wantShape {
			t.Errorf("%s: shape %s, want %s", name, got, wantShape)
		}
		b, err := snapshot.ReadAll(a.Data)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != w[2] {
			t.Errorf("%s: sha256 of the assembled tensor differs", name)
		}
	}
	var other []string
	for _, a := range s.Arrays {
		if _, ok := want[a.Name]; !ok {
			if a.Attrs[AttrKind] != kindBytes {
				t.Errorf("array %s is neither in EXPECTED.json nor a non-tensor item", a.Name)
			}
			other = append(other, a.Name)
		}
	}
	return other
}

// TestFixtures: the real DCP checkpoints read as snapshots whose tensors
// match EXPECTED.json (dcp2's sharded tensors assembled whole), and go
// DCP -> WTXT -> DCP (Write) -> read -> WTXT unchanged.
func TestFixtures(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		leaves int
	}{{"dcp1", 11}, {"dcp2", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Open(ctx, filepath.Join(fixtures, tc.name), Options{Torch: torch.New()})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if other := checkExpected(t, d.Snapshot, expected(t, tc.name)); len(other) != tc.leaves {
				t.Errorf("%d non-tensor items %v, want %d", len(other), other, tc.leaves)
			}
			w1 := toWTXT(t, d.Snapshot)
			out := filepath.Join(t.TempDir(), "out")
			if err := Write(ctx, out, d.Snapshot, WriteOptions{Torch: torch.New()}); err != nil {
				t.Fatal(err)
			}
			d2, err := Open(ctx, out, Options{Torch: torch.New()})
			if err != nil {
				t.Fatal(err)
			}
			defer d2.Close()
			checkExpected(t, d2.Snapshot, expected(t, tc.name))
			if w2 := toWTXT(t, d2.Snapshot); !bytes.Equal(w1, w2) {
				t.Fatal("WTXT of the rewritten checkpoint differs")
			}
			// Writing is a function of the snapshot.
			out2 := filepath.Join(t.TempDir(), "out")
			if err := Write(ctx, out2, d2.Snapshot, WriteOptions{Torch: torch.New()}); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{metadataName, writeFile} {
				a, _ := os.ReadFile(filepath.Join(out, f))
				b, _ := os.ReadFile(filepath.Join(out2, f))
				if !bytes.Equal(a, b) {
					t.Errorf("%s differs between two writes of the same snapshot", f)
				}
			}
		})
	}
}

// TestParseFixtureMetadata: the fixtures' .metadata parse into the items
// and chunks torch wrote.
func TestParseFixtureMetadata(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(fixtures, "dcp2", metadataName))
	if err != nil {
		t.Fatal(err)
	}
	md, err := ParseMetadata(context.Background(), b, "dcp2/.metadata", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, it := range md.Items {
		got += fmt.Sprintf("%s %d %s %v:", it.FQN, it.Kind, it.DType, it.Size)
		for _, c := range it.Chunks {
			got += fmt.Sprintf(" %v+%v@%s:%d:%d", c.Offsets, c.Sizes, c.Storage.File, c.Storage.Offset, c.Storage.Length)
		}
		if it.Kind == Bytes {
			got += fmt.Sprintf(" %s:%d:%d", it.Storage.File, it.Storage.Offset, it.Storage.Length)
		}
		got += "\n"
	}
	want := "bias 1 f32 [16]: [0]+[16]@__1_0.distcp:8088:1244\n" +
		"emb 1 f32 [64 32]: [0 0]+[32 32]@__0_0.distcp:0:5276 [32 0]+[32 32]@__1_0.distcp:864:5276\n" +
		"step 2 invalid []: __1_0.distcp:0:864\n" +
		"w 1 bf16 [48 16]: [0 0]+[24 16]@__0_0.distcp:5276:1948 [24 0]+[24 16]@__1_0.distcp:6140:1948\n"
	if got != want {
		t.Errorf("parsed\n%s\nwant\n%s", got, want)
	}
}
