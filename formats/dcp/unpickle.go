package dcp

import (
	"context"
	"errors"
	"math/big"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/pickle"
)

// ParseMetadata reads a .metadata file's bytes (file names it in
// errors): the pickle runs in formats/pickle's bounded machine, charged
// to a budget of formats.DefaultMaxDecoded(len(b)), and the Metadata
// object is read from the values it builds.
func ParseMetadata(ctx context.Context, b []byte, file string, lim Limits) (*Metadata, error) {
	lim = lim.withDefaults()
	if int64(len(b)) > lim.MaxMetadataBytes {
		return nil, errf(file, "", -1, "", ErrLimit, "%d bytes, limit %d", len(b), lim.MaxMetadataBytes)
	}
	budget := formats.NewBudget(formats.DefaultMaxDecoded(int64(len(b))))
	// The file's bytes are held while the pickle runs.
	if err := budget.Take(int64(len(b)), ".metadata bytes"); err != nil {
		return nil, errf(file, "", -1, "", ErrLimit, "%v", err)
	}
	v, err := unpickle(ctx, b, file, budget)
	if err != nil {
		return nil, err
	}
	in := &interpreter{file: file, lim: lim}
	return in.interpret(v)
}

// resolve is the allowlist of globals that build values: torch.Size,
// the torch dtypes and layouts. Everything else — the DCP dataclasses
// among them — stays a placeholder (pickle.Opaque: nothing is looked up
// or run; the machine records the class, the arguments and the BUILD
// state), which interpret reads by class name where it expects one and
// ignores elsewhere (storage_meta's pathlib path, fields newer torch
// adds).
func resolve(module, name string) (*pickle.Global, error) {
	g := &pickle.Global{Module: module, Name: name}
	switch {
	case module == "torch" && name == "Size":
		g.Call = func(args []any) (any, error) {
			if len(args) != 1 {
				return nil, pickle.Fail(formats.ErrCorrupt, "torch.Size with %d arguments", len(args))
			}
			t, ok := args[0].(*pickle.Tuple)
			if !ok {
				if l, ok := args[0].(*pickle.List); ok {
					t = &pickle.Tuple{Items: l.Items}
				} else {
					return nil, pickle.Fail(formats.ErrCorrupt, "torch.Size of a %s", pickle.TypeName(args[0]))
				}
			}
			if len(t.Items) > DefaultLimits.MaxRank*4 {
				return nil, pickle.Fail(formats.ErrLimit, "torch.Size of %d dimensions", len(t.Items))
			}
			s := make(pySize, len(t.Items))
			for i, e := range t.Items {
				n, ok := e.(int64)
				if !ok {
					return nil, pickle.Fail(formats.ErrCorrupt, "torch.Size dimension %d is a %s", i, pickle.TypeName(e))
				}
				s[i] = n
			}
			return s, nil
		}
		return g, nil
	case module == "torch" && torchDTypes[name] != 0:
		g.Value = pyDType(name)
		return g, nil
	case module == "torch" && (name == "strided" || name == "sparse_coo" || name == "sparse_csr" || name == "_mkldnn"):
		g.Value = pyLayout("torch." + name)
		return g, nil
	case module == "torch.serialization" && name == "_get_layout":
		g.Call = func(args []any) (any, error) {
			if len(args) != 1 {
				return nil, pickle.Fail(formats.ErrCorrupt, "_get_layout with %d arguments", len(args))
			}
			s, ok := args[0].(string)
			if !ok || len(s) > 64 {
				return nil, pickle.Fail(formats.ErrCorrupt, "_get_layout of a %s", pickle.TypeName(args[0]))
			}
			return pyLayout(s), nil
		}
		return g, nil
	}
	return nil, nil
}

// unpickle runs the .metadata pickle and converts the result to the value
// model of metadata.go.
func unpickle(ctx context.Context, b []byte, file string, budget *formats.Budget) (any, error) {
	m := pickle.New(ctx, b, pickle.Options{Resolve: resolve, Budget: budget, Placeholders: true})
	v, err := m.Next()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var pe *pickle.Error
		if errors.As(err, &pe) {
			return nil, errf(file, "pickle", pe.Offset, "", pickleClass(pe.Err), "%s", pe.Describe())
		}
		return nil, errf(file, "pickle", -1, "", pickleClass(err), "%v", err)
	}
	if m.Pos() != len(b) {
		return nil, errf(file, "pickle", int64(m.Pos()), "", ErrCorrupt, "%d bytes after the pickle's STOP", len(b)-m.Pos())
	}
	c := &converter{left: 4*int64(len(b)) + 1<<16}
	out := c.convert(v, 0)
	if c.err != nil {
		return nil, errf(file, "pickle", -1, "", ErrLimit, "%v", c.err)
	}
	return out, nil
}

// pickleClass maps a pickle error class to this package's sentinel.
func pickleClass(err error) error {
	switch {
	case errors.Is(err, formats.ErrLimit):
		return ErrLimit
	case errors.Is(err, formats.ErrUnsupported):
		return ErrUnsupported
	}
	return ErrCorrupt
}

// converter turns pickle values into the value model, visiting at most
// left values and nesting at most maxConvertDepth deep (a shared or
// cyclic structure cannot make it loop or blow up).
type converter struct {
	left int64
	err  error
}

const maxConvertDepth = 64

var errConvert = errors.New("the metadata object is nested too deep or holds too many values")

func (c *converter) convert(v any, depth int) any {
	if c.err != nil {
		return nil
	}
	c.left--
	if c.left < 0 || depth > maxConvertDepth {
		c.err = errConvert
		return nil
	}
	seq := func(items []any) []any {
		out := make([]any, len(items))
		for i, e := range items {
			out[i] = c.convert(e, depth+1)
		}
		return out
	}
	switch x := v.(type) {
	case nil, bool, int64, float64, string, pySize, pyLayout, pyDType:
		return x
	case *big.Int:
		return &pyOther{"int beyond 64 bits"}
	case *pickle.Tuple:
		return pyTuple(seq(x.Items))
	case *pickle.List:
		return pyList(seq(x.Items))
	case *pickle.Dict:
		return &pyDict{keys: seq(x.Keys), vals: seq(x.Vals)}
	case *pickle.Global:
		switch val := x.Value.(type) {
		case pyDType:
			return val
		case pyLayout:
			return val
		}
		return &pyOther{"global " + pickle.PrintableName(x.FullName())}
	case *pickle.Opaque:
		if !x.Called {
			return &pyOther{"global " + pickle.PrintableName(x.FullName())}
		}
		return &pyInst{class: x.FullName(), args: seq(x.Args), state: c.convert(x.State, depth+1)}
	}
	return &pyOther{pickle.TypeName(v)}
}
