package snapshot

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func diff1(t *testing.T, a, b *Array) ArrayDiff {
	t.Helper()
	ds, err := Diff(context.Background(), &Snapshot{Arrays: []*Array{a}}, &Snapshot{Arrays: []*Array{b}}, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 {
		t.Fatalf("%d diffs", len(ds))
	}
	return ds[0]
}

// roundTrip encodes d as JSON (which must succeed whatever the values) and
// decodes it again.
func roundTrip(t *testing.T, d ArrayDiff) (ArrayDiff, string) {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var back ArrayDiff
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return back, string(b)
}

func same(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

// TestDiffNonFinite: changes to and from NaN and ±Inf are counted and make
// the statistics NaN / +Inf, with the finite-pair numbers kept beside them.
func TestDiffNonFinite(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	const rows, cols = 64, 4
	base := func(r, c int) float64 { return float64(r*cols+c) + 1 }
	old := f64Array("w", rows, cols, base)
	for _, c := range []struct {
		name    string
		f       func(r, c int) float64
		old     func(r, c int) float64
		check   func(d ArrayDiff) bool
		jsonHas []string
	}{
		{"entirely NaN", func(int, int) float64 { return nan }, nil, func(d ArrayDiff) bool {
			return d.ChangedElements == rows*cols && d.NewNaN == rows*cols && d.NonFiniteChanged == rows*cols && d.FiniteChanged == 0 &&
				math.IsNaN(d.MaxAbsDelta) && math.IsNaN(d.MeanAbsDelta) && math.IsNaN(d.RelL2) && d.FiniteRelL2 == 0
		}, []string{`"max_abs_delta":null`, `"rel_l2":"NaN"`, `"new_nan":256`}},
		{"one element becomes +Inf", func(r, c int) float64 {
			if r == 3 && c == 1 {
				return inf
			}
			return base(r, c)
		}, nil, func(d ArrayDiff) bool {
			return d.ChangedElements == 1 && d.NewInf == 1 && d.NewNaN == 0 && math.IsInf(d.MaxAbsDelta, 1) && math.IsInf(d.RelL2, 1) &&
				d.FiniteChanged == 0 && d.FiniteMaxAbsDelta == 0
		}, []string{`"max_abs_delta":"+Inf"`, `"new_inf":1`}},
		{"Inf becomes NaN", func(r, c int) float64 {
			if r == 0 && c == 0 {
				return nan
			}
			return base(r, c)
		}, func(r, c int) float64 {
			if r == 0 && c == 0 {
				return -inf
			}
			return base(r, c)
		}, func(d ArrayDiff) bool {
			return d.ChangedElements == 1 && d.NewNaN == 1 && d.GoneInf == 1 && d.NewInf == 0 && math.IsNaN(d.MaxAbsDelta)
		}, []string{`"gone_inf":1`, `"new_nan":1`}},
		{"NaN healed, one finite change", func(r, c int) float64 {
			if r == 9 && c == 2 {
				return base(r, c) + 0.5
			}
			return base(r, c)
		}, func(r, c int) float64 {
			if r == 0 && c == 0 {
				return nan
			}
			return base(r, c)
		}, func(d ArrayDiff) bool {
			return d.ChangedElements == 2 && d.GoneNaN == 1 && d.NewNaN == 0 && d.FiniteChanged == 1 && d.FiniteMaxAbsDelta == 0.5 &&
				math.IsNaN(d.MaxAbsDelta) && !d.IntroducesNonFinite()
		}, []string{`"finite_max_abs_delta":0.5`, `"gone_nan":1`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := old
			if c.old != nil {
				o = f64Array("w", rows, cols, c.old)
			}
			d := diff1(t, o, f64Array("w", rows, cols, c.f))
			if !c.check(d) {
				t.Fatalf("%+v", d)
			}
			back, js := roundTrip(t, d)
			for _, s := range c.jsonHas {
				if !strings.Contains(js, s) {
					t.Errorf("JSON lacks %s: %s", s, js)
				}
			}
			for _, p := range [][2]float64{{d.MaxAbsDelta, back.MaxAbsDelta}, {d.MeanAbsDelta, back.MeanAbsDelta}, {d.RelL2, back.RelL2},
				{d.FiniteMaxAbsDelta, back.FiniteMaxAbsDelta}, {d.FiniteRelL2, back.FiniteRelL2}} {
				if !same(p[0], p[1]) {
					t.Errorf("round trip %v -> %v (%s)", p[0], p[1], js)
				}
			}
		})
	}
}

// TestDiffHugeAndTiny: norms are computed scaled, so values near the ends
// of the float64 range give the true relative L2, not Inf/Inf or 0/0.
func TestDiffHugeAndTiny(t *testing.T) {
	for _, scale := range []float64{1e308, 1e-310, 1} {
		old := f64Array("w", 8, 2, func(r, c int) float64 { return scale })
		// Every element moves by half its value: relL2 = 0.5 exactly.
		d := diff1(t, old, f64Array("w", 8, 2, func(r, c int) float64 { return scale * 1.5 }))
		if math.Abs(d.RelL2-0.5) > 1e-12 || d.RelL2 != d.FiniteRelL2 || d.ChangedElements != 16 {
			t.Errorf("scale %g: relL2 %v %+v", scale, d.RelL2, d)
		}
		if want := scale * 0.5; math.Abs(d.MaxAbsDelta-want) > want*1e-12 || math.Abs(d.MeanAbsDelta-want) > want*1e-12 {
			t.Errorf("scale %g: max %v mean %v, want %v", scale, d.MaxAbsDelta, d.MeanAbsDelta, want)
		}
		if _, err := json.Marshal(d); err != nil {
			t.Fatal(err)
		}
	}
	// A sign flip of ±1.7e308 is a |Δ| beyond float64: max |Δ| is +Inf,
	// the relative L2 (2) is still finite.
	big := math.MaxFloat64 * 0.95
	d := diff1(t, f64Array("w", 2, 1, func(int, int) float64 { return big }), f64Array("w", 2, 1, func(int, int) float64 { return -big }))
	if !math.IsInf(d.MaxAbsDelta, 1) || math.Abs(d.RelL2-2) > 1e-12 || d.NonFiniteChanged != 0 {
		t.Fatalf("sign flip of %g: %+v", big, d)
	}
	if _, js := roundTrip(t, d); !strings.Contains(js, `"max_abs_delta":"+Inf"`) || !strings.Contains(js, `"rel_l2":2`) {
		t.Fatalf("JSON %s", js)
	}
}

func TestFormatStat(t *testing.T) {
	for v, want := range map[float64]string{math.Inf(1): "inf", math.Inf(-1): "-inf", 0.5: "0.5", 1234567: "1.23e+06"} {
		if got := FormatStat(v); got != want {
			t.Errorf("%v: %q want %q", v, got, want)
		}
	}
	if FormatStat(math.NaN()) != "NaN" {
		t.Error("NaN")
	}
}
