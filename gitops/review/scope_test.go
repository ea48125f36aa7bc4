package review

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/review/reviewtest"
	"github.com/snapd-ml/snapd/snapshot"
)

func TestParseLimit(t *testing.T) {
	for in, want := range map[string]Limit{
		"0.05":               {Value: 0.05},
		"model.*=0.05":       {Pattern: "model.*", Value: 0.05},
		"a=b=2":              {Pattern: "a=b", Value: 2},
		"optimizer.*=0":      {Pattern: "optimizer.*", Value: 0},
		"layers.[0-3].*=1e3": {Pattern: "layers.[0-3].*", Value: 1000},
	} {
		got, err := ParseLimit(in)
		if err != nil || got != want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "model.*=", "=0.5", "model.*=NaN", "inf", "[=1", "a=1e999"} {
		if _, err := ParseLimit(in); !errors.Is(err, ErrScope) {
			t.Errorf("ParseLimit(%q): err %v, want ErrScope", in, err)
		}
	}
}

func TestScope(t *testing.T) {
	lim := func(s ...string) []Limit {
		var out []Limit
		for _, x := range s {
			l, err := ParseLimit(x)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		return out
	}
	f32 := func(n int64) (string, []int64) { return "f32", []int64{n, 4} }
	type arr struct {
		name, dtype string
		shape       []int64
	}
	a := func(name string, dt string, shape ...int64) arr { return arr{name, dt, shape} }
	w := func(name string) arr { dt, sh := f32(8); return arr{name, dt, sh} }
	for _, tc := range []struct {
		what string
		t    Thresholds
		a    arr
		want ArrayScope
	}{
		{"default applies to all", Thresholds{MaxRelL2: 0.1}, w("model.w"),
			ArrayScope{Thresholded: true, MaxRelL2: 0.1}},
		{"pattern overrides default", Thresholds{MaxRelL2: 0.1, RelL2Limits: lim("model.*=0.05")}, w("model.w"),
			ArrayScope{Thresholded: true, MaxRelL2: 0.05}},
		{"pattern does not match: default", Thresholds{MaxRelL2: 0.1, RelL2Limits: lim("model.*=0.05")}, w("optimizer.exp_avg"),
			ArrayScope{Thresholded: true, MaxRelL2: 0.1}},
		{"longest pattern wins, whatever the order", Thresholds{RelL2Limits: lim("model.layers.*.attn.*=0.2", "model.*=0.05")}, w("model.layers.3.attn.q"),
			ArrayScope{Thresholded: true, MaxRelL2: 0.2}},
		{"equal length: the later wins", Thresholds{RelL2Limits: lim("model.?=1", "model.w=2", "model.*=3")}, w("model.w"),
			ArrayScope{Thresholded: true, MaxRelL2: 3}},
		{"0 lifts the default", Thresholds{MaxRelL2: 0.1, RelL2Limits: lim("opt.*=0")}, w("opt.m"),
			ArrayScope{Thresholded: true}},
		{"dots are plain characters, * does not cross /", Thresholds{AbsDeltaLimits: lim("layer.*=1")}, w("layer.0/w"),
			ArrayScope{Thresholded: true}},
		{"abs limit", Thresholds{MaxAbsDelta: 5, AbsDeltaLimits: lim("layer.*/w=1")}, w("layer.0/w"),
			ArrayScope{Thresholded: true, MaxAbsDelta: 1}},
		{"excluded", Thresholds{MaxRelL2: 0.1, Exclude: []string{"optimizer.*"}}, w("optimizer.state.0.exp_avg"),
			ArrayScope{Reason: ReasonExcluded, Pattern: "optimizer.*"}},
		{"not included", Thresholds{MaxRelL2: 0.1, Include: []string{"model.*"}}, w("optimizer.state.0.exp_avg"),
			ArrayScope{Reason: ReasonNotIncluded}},
		{"included", Thresholds{MaxRelL2: 0.1, Include: []string{"model.*"}}, w("model.w"),
			ArrayScope{Thresholded: true, MaxRelL2: 0.1}},
		{"longer include beats exclude", Thresholds{MaxRelL2: 0.1, Exclude: []string{"optimizer.*"}, Include: []string{"optimizer.*.exp_avg"}}, w("optimizer.0.exp_avg"),
			ArrayScope{Thresholded: true, MaxRelL2: 0.1}},
		{"exclude beats an include of equal length", Thresholds{Exclude: []string{"model.w"}, Include: []string{"model.*"}}, w("model.w"),
			ArrayScope{Reason: ReasonExcluded, Pattern: "model.w"}},
		{"rank-0 f32 step is a counter", Thresholds{MaxRelL2: 0.1}, a("optimizer.state.0.step", "f32"),
			ArrayScope{Reason: ReasonCounter}},
		{"i64 is a counter", Thresholds{MaxRelL2: 0.1}, a("model.bn.num_batches_tracked", "i64"),
			ArrayScope{Reason: ReasonCounter}},
		{"bool is a counter", Thresholds{MaxRelL2: 0.1}, a("mask", "bool", 4),
			ArrayScope{Reason: ReasonCounter}},
		{"model.* does not name a counter", Thresholds{RelL2Limits: lim("model.*=0.05")}, a("model.bn.num_batches_tracked", "i64"),
			ArrayScope{Reason: ReasonCounter}},
		{"include * does not name a counter", Thresholds{Include: []string{"*"}}, a("step", "i64"),
			ArrayScope{Reason: ReasonCounter}},
		{"a pattern naming the counter thresholds it", Thresholds{MaxRelL2: 0.1, AbsDeltaLimits: lim("optimizer.state.*.step=1")}, a("optimizer.state.0.step", "f32"),
			ArrayScope{Thresholded: true, MaxRelL2: 0.1, MaxAbsDelta: 1}},
		{"an include naming the counter", Thresholds{MaxAbsDelta: 2, Include: []string{"*.step"}}, a("optimizer.state.3.step", "i64"),
			ArrayScope{Thresholded: true, MaxAbsDelta: 2}},
		{"an exclude still wins over a naming limit", Thresholds{Exclude: []string{"optimizer.*"}, AbsDeltaLimits: lim("optimizer.state.*.step=1")}, a("optimizer.state.0.step", "f32"),
			ArrayScope{Reason: ReasonExcluded, Pattern: "optimizer.*"}},
		{"rng by name", Thresholds{MaxRelL2: 0.1}, a("rng_state.numpy.keys", "u32", 624),
			ArrayScope{Reason: ReasonRNGState}},
		{"torch cpu rng state", Thresholds{MaxRelL2: 0.1}, a("cpu", "u8", 5056),
			ArrayScope{Reason: ReasonRNGState}},
		{"torch cuda rng state", Thresholds{MaxRelL2: 0.1}, a("state.cuda.0", "u8", 16),
			ArrayScope{Reason: ReasonCounter}}, // last part "0": a u8 array, so a counter
		{"float rng by name", Thresholds{MaxRelL2: 0.1}, a("model.RNG.seed_buf", "f32", 4),
			ArrayScope{Reason: ReasonRNGState}},
		{"a u8 weight named cpu-like is not rng when f32", Thresholds{MaxRelL2: 0.1}, a("model.cpu", "f32", 4),
			ArrayScope{Thresholded: true, MaxRelL2: 0.1}},
		{"allow non-finite by pattern", Thresholds{AllowNonFiniteIn: []string{"model.head.*"}}, w("model.head.w"),
			ArrayScope{Thresholded: true, AllowNonFinite: true}},
		{"allow non-finite pattern elsewhere", Thresholds{AllowNonFiniteIn: []string{"model.head.*"}}, w("model.body.w"),
			ArrayScope{Thresholded: true}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			if err := tc.t.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := tc.t.Scope(tc.a.name, tc.a.dtype, tc.a.shape); got != tc.want {
				t.Fatalf("Scope(%q %s %v) = %+v, want %+v", tc.a.name, tc.a.dtype, tc.a.shape, got, tc.want)
			}
		})
	}
	if err := (&Thresholds{Exclude: []string{"a["}}).Validate(); !errors.Is(err, ErrScope) {
		t.Fatalf("a bad pattern: %v", err)
	}
}

