package torch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"unicode/utf8"

	"github.com/snapd-ml/snapd/snapshot"
)

// The Python values the unpickler builds. Nothing else can appear: every
// global is resolved through an allowlist to one of the builtin* values,
// and calling one builds a value of this list.
type (
	pyList  struct{ items []any }
	pyTuple struct{ items []any }
	// pyDict is a dict or a collections.OrderedDict: pairs in insertion
	// order, index for key lookup, state from BUILD (OrderedDict only).
	pyDict struct {
		ordered bool
		keys    []any
		vals    []any
		index   map[string]int
		state   *pyDict
	}
	pyBytes []byte
	// tensorVal is a tensor rebuilt by _rebuild_tensor[_v2] or a
	// Parameter wrapping one.
	tensorVal struct {
		st           *storageVal
		offset       int64
		size         []int64
		stride       []int64
		requiresGrad bool
		param        bool
	}
	// storageVal is a storage named by a persistent id: (key, dtype,
	// numel) and, in the legacy format, a view of a root storage.
	storageVal struct {
		key     string
		dtype   snapshot.DType
		numel   int64
		viewOff int64 // legacy storage views: element offset into the root
	}
	// global is an allowlisted global; the unpickler calls it for REDUCE
	// and NEWOBJ.
	global struct {
		name    string
		storage snapshot.DType // storage classes: their dtype
	}
	mark struct{}
)

// unpickler limits.
const (
	maxMemo      = 1 << 20 // memo entries
	maxMarkDepth = 1000    // nested MARKs
	maxDepth     = 1000    // nested containers (see walk)
	maxNodes     = 1 << 20 // values visited when walking the result (shared references count each time)
)

// persistentLoader resolves a BINPERSID id (already a Python value) to a
// storage.
type persistentLoader func(pid any) (*storageVal, error)

// unpickler is a pickle virtual machine that builds only plain data,
// allowlisted torch objects and storages. It never runs code: a global is
// either on the allowlist (and then means a fixed Go behaviour) or the
// pickle is refused naming it.
type unpickler struct {
	b       []byte
	pos     int
	base    int64  // offset of b in the file, for errors
	where   string // member or stream name, for errors
	stack   []any
	marks   [][]any
	memo    map[uint32]any
	persist persistentLoader
}

// pickleError is a located unpickling failure; it becomes an *Error.
type pickleError struct {
	off   int64
	check string
	err   error
}

func (u *unpickler) fail(op int, sentinel error, format string, args ...any) error {
	return &pickleError{off: u.base + int64(op), check: fmt.Sprintf(format, args...), err: sentinel}
}

func (e *pickleError) Error() string { return fmt.Sprintf("offset %d: %s", e.off, e.check) }

// load runs the pickle starting at u.pos up to its STOP and returns the
// result; u.pos is left after the STOP.
func (u *unpickler) load() (any, error) {
	if u.memo == nil {
		u.memo = map[uint32]any{}
	}
	u.stack = u.stack[:0]
	u.marks = u.marks[:0]
	for {
		at := u.pos
		if u.pos >= len(u.b) {
			return nil, u.fail(at, ErrCorrupt, "pickle ends without STOP")
		}
		op := u.b[u.pos]
		u.pos++
		if err := u.step(op, at); err != nil {
			if err == errStop {
				if len(u.stack) != 1 || len(u.marks) != 0 {
					return nil, u.fail(at, ErrCorrupt, "STOP with %d values on the stack", len(u.stack))
				}
				return u.stack[0], nil
			}
			return nil, err
		}
	}
}

var errStop = fmt.Errorf("stop")

func (u *unpickler) need(at, n int) ([]byte, error) {
	if n < 0 || n > len(u.b)-u.pos {
		return nil, u.fail(at, ErrCorrupt, "opcode 0x%02x needs %d bytes, %d left", u.b[at], n, len(u.b)-u.pos)
	}
	p := u.b[u.pos : u.pos+n]
	u.pos += n
	return p, nil
}

