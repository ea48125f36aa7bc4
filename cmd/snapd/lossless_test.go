package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

const fixtures = "../../../shared/fixtures"

// TestLosslessThroughWTXT: every reference fixture of every container
// format goes X -> WTXT -> X through `snapd convert`, and the result holds
// the same arrays (name, dtype, shape, bytes) and the same attributes.
func TestLosslessThroughWTXT(t *testing.T) {
	var files []string
	for _, pat := range []string{"ztensor/*.zt", "fold/*.fold", "fold/*.mind", "aero/*.aero", "stb/*.stb", "torch/*.pt"} {
		m, _ := filepath.Glob(filepath.Join(fixtures, pat))
		files = append(files, m...)
	}
	if len(files) < 15 {
		t.Fatalf("found only %d fixtures under %s", len(files), fixtures)
	}
	ctx := context.Background()
	reg := newRegistry()
	for _, in := range files {
		t.Run(filepath.Base(in), func(t *testing.T) {
			d := t.TempDir()
			w := filepath.Join(d, "x.wtxt")
			out := filepath.Join(d, "back"+filepath.Ext(in))
			mustRun(t, "convert", in, w, "--ts", "2026-01-01T00:00:00Z")
			mustRun(t, "convert", w, out)
			a, err := openSnapshot(ctx, reg, in, "")
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := openSnapshot(ctx, reg, out, "")
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if a.Codec.Name() != b.Codec.Name() {
				t.Fatalf("format %s came back as %s", a.Codec.Name(), b.Codec.Name())
			}
			sameSnapshot(t, a.Snapshot, b.Snapshot)
			x, _ := os.ReadFile(in)
			y, _ := os.ReadFile(out)
			if bytes.Equal(x, y) {
				t.Logf("%s: byte-identical after the round trip", filepath.Base(in))
			}
		})
	}
}

func sameSnapshot(t *testing.T, a, b *snapshot.Snapshot) {
	t.Helper()
	as, bs := a.Sorted(), b.Sorted()
	if len(as) != len(bs) {
		t.Fatalf("%d arrays, want %d", len(bs), len(as))
	}
	for i := range as {
		x, y := as[i], bs[i]
		if x.Name != y.Name || x.DType != y.DType || !reflect.DeepEqual(x.Shape, y.Shape) {
			t.Fatalf("array %s %s %v came back as %s %s %v", x.Name, x.DType, x.Shape, y.Name, y.DType, y.Shape)
		}
		xb, err1 := snapshot.ReadAll(x.Data)
		yb, err2 := snapshot.ReadAll(y.Data)
		if err1 != nil || err2 != nil || !bytes.Equal(xb, yb) {
			t.Fatalf("array %s: bytes differ (%v %v)", x.Name, err1, err2)
		}
		if !equalAttrs(x.Attrs, y.Attrs) {
			t.Errorf("array %s attrs %v, want %v", x.Name, y.Attrs, x.Attrs)
		}
	}
	if !equalAttrs(a.Attrs, b.Attrs) {
		t.Errorf("snapshot attrs differ:\n got %v\nwant %v", b.Attrs, a.Attrs)
	}
}

// equalAttrs compares attributes, ignoring fold.ecc_status: a diagnostic
// of the source file (its ECC parity was wrong), not data — the re-written
// file has correct parity.
func equalAttrs(a, b map[string]string) bool {
	strip := func(m map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			if k != "fold.ecc_status" {
				out[k] = v
			}
		}
		return out
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

// TestLossyNeedsFlag: a target that cannot hold a tensor fails naming it,
// leaves nothing behind, and --lossy drops what cannot be held.
func TestLossyNeedsFlag(t *testing.T) {
	d := t.TempDir()
	out := filepath.Join(d, "x.stb")
	code, _, errs := snapd(t, nil, "convert", filepath.Join(vectors, "v2-ext.safetensors"), out)
	if code != exitInvalid || !bytes.Contains([]byte(errs), []byte(`array "H"`)) {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatal("failed conversion left a file")
	}
	mustRun(t, "convert", filepath.Join(vectors, "v2-ext.safetensors"), out, "--lossy")
	if _, err := os.Stat(out); err != nil {
		t.Fatal(err)
	}
}
