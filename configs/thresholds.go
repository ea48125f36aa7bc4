package configs

import (
	"fmt"
	"reflect"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/snapd-ml/snapd/gitops/review"
)

// Thresholds make a review request changes even when every check passes.
// They are scoped like `snapd review`'s flags (review.Thresholds.Scope):
// patterns are path.Match globs over array names, the longest matching
// pattern wins, and counters and RNG state are reported but not judged
// unless a pattern names them.
type Thresholds struct {
	// MaxRelL2 limits an array's relative L2 change: a number (every
	// array; 0 = no limit) or a list of "NUMBER" / "PATTERN=NUMBER".
	MaxRelL2 Limits `yaml:"max_rel_l2"`
	// MaxAbsDelta limits an element's max |delta|, written like MaxRelL2.
	MaxAbsDelta Limits `yaml:"max_abs_delta"`
	// AllowNonFinite accepts newly introduced NaN/Inf: true (every array)
	// or a list of patterns.
	AllowNonFinite Allow `yaml:"allow_non_finite"`
	// Include, when not empty, judges only the arrays these patterns match.
	Include Patterns `yaml:"include"`
	// Exclude never judges the arrays these patterns match (they are listed
	// as excluded).
	Exclude Patterns `yaml:"exclude"`
}

// Patterns is a list of array-name globs; an empty list reads as nil.
type Patterns []string

// UnmarshalYAML accepts a sequence of strings.
func (p *Patterns) UnmarshalYAML(n *yaml.Node) error {
	var s []string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a list of patterns", n.Line)
	}
	if len(s) == 0 {
		s = nil
	}
	*p = s
	return nil
}

// Limits is a threshold: a YAML number or string, or a list of them, each
// "NUMBER" (the default for every array) or "PATTERN=NUMBER".
type Limits []string

// UnmarshalYAML accepts a scalar or a sequence of scalars. A lone 0 (no
// limit) and an empty list read as nil, the default.
func (l *Limits) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*l = Limits{n.Value}
		if v, err := strconv.ParseFloat(n.Value, 64); err == nil && v == 0 {
			*l = nil
		}
		return nil
	case yaml.SequenceNode:
		out := make(Limits, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: want a number or \"PATTERN=NUMBER\"", c.Line)
			}
			out = append(out, c.Value)
		}
		if len(out) == 0 {
			out = nil
		}
		*l = out
		return nil
	}
	return fmt.Errorf("line %d: want a number, \"PATTERN=NUMBER\" or a list of them", n.Line)
}

// Allow is true/false (every array or none) or a list of patterns.
type Allow struct {
	All      bool
	Patterns Patterns
}

// UnmarshalYAML accepts a bool or a sequence of patterns.
func (a *Allow) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		*a = Allow{}
		return a.Patterns.UnmarshalYAML(n)
	}
	*a = Allow{}
	if err := n.Decode(&a.All); err != nil {
		return fmt.Errorf("line %d: want true, false or a list of patterns", n.Line)
	}
	return nil
}

// Review returns the thresholds as review.Thresholds; field names the
// wrong key (such as "max_rel_l2") when err is not nil.
func (t *Thresholds) Review() (th review.Thresholds, field string, err error) {
	th = review.Thresholds{Include: t.Include, Exclude: t.Exclude, AllowNonFinite: t.AllowNonFinite.All, AllowNonFiniteIn: t.AllowNonFinite.Patterns}
	for _, k := range []struct {
		field  string
		values Limits
		def    *float64
		limits *[]review.Limit
	}{{"max_rel_l2", t.MaxRelL2, &th.MaxRelL2, &th.RelL2Limits}, {"max_abs_delta", t.MaxAbsDelta, &th.MaxAbsDelta, &th.AbsDeltaLimits}} {
		bare := false
		for _, v := range k.values {
			l, err := review.ParseLimit(v)
			if err != nil {
				return th, k.field, err
			}
			switch {
			case l.Pattern != "":
				*k.limits = append(*k.limits, l)
			case bare:
				return th, k.field, fmt.Errorf("two bare numbers; give one default and PATTERN=NUMBER for the rest")
			default:
				*k.def, bare = l.Value, true
			}
		}
	}
	for _, k := range []struct {
		field    string
		patterns []string
	}{{"include", t.Include}, {"exclude", t.Exclude}, {"allow_non_finite", t.AllowNonFinite.Patterns}} {
		for _, p := range k.patterns {
			if err := review.CheckPattern(p); err != nil {
				return th, k.field, err
			}
		}
	}
	return th, "", nil
}

// Equal reports whether g and o are the same section (GitHub holds slices,
// so it is not comparable with ==).
func (g GitHub) Equal(o GitHub) bool { return reflect.DeepEqual(g, o) }
