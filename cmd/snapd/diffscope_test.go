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

// writeTraining writes a safetensors file with model.w, an optimizer
// moment and a step counter at generation g; only the optimizer arrays
// change between generations when still is set.
func writeTraining(t *testing.T, dir, name string, g float64, still bool) string {
	t.Helper()
	f32 := func(vals ...float64) snapshot.Bytes {
		b := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		}
		return b
	}
	w := 1.0
	if !still {
		w += g
	}
	s := &snapshot.Snapshot{Arrays: []*snapshot.Array{
		{Name: "model.w", DType: snapshot.F32, Shape: []int64{2, 2}, Data: f32(w, 2, 3, 4)},
		{Name: "optimizer.state.0.exp_avg", DType: snapshot.F32, Shape: []int64{2, 2}, Data: f32(g, g, 0, 1)},
		{Name: "optimizer.state.0.step", DType: snapshot.F32, Shape: []int64{}, Data: f32(251 * g)},
	}}
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

// TestDiffIncludeExclude: --exclude/--include leave arrays out of the
// output and the exit status; exit 1 only when the included arrays differ.
func TestDiffIncludeExclude(t *testing.T) {
	dir := t.TempDir()
	a := writeTraining(t, dir, "a.safetensors", 1, true)
	bStill := writeTraining(t, dir, "b1.safetensors", 2, true) // only the optimizer moved
	bMoved := writeTraining(t, dir, "b2.safetensors", 2, false)
	for _, c := range []struct {
		args     []string
		b        string
		code     int
		want     []string
		notWant  []string
		excluded []string
	}{
		{[]string{"--exclude", "optimizer.*"}, bStill, 0,
			[]string{"0 of 1 arrays changed", "2 array(s) left out by --include/--exclude"}, []string{"optimizer"}, []string{"optimizer.state.0.exp_avg", "optimizer.state.0.step"}},
		{[]string{"--include", "model.*"}, bStill, 0,
			[]string{"0 of 1 arrays changed"}, []string{"optimizer"}, nil},
		{[]string{"--exclude", "optimizer.*"}, bMoved, 1,
			[]string{"model.w: 1 of 4 elements", "1 of 1 arrays changed", "2 array(s) left out"}, []string{"optimizer"}, nil},
		{[]string{"--exclude", "optimizer.*", "--include", "optimizer.*.step"}, bStill, 1,
			[]string{"optimizer.state.0.step: 1 of 1", "1 of 1 arrays changed", "2 array(s) left out"}, []string{"exp_avg", "model.w"}, nil},
		{nil, bStill, 1, []string{"2 of 3 arrays changed"}, []string{"left out"}, nil},
	} {
		code, out, errs := snapd(t, nil, append(append([]string{"diff"}, c.args...), a, c.b)...)
		if code != c.code {
			t.Fatalf("diff %v: exit %d, want %d; %s%s", c.args, code, c.code, out, errs)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("diff %v: no %q in\n%s", c.args, w, out)
			}
		}
		for _, w := range c.notWant {
			if strings.Contains(out, w) {
				t.Errorf("diff %v: %q in\n%s", c.args, w, out)
			}
		}
		if c.excluded == nil {
			continue
		}
		code, out, _ = snapd(t, nil, append(append([]string{"diff", "--json"}, c.args...), a, c.b)...)
		var v struct {
			Arrays   []snapshot.ArrayDiff
			Excluded []string
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil || code != c.code || len(v.Arrays) != 1 || strings.Join(v.Excluded, ",") != strings.Join(c.excluded, ",") {
			t.Fatalf("diff --json %v: exit %d, %v\n%s", c.args, code, err, out)
		}
	}
	if code, _, errs := snapd(t, nil, "diff", "--exclude", "[x", a, bStill); code != exitUsage {
		t.Fatalf("a bad pattern: exit %d; %s", code, errs)
	}
}