// trainingGen is a training checkpoint at generation gen: model weights
// that move a little, Adam moments that move a lot, a rank-0 f32 step
// (torch 2.x), a torch CPU RNG state (u8) and a BatchNorm counter.
func trainingGen(gen uint64) *snapshot.Snapshot {
	m := snapshot.DefaultMeta()
	m.Gen = gen
	m.TS = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(gen) * time.Hour)
	f32 := func(n int, f func(i int) float64) snapshot.Bytes {
		b := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(f(i))))
		}
		return b
	}
	g := float64(gen)
	rng := make([]byte, 64)
	for i := range rng {
		rng[i] = byte(uint64(i)*31 + gen*17)
	}
	return &snapshot.Snapshot{Meta: m, Arrays: []*snapshot.Array{
		{Name: "model.bn.num_batches_tracked", DType: snapshot.I64, Data: snapshot.Bytes(binary.LittleEndian.AppendUint64(nil, 251*gen))},
		{Name: "model.w", DType: snapshot.F32, Shape: []int64{16, 4}, Data: f32(64, func(i int) float64 { return 1 + float64(i) + 0.001*g*float64(i%3) })},
		{Name: "optimizer.state.0.exp_avg", DType: snapshot.F32, Shape: []int64{16, 4}, Data: f32(64, func(i int) float64 { return g * float64(i%5) })},
		{Name: "optimizer.state.0.exp_avg_sq", DType: snapshot.F32, Shape: []int64{16, 4}, Data: f32(64, func(i int) float64 { return g * g * float64(i%7) })},
		{Name: "optimizer.state.0.step", DType: snapshot.F32, Data: f32(1, func(int) float64 { return 251 * g })},
		{Name: "rng_state.cpu", DType: snapshot.U8, Shape: []int64{64}, Data: snapshot.Bytes(rng)},
	}}
}