func (u *unpickler) lenArg(at, width int) (int, error) {
	p, err := u.need(at, width)
	if err != nil {
		return 0, err
	}
	var n uint64
	for i := width - 1; i >= 0; i-- {
		n = n<<8 | uint64(p[i])
	}
	if n > uint64(len(u.b)-u.pos) {
		return 0, u.fail(at, ErrCorrupt, "opcode 0x%02x: length %d exceeds the %d bytes left", u.b[at], n, len(u.b)-u.pos)
	}
	return int(n), nil
}

func (u *unpickler) line(at int) (string, error) {
	for i := u.pos; i < len(u.b); i++ {
		if u.b[i] == '\n' {
			s := string(u.b[u.pos:i])
			u.pos = i + 1
			return s, nil
		}
	}
	return "", u.fail(at, ErrCorrupt, "opcode 0x%02x: unterminated line argument", u.b[at])
}

func (u *unpickler) push(v any) { u.stack = append(u.stack, v) }

func (u *unpickler) pop(at int) (any, error) {
	if len(u.stack) == 0 {
		return nil, u.fail(at, ErrCorrupt, "opcode 0x%02x: stack underflow", u.b[at])
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top(at int) (any, error) {
	if len(u.stack) == 0 {
		return nil, u.fail(at, ErrCorrupt, "opcode 0x%02x: stack underflow", u.b[at])
	}
	return u.stack[len(u.stack)-1], nil
}

func (u *unpickler) popMark(at int) ([]any, error) {
	if len(u.marks) == 0 {
		return nil, u.fail(at, ErrCorrupt, "opcode 0x%02x without MARK", u.b[at])
	}
	items := u.stack
	u.stack = u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	return items, nil
}

func (u *unpickler) memoPut(at int, i uint32) error {
	v, err := u.top(at)
	if err != nil {
		return err
	}
	if _, ok := u.memo[i]; !ok && len(u.memo) >= maxMemo {
		return u.fail(at, ErrLimit, "memo holds more than %d entries", maxMemo)
	}
	u.memo[i] = v
	return nil
}

func (u *unpickler) memoGet(at int, i uint32) error {
	v, ok := u.memo[i]
	if !ok {
		return u.fail(at, ErrCorrupt, "memo entry %d is not set", i)
	}
	u.push(v)
	return nil
}

func (u *unpickler) step(op byte, at int) error {
	switch op {
	case 0x80: // PROTO
		p, err := u.need(at, 1)
		if err != nil {
			return err
		}
		if p[0] > 5 {
			return u.fail(at, ErrUnsupported, "pickle protocol %d", p[0])
		}
	case 0x95: // FRAME: its opcodes follow inline
		if _, err := u.lenArg(at, 8); err != nil {
			return err
		}
	case '.': // STOP
		return errStop
	case '(': // MARK
		if len(u.marks) >= maxMarkDepth {
			return u.fail(at, ErrLimit, "more than %d nested MARKs", maxMarkDepth)
		}
		u.marks = append(u.marks, u.stack)
		u.stack = nil
	case '0': // POP
		if len(u.stack) == 0 {
			_, err := u.popMark(at)
			return err
		}
		_, err := u.pop(at)
		return err
	case '1': // POP_MARK
		_, err := u.popMark(at)
		return err
	case '2': // DUP
		v, err := u.top(at)
		if err != nil {
			return err
		}
		u.push(v)
	case 'N':
		u.push(nil)
	case 0x88:
		u.push(true)
	case 0x89:
		u.push(false)
	case 'J': // BININT
		p, err := u.need(at, 4)
		if err != nil {
			return err
		}
		u.push(int64(int32(binary.LittleEndian.Uint32(p))))
	case 'K': // BININT1
		p, err := u.need(at, 1)
		if err != nil {
			return err
		}
		u.push(int64(p[0]))
	case 'M': // BININT2
		p, err := u.need(at, 2)
		if err != nil {
			return err
		}
		u.push(int64(binary.LittleEndian.Uint16(p)))
	case 0x8a, 0x8b: // LONG1, LONG4
		w := 1
		if op == 0x8b {
			w = 4
		}
		n, err := u.lenArg(at, w)
		if err != nil {
			return err
		}
		if n > 1<<16 {
			return u.fail(at, ErrLimit, "integer of %d bytes", n)
		}
		p, _ := u.need(at, n)
		u.push(decodeLong(p))
	case 'I', 'L': // INT, LONG (text)
		s, err := u.line(at)
		if err != nil {
			return err
		}
		switch s {
		case "01":
			u.push(true)
		case "00":
			u.push(false)
		default:
			if len(s) > 0 && s[len(s)-1] == 'L' {
				s = s[:len(s)-1]
			}
			if len(s) > 1000 {
				return u.fail(at, ErrLimit, "integer of %d digits", len(s))
			}
			bi, ok := new(big.Int).SetString(s, 10)
			if !ok {
				return u.fail(at, ErrCorrupt, "malformed INT argument")
			}
			u.push(normInt(bi))
		}
	case 'G': // BINFLOAT
		p, err := u.need(at, 8)
		if err != nil {
			return err
		}
		u.push(math.Float64frombits(binary.BigEndian.Uint64(p)))
	case 'F': // FLOAT (text)
		s, err := u.line(at)
		if err != nil {
			return err
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return u.fail(at, ErrCorrupt, "malformed FLOAT argument")
		}
		u.push(f)
	case 'X', 0x8c, 0x8d: // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
		w := map[byte]int{'X': 4, 0x8c: 1, 0x8d: 8}[op]
		n, err := u.lenArg(at, w)
		if err != nil {
			return err
		}
		p, _ := u.need(at, n)
		if !utf8.Valid(p) {
			return u.fail(at, ErrCorrupt, "string is not valid UTF-8")
		}
		u.push(string(p))
	case 'U', 'T': // SHORT_BINSTRING, BINSTRING (Python 2 str: ASCII in torch files)
		w := 1
		if op == 'T' {
			w = 4
		}
		n, err := u.lenArg(at, w)
		if err != nil {
			return err
		}
		p, _ := u.need(at, n)
		u.push(latin1(p))
	case 'C', 'B', 0x8e: // SHORT_BINBYTES, BINBYTES, BINBYTES8
		w := map[byte]int{'C': 1, 'B': 4, 0x8e: 8}[op]
		n, err := u.lenArg(at, w)
		if err != nil {
			return err
		}
		p, _ := u.need(at, n)
		u.push(pyBytes(append([]byte(nil), p...)))
	case ')':
		u.push(&pyTuple{})
	case 't':
		items, err := u.popMark(at)
		if err != nil {
			return err
		}
		u.push(&pyTuple{items: items})
	case 0x85, 0x86, 0x87: // TUPLE1..3
		n := int(op - 0x84)
		if len(u.stack) < n {
			return u.fail(at, ErrCorrupt, "TUPLE%d: stack underflow", n)
		}
		items := append([]any(nil), u.stack[len(u.stack)-n:]...)
		u.stack = u.stack[:len(u.stack)-n]
		u.push(&pyTuple{items: items})
	case ']':
		u.push(&pyList{})
	case 'l': // LIST
		items, err := u.popMark(at)
		if err != nil {
			return err
		}
		u.push(&pyList{items: items})
	case 'a', 'e': // APPEND, APPENDS
		var items []any
		if op == 'a' {
			v, err := u.pop(at)
			if err != nil {
				return err
			}
			items = []any{v}
		} else {
			var err error
			if items, err = u.popMark(at); err != nil {
				return err
			}
		}
		t, err := u.top(at)
		if err != nil {
			return err
		}
		l, ok := t.(*pyList)
		if !ok {
			return u.fail(at, ErrCorrupt, "APPEND to a %s", typeName(t))
		}
		l.items = append(l.items, items...)
	case '}':
		u.push(&pyDict{})
	case 'd': // DICT
		items, err := u.popMark(at)
		if err != nil {
			return err
		}
		d := &pyDict{}
		if err := u.setItems(at, d, items); err != nil {
			return err
		}
		u.push(d)
	case 's', 'u': // SETITEM, SETITEMS
		var items []any
		if op == 's' {
			if len(u.stack) < 2 {
				return u.fail(at, ErrCorrupt, "SETITEM: stack underflow")
			}
			items = append([]any(nil), u.stack[len(u.stack)-2:]...)
			u.stack = u.stack[:len(u.stack)-2]
		} else {
			var err error
			if items, err = u.popMark(at); err != nil {
				return err
			}
		}
		t, err := u.top(at)
		if err != nil {
			return err
		}
		d, ok := t.(*pyDict)
		if !ok {
			return u.fail(at, ErrCorrupt, "SETITEM on a %s", typeName(t))
		}
		return u.setItems(at, d, items)
	case 'c': // GLOBAL
		mod, err := u.line(at)
		if err != nil {
			return err
		}
		name, err := u.line(at)
		if err != nil {
			return err
		}
		g, err := u.findGlobal(at, mod, name)
		if err != nil {
			return err
		}
		u.push(g)
	case 0x93: // STACK_GLOBAL
		if len(u.stack) < 2 {
			return u.fail(at, ErrCorrupt, "STACK_GLOBAL: stack underflow")
		}
		mod, ok1 := u.stack[len(u.stack)-2].(string)
		name, ok2 := u.stack[len(u.stack)-1].(string)
		u.stack = u.stack[:len(u.stack)-2]
		if !ok1 || !ok2 {
			return u.fail(at, ErrCorrupt, "STACK_GLOBAL of non-strings")
		}
		g, err := u.findGlobal(at, mod, name)
		if err != nil {
			return err
		}
		u.push(g)
	case 'R', 0x81: // REDUCE, NEWOBJ
		args, err := u.pop(at)
		if err != nil {
			return err
		}
		fn, err := u.pop(at)
		if err != nil {
			return err
		}
		g, ok := fn.(*global)
		t, ok2 := args.(*pyTuple)
		if !ok || !ok2 {
			return u.fail(at, ErrCorrupt, "REDUCE of a %s with %s arguments", typeName(fn), typeName(args))
		}
		v, err := u.call(at, g, t.items)
		if err != nil {
			return err
		}
		u.push(v)
	case 'b': // BUILD
		state, err := u.pop(at)
		if err != nil {
			return err
		}
		inst, err := u.top(at)
		if err != nil {
			return err
		}
		return u.build(at, inst, state)
	case 'Q': // BINPERSID
		pid, err := u.pop(at)
		if err != nil {
			return err
		}
		if u.persist == nil {
			return u.fail(at, ErrCorrupt, "persistent id where none is allowed")
		}
		st, err := u.persist(pid)
		if err != nil {
			var located *Error
			if errors.As(err, &located) {
				return err // already names its zip member
			}
			return u.fail(at, ErrCorrupt, "persistent id: %v", err)
		}
		u.push(st)
	case 'h', 'j': // BINGET, LONG_BINGET
		w := 1
		if op == 'j' {
			w = 4
		}
		p, err := u.need(at, w)
		if err != nil {
			return err
		}
		return u.memoGet(at, leUint(p))
	case 'q', 'r': // BINPUT, LONG_BINPUT
		w := 1
		if op == 'r' {
			w = 4
		}
		p, err := u.need(at, w)
		if err != nil {
			return err
		}
		return u.memoPut(at, leUint(p))
	case 'g', 'p': // GET, PUT (text)
		s, err := u.line(at)
		if err != nil {
			return err
		}
		i, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return u.fail(at, ErrCorrupt, "malformed memo index")
		}
		if op == 'g' {
			return u.memoGet(at, uint32(i))
		}
		return u.memoPut(at, uint32(i))
	case 0x94: // MEMOIZE
		return u.memoPut(at, uint32(len(u.memo)))
	default:
		return u.fail(at, ErrRefused, "pickle opcode 0x%02x is not allowed", op)
	}
	return nil
}

func leUint(p []byte) uint32 {
	var n uint32
	for i := len(p) - 1; i >= 0; i-- {
		n = n<<8 | uint32(p[i])
	}
	return n
}

func latin1(p []byte) string {
	r := make([]rune, len(p))
	for i, c := range p {
		r[i] = rune(c)
	}
	return string(r)
}

// decodeLong decodes a two's-complement little-endian integer.
func decodeLong(p []byte) any {
	if len(p) == 0 {
		return int64(0)
	}
	if len(p) <= 8 {
		var v uint64
		for i := len(p) - 1; i >= 0; i-- {
			v = v<<8 | uint64(p[i])
		}
		shift := uint(64 - 8*len(p))
		return int64(v<<shift) >> shift
	}
	be := make([]byte, len(p))
	for i := range p {
		be[len(p)-1-i] = p[i]
	}
	bi := new(big.Int).SetBytes(be)
	if p[len(p)-1]&0x80 != 0 {
		bi.Sub(bi, new(big.Int).Lsh(big.NewInt(1), uint(8*len(p))))
	}
	return normInt(bi)
}

// normInt returns an int64 when bi fits, bi otherwise.
func normInt(bi *big.Int) any {
	if bi.IsInt64() {
		return bi.Int64()
	}
	return bi
}

func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case pyBytes:
		return "bytes"
	case *pyList:
		return "list"
	case *pyTuple:
		return "tuple"
	case *pyDict:
		if x.ordered {
			return "OrderedDict"
		}
		return "dict"
	case *tensorVal:
		return "tensor"
	case *storageVal:
		return "storage"
	case *global:
		return "global " + x.name
	}
	return fmt.Sprintf("%T", v)
}

