package pickle

import (
	"fmt"
	"math/big"
	"strconv"
)

// The values a Machine builds. A pickle's result, and every argument a
// Global's Call or the PersistentLoader receives, is made of:
//
//	nil (None), bool, int64, *big.Int (ints beyond int64), float64,
//	complex128 (only from a resolver: builtins.complex), string, Bytes,
//	ByteArray, *List, *Tuple, *Dict, *Set, *Global (a resolved global),
//	*Opaque (a global outside the allowlist, Options.Placeholders),
//
// and whatever Go values the resolver's callables and the persistent
// loader return (a torch tensor, a storage). Nothing else appears: the
// machine never runs code of the pickle.
type (
	// Bytes is a Python bytes object.
	Bytes []byte
	// ByteArray is a Python bytearray (BYTEARRAY8, builtins.bytearray).
	ByteArray []byte

	// List is a Python list. APPEND and APPENDS extend Items.
	List struct{ Items []any }

	// Tuple is a Python tuple. Tuples are immutable: their nesting depth
	// (1 + the deepest tuple inside) is fixed when they are built and
	// bounded by Options.MaxDepth, and their identity as a dict key is
	// computed at most once.
	Tuple struct {
		Items []any
		depth int
		key   keyCache
	}

	// Dict is a Python dict, or a dict subclass a resolver builds (Class
	// names it, e.g. "collections.OrderedDict"). Keys and Vals are in
	// insertion order; setting an existing key replaces its value in
	// place, as Python does. Attrs is the attribute dict BUILD gave a
	// subclass instance (a state_dict's _metadata), nil when none.
	Dict struct {
		Class string
		Keys  []any
		Vals  []any
		Attrs *Dict
		index map[uint64]int
		keys  *keyer
	}

	// Set is a Python set or, with Frozen, a frozenset, in insertion
	// order without duplicates.
	Set struct {
		Frozen bool
		Items  []any
		index  map[uint64]bool
		keys   *keyer
	}

	// Global is a global the resolver allows: what GLOBAL and
	// STACK_GLOBAL push. Call, when set, builds the value of REDUCE and
	// NEWOBJ (and NEWOBJ_EX without keyword arguments) from the
	// arguments; it must only build data, never block, and return
	// errors made with Fail (or any error, taken as ErrCorrupt unless it
	// wraps a formats sentinel). A Global without Call is a value (a
	// dtype, a storage class): applying it is an error. Value is the
	// resolver's own data for it.
	Global struct {
		Module, Name string
		Call         func(args []any) (any, error)
		Value        any
	}

	// Opaque stands for a global outside the allowlist when
	// Options.Placeholders is set, and for whatever the pickle builds
	// from one: nothing is looked up or run, the opcodes applied to it
	// are recorded so a caller can carry the object verbatim or describe
	// it. The global itself is an Opaque with Class nil; calling it
	// (REDUCE, NEWOBJ, NEWOBJ_EX) makes a new Opaque whose Class is the
	// global and Args (and Kwargs) its arguments; BUILD records State;
	// APPEND/APPENDS on it fill Items and SETITEM(S) fill Entries.
	// Offset is the file offset of the GLOBAL opcode. Reason is why the
	// global is not allowed (the resolver's refusal, or "not on the
	// allowlist").
	Opaque struct {
		Module, Name string
		Offset       int64
		Reason       string
		Class        *Opaque
		Called       bool
		Args         []any
		Kwargs       *Dict
		State        any
		Items        []any
		Entries      *Dict
	}

	// mark is the MARK object on the stack of the text LIST/DICT/TUPLE
	// forms (never visible outside the machine).
	mark struct{}
)

// FullName is module.name.
func (g *Global) FullName() string { return g.Module + "." + g.Name }

// FullName is module.name of the global the placeholder stands for.
func (o *Opaque) FullName() string { return o.Module + "." + o.Name }

// Len is the number of entries.
func (d *Dict) Len() int { return len(d.Keys) }

// Lookup returns the value of the string key k (a linear scan: for
// callers reading a few known keys).
func (d *Dict) Lookup(k string) (any, bool) {
	for i, key := range d.Keys {
		if s, ok := key.(string); ok && s == k {
			return d.Vals[i], true
		}
	}
	return nil, false
}