// TestReviewScopedToModel: two training generations reviewed with
// --max-rel-l2 0.05 request changes for the optimizer moments; with the
// limit scoped to model.* the review approves, lists the moments as
// unjudged, and says the counters and RNG state were not thresholded.
func TestReviewScopedToModel(t *testing.T) {
	s1, s2 := trainingGen(1), trainingGen(2)
	gen1, r1 := reviewtest.Encode(t, s1, wtxt.EncodeOptions{})
	gen2, _ := reviewtest.Encode(t, s2, wtxt.EncodeOptions{PrevMerkle: r1.MerkleThis})
	dir := t.TempDir()
	base, head := filepath.Join(dir, "base.wtxt"), filepath.Join(dir, "head.wtxt")
	if err := os.WriteFile(base, gen1, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(head, gen2, 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(th Thresholds) *Review {
		t.Helper()
		rv, err := Build(context.Background(), []FileInput{{Path: "snapshots/current.wtxt", Base: base, Head: head}},
			Options{Approve: true, HeadSHA: "local", Thresholds: th})
		if err != nil {
			t.Fatal(err)
		}
		return rv
	}

	// Unscoped: the moments trip the limit; the counters and the RNG
	// state still do not.
	rv := build(Thresholds{MaxRelL2: 0.05})
	if rv.Event != EventRequestChanges {
		t.Fatalf("unscoped: event %s, want REQUEST_CHANGES\n%s", rv.Event, rv.Body)
	}
	probs := strings.Join(rv.Files[0].Problems, "\n")
	for _, want := range []string{"optimizer.state.0.exp_avg`", "optimizer.state.0.exp_avg_sq`"} {
		if !strings.Contains(probs, want) {
			t.Errorf("unscoped: no problem for %s:\n%s", want, probs)
		}
	}
	for _, not := range []string{"step", "rng_state", "num_batches_tracked", "model.w"} {
		if strings.Contains(probs, not) {
			t.Errorf("unscoped: a problem names %s:\n%s", not, probs)
		}
	}

	for _, tc := range []struct {
		th                 Thresholds
		notJudged, stepRow string
	}{
		{Thresholds{RelL2Limits: []Limit{{"model.*", 0.05}}}, "2 counters, 1 RNG state", "(not thresholded: counter)"},
		{Thresholds{MaxRelL2: 0.05, Exclude: []string{"optimizer.*"}}, "1 counter, 1 RNG state, 3 excluded", "(excluded: `optimizer.*`)"},
		{Thresholds{MaxRelL2: 0.05, Include: []string{"model.*"}}, "1 counter, 4 not included", "(not thresholded: not included)"},
	} {
		rv := build(tc.th)
		if rv.Event != EventApprove || len(rv.Files[0].Problems) > 0 {
			t.Fatalf("%+v: event %s, problems %q\n%s", tc.th, rv.Event, rv.Files[0].Problems, rv.Body)
		}
		if !strings.Contains(rv.Body, "**Not thresholded:** "+tc.notJudged+" (") {
			t.Fatalf("%+v: the body does not say %q:\n%s", tc.th, tc.notJudged, rv.Body)
		}
		for _, want := range []string{"| `optimizer.state.0.step` | modified " + tc.stepRow + " |", "| `model.bn.num_batches_tracked` | modified (not thresholded: counter) |"} {
			if !strings.Contains(rv.Body, want) {
				t.Fatalf("%+v: the table lacks %q:\n%s", tc.th, want, rv.Body)
			}
		}
	}
	rv = build(Thresholds{MaxRelL2: 0.05})
	if want := "| `rng_state.cpu` | modified (not thresholded: RNG state) |"; !strings.Contains(rv.Body, want) {
		t.Fatalf("the table does not list the RNG state (%q):\n%s", want, rv.Body)
	}

	// A pattern naming the step thresholds it.
	rv = build(Thresholds{RelL2Limits: []Limit{{"model.*", 0.05}}, AbsDeltaLimits: []Limit{{"optimizer.state.*.step", 100}}})
	if rv.Event != EventRequestChanges || len(rv.Files[0].Problems) != 1 || !strings.Contains(rv.Files[0].Problems[0], "optimizer.state.0.step") {
		t.Fatalf("naming the step: event %s, problems %q", rv.Event, rv.Files[0].Problems)
	}
}
