package review

import (
	"errors"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/snapshot"
)

// Scoping: which arrays the thresholds judge, and with which limits.
//
// Patterns are path.Match globs over whole array names; a dot is a plain
// character, so "model.*" matches "model.layers.0.weight" ('*' crosses
// dots, never '/'). Where several patterns match one array, the most
// specific — the longest pattern — wins; between patterns of equal length
// the one given later wins, except that an exclude beats an include.
//
// Counters and RNG state (IsCounter, IsRNGState) are reported with their
// numbers but not thresholded unless a pattern names them explicitly: an
// include or limit pattern that matches them and whose last dot-separated
// part has no '*' ("optimizer.state.*.step", "rng_state.cpu" do;
// "model.*" and "*" do not).

// Limit is one threshold value for the arrays Pattern matches.
type Limit struct {
	// Pattern is a path.Match glob over array names.
	Pattern string
	// Value is the limit; 0 means no limit for the matching arrays.
	Value float64
}

// ErrScope reports a malformed pattern or limit.
var ErrScope = errors.New("review: threshold scope")

// ParseLimit reads a threshold flag's value: "NUMBER" (the default for
// every array; Pattern "") or "PATTERN=NUMBER" (split at the last '=').
// The number must be finite and >= 0.
func ParseLimit(s string) (Limit, error) {
	var l Limit
	num := s
	if i := strings.LastIndexByte(s, '='); i >= 0 {
		l.Pattern, num = s[:i], s[i+1:]
		if err := CheckPattern(l.Pattern); err != nil {
			return Limit{}, err
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return Limit{}, fmt.Errorf("%w: %q: want NUMBER or PATTERN=NUMBER with a finite number >= 0", ErrScope, s)
	}
	l.Value = v
	return l, nil
}

// CheckPattern reports whether p is a usable pattern: not empty and
// well-formed for path.Match.
func CheckPattern(p string) error {
	if p == "" {
		return fmt.Errorf("%w: empty pattern", ErrScope)
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("%w: pattern %q: %v", ErrScope, p, err)
	}
	return nil
}

// Validate checks every pattern and value of t.
func (t *Thresholds) Validate() error {
	for _, v := range []float64{t.MaxRelL2, t.MaxAbsDelta} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: limit %v: must be a finite number >= 0", ErrScope, v)
		}
	}
	for _, ls := range [][]Limit{t.RelL2Limits, t.AbsDeltaLimits} {
		for _, l := range ls {
			if err := CheckPattern(l.Pattern); err != nil {
				return err
			}
			if l.Value < 0 || math.IsNaN(l.Value) || math.IsInf(l.Value, 0) {
				return fmt.Errorf("%w: %s=%v: must be a finite number >= 0", ErrScope, l.Pattern, l.Value)
			}
		}
	}
	for _, ps := range [][]string{t.Include, t.Exclude, t.AllowNonFiniteIn} {
		for _, p := range ps {
			if err := CheckPattern(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// Reasons an array is not thresholded (ArrayScope.Reason).
const (
	ReasonExcluded    = "excluded"
	ReasonNotIncluded = "not included"
	ReasonCounter     = "counter"
	ReasonRNGState    = "RNG state"
)

// ArrayScope is how the thresholds judge one array.
type ArrayScope struct {
	// Thresholded is false when the array is reported only.
	Thresholded bool
	// Reason says why it is not thresholded (a Reason* constant).
	Reason string
	// Pattern is the exclude pattern that won (Reason excluded).
	Pattern string
	// MaxRelL2 and MaxAbsDelta are the array's limits (0 = none).
	MaxRelL2, MaxAbsDelta float64
	// AllowNonFinite accepts newly introduced NaN/Inf in the array.
	AllowNonFinite bool
}

// Scope resolves the thresholds for an array of the given name, dtype
// (a DType's name) and shape.
func (t *Thresholds) Scope(name, dtype string, shape []int64) ArrayScope {
	if in, p := InScope(t.Include, t.Exclude, name); !in {
		if p != "" {
			return ArrayScope{Reason: ReasonExcluded, Pattern: p}
		}
		return ArrayScope{Reason: ReasonNotIncluded}
	}
	kind := ""
	switch {
	case IsRNGState(name, dtype):
		kind = ReasonRNGState
	case IsCounter(dtype, shape):
		kind = ReasonCounter
	}
	if kind != "" && !t.namesExplicitly(name) {
		return ArrayScope{Reason: kind}
	}
	s := ArrayScope{Thresholded: true, MaxRelL2: t.MaxRelL2, MaxAbsDelta: t.MaxAbsDelta, AllowNonFinite: t.AllowNonFinite}
	if l, ok := mostSpecific(t.RelL2Limits, name); ok {
		s.MaxRelL2 = l.Value
	}
	if l, ok := mostSpecific(t.AbsDeltaLimits, name); ok {
		s.MaxAbsDelta = l.Value
	}
	for _, p := range t.AllowNonFiniteIn {
		if match(p, name) {
			s.AllowNonFinite = true
		}
	}
	return s
}

// InScope reports whether name is in the scope include and exclude
// describe: the longest matching pattern decides (an exclude wins a tie);
// when none matches, name is in scope unless include is not empty.
// pattern is the exclude pattern that left name out ("" when in scope or
// when no include matched).
func InScope(include, exclude []string, name string) (in bool, pattern string) {
	best, bestLen, excluded := "", -1, false
	for _, p := range include {
		if match(p, name) && len(p) > bestLen {
			best, bestLen, excluded = p, len(p), false
		}
	}
	for _, p := range exclude {
		if match(p, name) && len(p) >= bestLen {
			best, bestLen, excluded = p, len(p), true
		}
	}
	switch {
	case excluded:
		return false, best
	case bestLen < 0 && len(include) > 0:
		return false, ""
	}
	return true, ""
}

// namesExplicitly reports whether an include or limit pattern matches
// name and ends in a dot-separated part without '*'.
func (t *Thresholds) namesExplicitly(name string) bool {
	explicit := func(p string) bool {
		last := p[strings.LastIndexByte(p, '.')+1:]
		return match(p, name) && !strings.Contains(last, "*")
	}
	for _, ps := range [][]string{t.Include, t.AllowNonFiniteIn} {
		for _, p := range ps {
			if explicit(p) {
				return true
			}
		}
	}
	for _, ls := range [][]Limit{t.RelL2Limits, t.AbsDeltaLimits} {
		for _, l := range ls {
			if explicit(l.Pattern) {
				return true
			}
		}
	}
	return false
}

// mostSpecific returns the limit with the longest pattern matching name
// (the later one on a tie).
func mostSpecific(ls []Limit, name string) (Limit, bool) {
	var best Limit
	found := false
	for _, l := range ls {
		if match(l.Pattern, name) && (!found || len(l.Pattern) >= len(best.Pattern)) {
			best, found = l, true
		}
	}
	return best, found
}

func match(p, name string) bool {
	ok, err := path.Match(p, name)
	return err == nil && ok
}

// IsCounter reports whether an array of this dtype and shape is a counter
// rather than a tensor of values: integer and bool dtypes, and rank-0
// arrays of any dtype (torch 2.x keeps an optimizer's `step` as a rank-0
// float32 tensor).
func IsCounter(dtype string, shape []int64) bool {
	if len(shape) == 0 {
		return true
	}
	d, err := snapshot.ParseDType(dtype)
	return err == nil && !d.IsFloat() && !d.IsComplex()
}

// IsRNGState reports whether an array holds random-number-generator
// state: its name contains "rng" or "random_state" (any case), or it is
// a u8 array whose last dot-separated part is "cpu" or starts with
// "cuda" (torch.get_rng_state() and torch.cuda.get_rng_state_all() saved
// under those keys, as Hugging Face's Trainer does).
func IsRNGState(name, dtype string) bool {
	l := strings.ToLower(name)
	if strings.Contains(l, "rng") || strings.Contains(l, "random_state") {
		return true
	}
	if dtype != snapshot.U8.String() {
		return false
	}
	last := l[strings.LastIndexAny(l, "./")+1:]
	return last == "cpu" || strings.HasPrefix(last, "cuda")
}