// Set sets d[k] = v with Python's key equality for the hashable values a
// checkpoint uses (None, bool, int, float, str, bytes, tuples of them,
// globals and placeholders by identity): an existing key keeps its
// position. Other keys fail as unhashable. Set is for dicts built outside
// a Machine (encoders); a Machine sets items itself, with its bounds.
func (d *Dict) Set(k, v any) error {
	if d.keys == nil {
		d.keys = newKeyer(DefaultMaxDepth)
	}
	id, err := d.keys.id(k)
	if err != nil {
		return err
	}
	d.put(id, k, v)
	return nil
}

// put sets the entry of key identity id; it reports whether the key is
// new.
func (d *Dict) put(id uint64, k, v any) bool {
	if d.index == nil {
		d.index = map[uint64]int{}
	}
	if i, ok := d.index[id]; ok {
		d.Vals[i] = v
		return false
	}
	d.index[id] = len(d.Keys)
	d.Keys = append(d.Keys, k)
	d.Vals = append(d.Vals, v)
	return true
}

// add adds an item of identity id; it reports whether it is new.
func (s *Set) add(id uint64, v any) bool {
	if s.index == nil {
		s.index = map[uint64]bool{}
	}
	if s.index[id] {
		return false
	}
	s.index[id] = true
	s.Items = append(s.Items, v)
	return true
}

// NewTuple returns a tuple of items (for callers building values outside
// a Machine, e.g. encoders and tests).
func NewTuple(items ...any) *Tuple {
	t := &Tuple{Items: items, depth: 1}
	for _, e := range items {
		if c, ok := e.(*Tuple); ok && c.depth+1 > t.depth {
			t.depth = c.depth + 1
		}
	}
	return t
}

// Depth is the tuple's nesting depth: 1, plus the depth of the deepest
// tuple among its items.
func (t *Tuple) Depth() int { return t.depth }

// TypeName is the Python type name of v for messages ("int", "tuple",
// "global torch.Size", "placeholder numpy.dtype"); a resolver's Go value
// is named by its Go type.
func TypeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case complex128:
		return "complex"
	case string:
		return "str"
	case Bytes:
		return "bytes"
	case ByteArray:
		return "bytearray"
	case *List:
		return "list"
	case *Tuple:
		return "tuple"
	case *Dict:
		if x.Class != "" {
			return PrintableName(x.Class)
		}
		return "dict"
	case *Set:
		if x.Frozen {
			return "frozenset"
		}
		return "set"
	case *Global:
		return "global " + PrintableName(x.FullName())
	case *Opaque:
		if x.Class != nil {
			return "object of " + PrintableName(x.FullName())
		}
		return "global " + PrintableName(x.FullName())
	case mark:
		return "MARK"
	}
	return fmt.Sprintf("%T", v)
}

// PrintableName returns a global's or key's name as it may appear in a
// message: as is when it holds only identifier characters and dots (at
// most 200), otherwise quoted in ASCII and truncated, so an error never
// carries raw file bytes.
func PrintableName(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '.' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') || i >= 200 {
			return strconv.QuoteToASCII(truncate(s, 200))
		}
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// AsInt returns v as an int64 when it is an int (or bool) that fits.
func AsInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case *big.Int:
		if x.IsInt64() {
			return x.Int64(), true
		}
	}
	return 0, false
}

// AsInts returns a tuple (or list) of ints as []int64.
func AsInts(v any) ([]int64, bool) {
	var items []any
	switch x := v.(type) {
	case *Tuple:
		items = x.Items
	case *List:
		items = x.Items
	default:
		return nil, false
	}
	out := make([]int64, len(items))
	for i, e := range items {
		var ok bool
		if out[i], ok = AsInt(e); !ok {
			return nil, false
		}
	}
	return out, true
}

// NormInt returns bi as an int64 when it fits, bi otherwise (the
// machine's representation of a Python int).
func NormInt(bi *big.Int) any {
	if bi.IsInt64() {
		return bi.Int64()
	}
	return bi
}
