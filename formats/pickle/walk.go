package pickle

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats"
)

// WalkLimits bound Walk; zero fields select the defaults.
type WalkLimits struct {
	MaxDepth int // nesting below the root; default DefaultMaxDepth
	MaxNodes int // values visited; default DefaultMaxNodes
}

// DefaultMaxNodes is Walk's default bound on the values it visits.
const DefaultMaxNodes = 1 << 20

// Walk calls fn for v and for everything reachable from it, depth first
// in order, with each value's key path: dict keys (KeyString), list,
// tuple and set indices; a placeholder's Args by index, its State,
// Entries and Items (by index) at its own path; a dict subclass's Attrs
// at its own path. Each container is entered once, by the first path
// that reaches it (so a shared or cyclic structure is walked linearly).
// path is only valid during the call. fn returns false to stop the walk.
// Walk fails with an error wrapping formats.ErrLimit when the values are
// nested deeper than MaxDepth or number more than MaxNodes.
func Walk(v any, lim WalkLimits, fn func(path []string, v any) bool) error {
	if lim.MaxDepth <= 0 {
		lim.MaxDepth = DefaultMaxDepth
	}
	if lim.MaxNodes <= 0 {
		lim.MaxNodes = DefaultMaxNodes
	}
	w := &walker{lim: lim, fn: fn, seen: map[any]bool{}}
	w.walk(v, nil, 0)
	return w.err
}

type walker struct {
	lim   WalkLimits
	fn    func([]string, any) bool
	seen  map[any]bool
	nodes int
	stop  bool
	err   error
}

func (w *walker) walk(v any, path []string, depth int) {
	if w.stop {
		return
	}
	w.nodes++
	if w.nodes > w.lim.MaxNodes {
		w.err = fmt.Errorf("%w: the pickle's result holds more than %d values", formats.ErrLimit, w.lim.MaxNodes)
		w.stop = true
		return
	}
	if depth > w.lim.MaxDepth {
		w.err = fmt.Errorf("%w: the pickle's result is nested deeper than %d", formats.ErrLimit, w.lim.MaxDepth)
		w.stop = true
		return
	}
	if !w.fn(path, v) {
		w.stop = true
		return
	}
	switch v.(type) {
	case *List, *Tuple, *Dict, *Set, *Opaque:
		if w.seen[v] {
			return
		}
		w.seen[v] = true
	default:
		return
	}
	seq := func(items []any) {
		for i, e := range items {
			w.walk(e, append(path, strconv.Itoa(i)), depth+1)
		}
	}
	switch x := v.(type) {
	case *List:
		seq(x.Items)
	case *Tuple:
		seq(x.Items)
	case *Set:
		seq(x.Items)
	case *Dict:
		w.dict(x, path, depth)
	case *Opaque:
		seq(x.Args)
		if x.Kwargs != nil {
			w.dict(x.Kwargs, path, depth)
		}
		if x.State != nil {
			w.walk(x.State, path, depth+1)
		}
		if x.Entries != nil {
			w.dict(x.Entries, path, depth)
		}
		seq(x.Items)
	}
}

func (w *walker) dict(d *Dict, path []string, depth int) {
	for i, k := range d.Keys {
		parts := 0
		seg := keyString(k, &parts)
		w.nodes += parts // a key's rendering is work too
		w.walk(d.Vals[i], append(path, seg), depth+1)
	}
	if d.Attrs != nil {
		w.dict(d.Attrs, path, depth)
	}
}

// Unknown is a placeholder and where the result holds it.
type Unknown struct {
	Path   string // JoinPath of its key path
	Opaque *Opaque
}

// Unknowns lists the placeholders the result v holds (globals outside
// the allowlist and objects built from them, Options.Placeholders), each
// once, in walk order, with its key path.
func Unknowns(v any, lim WalkLimits) ([]Unknown, error) {
	var out []Unknown
	err := Walk(v, lim, func(path []string, v any) bool {
		if o, ok := v.(*Opaque); ok {
			out = append(out, Unknown{Path: JoinPath(path), Opaque: o})
		}
		return true
	})
	return out, err
}

// JoinPath renders a key path: its segments joined by '.', "." for the
// root.
func JoinPath(path []string) string {
	if len(path) == 0 {
		return "."
	}
	return strings.Join(path, ".")
}

// KeyString is a dict key's segment of a key path: a string as is, ints
// in decimal, True/False/None, floats in Go's shortest form ("inf",
// "nan"), bytes as their bytes, a tuple's items joined by '_' (at most
// MaxKeyParts of them in all, then "..."); "key" for anything else.
func KeyString(k any) string {
	parts := 0
	return keyString(k, &parts)
}

// MaxKeyParts bounds the items of tuple keys KeyString renders.
const MaxKeyParts = 256

func keyString(k any, parts *int) string {
	*parts++
	switch x := k.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case *big.Int:
		return x.String()
	case bool:
		if x {
			return "True"
		}
		return "False"
	case nil:
		return "None"
	case float64:
		return FormatFloat(x)
	case Bytes:
		return string(x)
	case *Tuple:
		out := make([]string, 0, min(len(x.Items), MaxKeyParts))
		for _, e := range x.Items {
			if *parts >= MaxKeyParts {
				out = append(out, "...")
				break
			}
			out = append(out, keyString(e, parts))
		}
		return strings.Join(out, "_")
	}
	return "key"
}

// FormatFloat renders a float as Go's shortest round-tripping form, with
// "inf", "-inf" and "nan" for the special values.
func FormatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