// keyID is the identity of a hashable dict key (Python equality for the
// types a checkpoint uses).
func keyID(k any) (string, bool) {
	switch x := k.(type) {
	case nil:
		return "N", true
	case bool:
		if x {
			return "i1", true
		}
		return "i0", true
	case int64:
		return "i" + strconv.FormatInt(x, 10), true
	case *big.Int:
		return "i" + x.String(), true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<62 {
			return "i" + strconv.FormatInt(int64(x), 10), true
		}
		return "f" + strconv.FormatFloat(x, 'g', -1, 64), true
	case string:
		return "s" + x, true
	case pyBytes:
		return "b" + string(x), true
	case *pyTuple:
		s := "("
		for _, e := range x.items {
			id, ok := keyID(e)
			if !ok {
				return "", false
			}
			s += strconv.Itoa(len(id)) + ":" + id
		}
		return s + ")", true
	}
	return "", false
}

func (u *unpickler) setItems(at int, d *pyDict, items []any) error {
	if len(items)%2 != 0 {
		return u.fail(at, ErrCorrupt, "odd number of dict items")
	}
	for i := 0; i < len(items); i += 2 {
		if err := d.set(items[i], items[i+1]); err != nil {
			return u.fail(at, ErrCorrupt, "%v", err)
		}
	}
	return nil
}

