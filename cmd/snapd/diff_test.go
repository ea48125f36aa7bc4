package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/snapshot"
)

// writeF64 writes a safetensors file with one f64 array w of the values.
func writeF64(t *testing.T, dir, name string, vals []float64) string {
	t.Helper()
	b := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
	s := &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "w", DType: snapshot.F64, Shape: []int64{int64(len(vals)), 1}, Data: snapshot.Bytes(b)}}}
	var out bytes.Buffer
	if err := (safetensors.Codec{}).Encode(context.Background(), &out, s, formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDiffNonFiniteCLI: `snapd diff` of a model that goes NaN, gains an
// Inf, or holds values near 1e308 prints NaN/inf where they are, and
// --json stays valid JSON (null plus "nonfinite").
func TestDiffNonFiniteCLI(t *testing.T) {
	dir := t.TempDir()
	nan, inf := math.NaN(), math.Inf(1)
	a := writeF64(t, dir, "a.safetensors", []float64{1, 2, 3, 4})
	for _, c := range []struct {
		name     string
		vals     []float64
		base     string
		text, md []string
		json     []string
	}{
		{"all NaN", []float64{nan, nan, nan, nan}, a,
			[]string{"max|Δ| NaN mean|Δ| NaN relL2 NaN", "NEW NaN 4 Inf 0"}, []string{"| NaN | NaN | NaN | **4/0** |"},
			[]string{`"max_abs_delta": null`, `"rel_l2": "NaN"`, `"new_nan": 4`}},
		{"one Inf", []float64{1, inf, 3, 4.5}, a,
			[]string{"max|Δ| inf", "NEW NaN 0 Inf 1", "(1 finite pairs: max|Δ| 0.5"}, []string{"| inf | inf | inf | **0/1** |"},
			[]string{`"max_abs_delta": "+Inf"`, `"new_inf": 1`, `"finite_max_abs_delta": 0.5`}},
		{"near 1e308", []float64{1.5e308, 1.5e308, 1.5e308, 1.5e308},
			writeF64(t, dir, "big.safetensors", []float64{1e308, 1e308, 1e308, 1e308}),
			[]string{"max|Δ| 5e+307", "relL2 0.5"}, []string{"| 0.5 | 0/0 |"}, []string{`"rel_l2": 0.5`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := writeF64(t, dir, strings.ReplaceAll(c.name, " ", "_")+".safetensors", c.vals)
			for _, mode := range []struct {
				args []string
				want []string
			}{{nil, c.text}, {[]string{"--markdown"}, c.md}, {[]string{"--json"}, c.json}} {
				code, out, errs := snapd(t, nil, append(append([]string{"diff"}, mode.args...), c.base, b)...)
				if code != 1 || strings.TrimSpace(errs) != "snapd: error: snapshots differ" { // the test helper prints every error
					t.Fatalf("diff %v: exit %d, stderr %s", mode.args, code, errs)
				}
				for _, w := range mode.want {
					if !strings.Contains(out, w) {
						t.Errorf("diff %v: no %q in\n%s", mode.args, w, out)
					}
				}
				if len(mode.args) > 0 && mode.args[0] == "--json" {
					var v struct{ Arrays []snapshot.ArrayDiff }
					if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Arrays) != 1 {
						t.Fatalf("JSON: %v\n%s", err, out)
					}
				}
			}
		})
	}
}
