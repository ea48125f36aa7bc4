package pickle

import (
	"github.com/snapd-ml/snapd/formats"
)

// PlainGlobal returns the globals that build plain data, for resolvers
// to include (torch's weights_only loader allows the same):
//
//	collections.OrderedDict()          a *Dict with Class "collections.OrderedDict"
//	collections.Counter([dict])        a *Dict with Class "collections.Counter"
//	builtins.set([iterable])           a *Set
//	builtins.frozenset([iterable])     a *Set with Frozen
//	builtins.bytearray([bytes])        a ByteArray (also (str, "latin1"))
//	builtins.complex(re[, im])         a complex128
//	_codecs.encode(str, "latin1")      Bytes (how protocol 2 pickles bytes)
//
// and nil for any other name. Python 2's module name __builtin__ (which
// protocols 0–2 write for builtins) is taken as builtins.
func PlainGlobal(module, name string) *Global {
	g := &Global{Module: module, Name: name}
	full := module + "." + name
	if module == "__builtin__" {
		full = "builtins." + name
	}
	switch full {
	case "collections.OrderedDict":
		g.Call = func(args []any) (any, error) {
			if len(args) != 0 {
				return nil, Fail(formats.ErrUnsupported, "OrderedDict with %d arguments", len(args))
			}
			return &Dict{Class: "collections.OrderedDict"}, nil
		}
	case "collections.Counter":
		g.Call = func(args []any) (any, error) {
			d := &Dict{Class: "collections.Counter"}
			switch {
			case len(args) == 0:
			case len(args) == 1:
				src, ok := args[0].(*Dict)
				if !ok {
					return nil, Fail(formats.ErrUnsupported, "Counter of a %s", TypeName(args[0]))
				}
				d.Keys = append([]any(nil), src.Keys...)
				d.Vals = append([]any(nil), src.Vals...)
				d.keys = src.keys
				if src.index != nil {
					d.index = make(map[uint64]int, len(src.index))
					for k, v := range src.index {
						d.index[k] = v
					}
				}
			default:
				return nil, Fail(formats.ErrCorrupt, "Counter with %d arguments", len(args))
			}
			return d, nil
		}
	case "builtins.set", "builtins.frozenset":
		frozen := name == "frozenset"
		g.Call = func(args []any) (any, error) {
			s := &Set{Frozen: frozen}
			if len(args) == 0 {
				return s, nil
			}
			var items []any
			switch x := args[0].(type) {
			case *List:
				items = x.Items
			case *Tuple:
				items = x.Items
			case *Set:
				items = x.Items
			default:
				return nil, Fail(formats.ErrUnsupported, "%s of a %s", name, TypeName(args[0]))
			}
			if len(args) > 1 {
				return nil, Fail(formats.ErrCorrupt, "%s with %d arguments", name, len(args))
			}
			k := newKeyer(DefaultMaxDepth)
			for _, v := range items {
				id, err := k.id(v)
				if err != nil {
					return nil, Fail(formats.ErrCorrupt, "%s: %v", name, err)
				}
				s.add(id, v)
			}
			s.keys = k
			return s, nil
		}
	case "builtins.bytearray":
		g.Call = func(args []any) (any, error) {
			switch {
			case len(args) == 0:
				return ByteArray{}, nil
			case len(args) == 1:
				if b, ok := args[0].(Bytes); ok {
					return ByteArray(append([]byte{}, b...)), nil
				}
			case len(args) == 2:
				b, err := encodeLatin1(args)
				if err != nil {
					return nil, err
				}
				return ByteArray(b), nil
			}
			return nil, Fail(formats.ErrUnsupported, "bytearray of %d arguments (%s)", len(args), TypeName(args[0]))
		}
	case "builtins.complex":
		g.Call = func(args []any) (any, error) {
			var parts [2]float64
			if len(args) > 2 {
				return nil, Fail(formats.ErrCorrupt, "complex with %d arguments", len(args))
			}
			for i, a := range args {
				switch x := a.(type) {
				case float64:
					parts[i] = x
				case int64:
					parts[i] = float64(x)
				default:
					return nil, Fail(formats.ErrUnsupported, "complex of a %s", TypeName(a))
				}
			}
			return complex(parts[0], parts[1]), nil
		}
	case "_codecs.encode":
		g.Call = func(args []any) (any, error) {
			b, err := encodeLatin1(args)
			if err != nil {
				return nil, err
			}
			return Bytes(b), nil
		}
	default:
		return nil
	}
	return g
}

// encodeLatin1 is _codecs.encode(str, "latin1").
func encodeLatin1(args []any) ([]byte, error) {
	if len(args) != 2 {
		return nil, Fail(formats.ErrCorrupt, "_codecs.encode with %d arguments", len(args))
	}
	s, ok1 := args[0].(string)
	enc, ok2 := args[1].(string)
	if !ok1 || !ok2 || enc != "latin1" && enc != "latin-1" {
		return nil, Fail(formats.ErrUnsupported, "_codecs.encode other than (str, 'latin1')")
	}
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xff {
			return nil, Fail(formats.ErrCorrupt, "_codecs.encode: character beyond latin1")
		}
		out = append(out, byte(r))
	}
	return out, nil
}