func (d *pyDict) set(k, v any) error {
	id, ok := keyID(k)
	if !ok {
		return fmt.Errorf("unhashable dict key of type %s", typeName(k))
	}
	if d.index == nil {
		d.index = map[string]int{}
	}
	if i, ok := d.index[id]; ok {
		d.vals[i] = v
		return nil
	}
	d.index[id] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

// Globals. The allowlist is the subset of torch's weights_only loader
// (torch/_weights_only_unpickler.py) that a checkpoint of dense tensors
// needs; the rest of that list is named as unsupported, anything else as
// refused.
const (
	gOrderedDict      = "collections.OrderedDict"
	gRebuildTensorV2  = "torch._utils._rebuild_tensor_v2"
	gRebuildTensor    = "torch._utils._rebuild_tensor"
	gRebuildParameter = "torch._utils._rebuild_parameter"
	gRebuildParamSt   = "torch._utils._rebuild_parameter_with_state"
	gParameter        = "torch.nn.parameter.Parameter"
	gSize             = "torch.Size"
	gCodecsEncode     = "_codecs.encode"
)

// storageClasses maps torch's typed storage class names to dtypes.
var storageClasses = map[string]snapshot.DType{
	"DoubleStorage": snapshot.F64, "FloatStorage": snapshot.F32, "HalfStorage": snapshot.F16,
	"BFloat16Storage": snapshot.BF16, "LongStorage": snapshot.I64, "IntStorage": snapshot.I32,
	"ShortStorage": snapshot.I16, "CharStorage": snapshot.I8, "ByteStorage": snapshot.U8,
	"BoolStorage": snapshot.Bool,
}

// weightsOnlyOther lists globals torch's weights_only loader accepts but
// this codec does not read (sparse, quantized, meta, complex tensors).
var weightsOnlyOther = map[string]bool{
	"torch._utils._rebuild_sparse_tensor": true, "torch._utils._rebuild_sparse_csr_tensor": true,
	"torch._utils._rebuild_meta_tensor_no_storage": true, "torch._utils._rebuild_qtensor": true,
	"torch._utils._rebuild_wrapper_subclass": true, "torch._tensor._rebuild_from_type_v2": true,
	"torch.serialization._get_layout": true, "torch.Tensor": true, "torch.device": true,
	"torch.ComplexFloatStorage": true, "torch.ComplexDoubleStorage": true,
	"torch.QInt8Storage": true, "torch.QUInt8Storage": true, "torch.QInt32Storage": true,
	"torch.QUInt4x2Storage": true, "torch.QUInt2x4Storage": true,
}

func (u *unpickler) findGlobal(at int, mod, name string) (*global, error) {
	full := mod + "." + name
	switch full {
	case gOrderedDict, gRebuildTensorV2, gRebuildTensor, gRebuildParameter, gRebuildParamSt, gParameter, gSize, gCodecsEncode:
		return &global{name: full}, nil
	case "torch.UntypedStorage", "torch.storage.UntypedStorage", "torch._UntypedStorage", "torch.storage._UntypedStorage":
		return &global{name: full, storage: snapshot.U8}, nil
	}
	if mod == "torch" {
		if dt, ok := storageClasses[name]; ok {
			return &global{name: full, storage: dt}, nil
		}
	}
	if weightsOnlyOther[full] {
		return nil, u.fail(at, ErrUnsupported, "global %s (allowed by torch's weights_only loader) is not supported", printableName(full))
	}
	return nil, u.fail(at, ErrRefused, "global %s is not allowed (only torch's weights_only globals are)", printableName(full))
}

// printableName quotes a global's name when it holds anything but
// identifier characters, so an error never carries raw file bytes.
func printableName(s string) string {
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

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func asInts(v any) ([]int64, bool) {
	t, ok := v.(*pyTuple)
	if !ok {
		return nil, false
	}
	out := make([]int64, len(t.items))
	for i, e := range t.items {
		if out[i], ok = asInt(e); !ok {
			return nil, false
		}
	}
	return out, true
}

func emptyDict(v any) bool {
	d, ok := v.(*pyDict)
	return v == nil || ok && len(d.keys) == 0
}

// call applies an allowlisted global to its arguments.
func (u *unpickler) call(at int, g *global, args []any) (any, error) {
	switch g.name {
	case gOrderedDict:
		if len(args) != 0 {
			return nil, u.fail(at, ErrUnsupported, "OrderedDict with %d arguments", len(args))
		}
		return &pyDict{ordered: true}, nil
	case gSize:
		if len(args) == 0 {
			return &pyTuple{}, nil
		}
		if t, ok := args[0].(*pyTuple); ok && len(args) == 1 {
			return t, nil
		}
		return nil, u.fail(at, ErrCorrupt, "torch.Size of %s", typeName(args[0]))
	case gCodecsEncode:
		if len(args) != 2 {
			return nil, u.fail(at, ErrCorrupt, "_codecs.encode with %d arguments", len(args))
		}
		s, ok1 := args[0].(string)
		enc, ok2 := args[1].(string)
		if !ok1 || !ok2 || enc != "latin1" && enc != "latin-1" {
			return nil, u.fail(at, ErrUnsupported, "_codecs.encode other than (str, 'latin1')")
		}
		out := make([]byte, 0, len(s))
		for _, r := range s {
			if r > 0xff {
				return nil, u.fail(at, ErrCorrupt, "_codecs.encode: character beyond latin1")
			}
			out = append(out, byte(r))
		}
		return pyBytes(out), nil
	case gRebuildTensorV2, gRebuildTensor:
		if len(args) < 4 || g.name == gRebuildTensorV2 && (len(args) < 6 || len(args) > 7) {
			return nil, u.fail(at, ErrCorrupt, "%s with %d arguments", g.name, len(args))
		}
		st, ok := args[0].(*storageVal)
		if !ok {
			return nil, u.fail(at, ErrCorrupt, "%s: storage argument is a %s", g.name, typeName(args[0]))
		}
		off, ok1 := asInt(args[1])
		size, ok2 := asInts(args[2])
		stride, ok3 := asInts(args[3])
		if !ok1 || !ok2 || !ok3 || len(size) != len(stride) {
			return nil, u.fail(at, ErrCorrupt, "%s: malformed offset, size or stride", g.name)
		}
		t := &tensorVal{st: st, offset: off, size: size, stride: stride}
		if len(args) >= 6 {
			rg, ok := args[4].(bool)
			if !ok {
				return nil, u.fail(at, ErrCorrupt, "%s: requires_grad is a %s", g.name, typeName(args[4]))
			}
			t.requiresGrad = rg
			if !emptyDict(args[5]) {
				return nil, u.fail(at, ErrUnsupported, "%s: tensor with backward hooks", g.name)
			}
			if len(args) == 7 && !emptyDict(args[6]) {
				return nil, u.fail(at, ErrUnsupported, "%s: tensor with metadata", g.name)
			}
		}
		return t, nil
	case gRebuildParameter, gRebuildParamSt, gParameter:
		if len(args) < 1 {
			return nil, u.fail(at, ErrCorrupt, "%s without arguments", g.name)
		}
		t, ok := args[0].(*tensorVal)
		if !ok {
			return nil, u.fail(at, ErrCorrupt, "%s of a %s", g.name, typeName(args[0]))
		}
		p := *t
		p.param = true
		p.requiresGrad = true
		if len(args) >= 2 {
			rg, ok := args[1].(bool)
			if !ok {
				return nil, u.fail(at, ErrCorrupt, "%s: requires_grad is a %s", g.name, typeName(args[1]))
			}
			p.requiresGrad = rg
		}
		if len(args) >= 3 && !emptyDict(args[2]) {
			return nil, u.fail(at, ErrUnsupported, "%s with backward hooks", g.name)
		}
		if len(args) >= 4 && !emptyDict(args[3]) {
			return nil, u.fail(at, ErrUnsupported, "%s with state", g.name)
		}
		return &p, nil
	}
	if g.storage != snapshot.Invalid {
		return nil, u.fail(at, ErrUnsupported, "storage class %s called directly", g.name)
	}
	return nil, u.fail(at, ErrCorrupt, "global %s is not callable", g.name)
}

// build implements BUILD: only an OrderedDict's attribute dict (torch's
// state_dict()._metadata) is kept; an empty state is ignored.
func (u *unpickler) build(at int, inst, state any) error {
	if emptyDict(state) {
		return nil
	}
	d, ok := inst.(*pyDict)
	sd, ok2 := state.(*pyDict)
	if !ok || !d.ordered || !ok2 {
		return u.fail(at, ErrUnsupported, "BUILD of a %s with a %s state", typeName(inst), typeName(state))
	}
	if d.state == nil {
		d.state = &pyDict{}
	}
	for i, k := range sd.keys {
		if _, ok := k.(string); !ok {
			return u.fail(at, ErrCorrupt, "BUILD: attribute name is a %s", typeName(k))
		}
		if err := d.state.set(k, sd.vals[i]); err != nil {
			return u.fail(at, ErrCorrupt, "%v", err)
		}
	}
	return nil
}
