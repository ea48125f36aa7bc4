package fold

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// torchStorageTypes maps torch.<X>Storage class names to dtypes.
var torchStorageTypes = map[string]snapshot.DType{
	"DoubleStorage": snapshot.F64, "FloatStorage": snapshot.F32, "HalfStorage": snapshot.F16,
	"BFloat16Storage": snapshot.BF16, "LongStorage": snapshot.I64, "IntStorage": snapshot.I32,
	"ShortStorage": snapshot.I16, "CharStorage": snapshot.I8, "ByteStorage": snapshot.U8,
	"BoolStorage": snapshot.Bool,
}

// Objects the unpickler builds for torch and for anything else.
type (
	storageClass struct{ name string }
	torchStorage struct {
		class string
		key   string
	}
	torchTensor struct {
		st     *torchStorage
		offset int64
		size   []int64
		stride []int64
	}
	rebuildTensor    struct{}
	rebuildParameter struct{}
	rebuildFromType  struct{}
	// pyClass and pyObject stand for every other global: calling or
	// instantiating records the arguments, BUILD records the state.
	pyClass struct {
		module, name string
	}
	pyObject struct {
		class *pyClass
		args  []any
		state any
	}
)

func (c *pyClass) Call(args ...any) (any, error)  { return &pyObject{class: c, args: args}, nil }
func (c *pyClass) PyNew(args ...any) (any, error) { return &pyObject{class: c, args: args}, nil }
func (o *pyObject) PySetState(state any) error    { o.state = state; return nil }
func (c *storageClass) Call(args ...any) (any, error) {
	return &pyObject{class: &pyClass{"torch", c.name}, args: args}, nil
}

func pyInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case *big.Int:
		if x.IsInt64() {
			return x.Int64(), true
		}
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func pyInts(v any) ([]int64, bool) {
	t, ok := v.(*types.Tuple)
	if !ok {
		return nil, false
	}
	out := make([]int64, t.Len())
	for i := range out {
		if out[i], ok = pyInt(t.Get(i)); !ok {
			return nil, false
		}
	}
	return out, true
}

// Call implements torch._utils._rebuild_tensor_v2(storage, storage_offset,
// size, stride, requires_grad, backward_hooks[, metadata]).
func (rebuildTensor) Call(args ...any) (any, error) {
	if len(args) < 4 {
		return nil, fmt.Errorf("_rebuild_tensor_v2: %d arguments", len(args))
	}
	st, ok := args[0].(*torchStorage)
	if !ok {
		return nil, fmt.Errorf("_rebuild_tensor_v2: storage argument is %T", args[0])
	}
	off, ok1 := pyInt(args[1])
	size, ok2 := pyInts(args[2])
	stride, ok3 := pyInts(args[3])
	if !ok1 || !ok2 || !ok3 || len(size) != len(stride) {
		return nil, errors.New("_rebuild_tensor_v2: malformed offset, size or stride")
	}
	return &torchTensor{st: st, offset: off, size: size, stride: stride}, nil
}

// Call implements torch._utils._rebuild_parameter[_with_state]: the
// Parameter is its data tensor.
func (rebuildParameter) Call(args ...any) (any, error) {
	if len(args) < 1 {
		return nil, errors.New("_rebuild_parameter: no arguments")
	}
	return args[0], nil
}

// Call implements torch._tensor._rebuild_from_type_v2(func, type, args,
// state): the tensor subclass is its base tensor.
func (rebuildFromType) Call(args ...any) (any, error) {
	if len(args) < 3 {
		return nil, errors.New("_rebuild_from_type_v2: too few arguments")
	}
	fn, ok := args[0].(types.Callable)
	targs, ok2 := args[2].(*types.Tuple)
	if !ok || !ok2 {
		return nil, errors.New("_rebuild_from_type_v2: malformed arguments")
	}
	return fn.Call(*targs...)
}

func findClass(module, name string) (any, error) {
	switch module + "." + name {
	case "torch._utils._rebuild_tensor_v2":
		return rebuildTensor{}, nil
	case "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state":
		return rebuildParameter{}, nil
	case "torch._tensor._rebuild_from_type_v2":
		return rebuildFromType{}, nil
	}
	if module == "torch" && strings.HasSuffix(name, "Storage") {
		return &storageClass{name: name}, nil
	}
	return &pyClass{module: module, name: name}, nil
}

// scanPickle walks the opcode stream of a pickle (protocols 0–5) and
// checks every length argument against the bytes left, so the
// unpickler never allocates more than the pickle's size per read.
func scanPickle(b []byte) error {
	pos := 0
	need := func(n uint64) error {
		if n > uint64(len(b)-pos) {
			return fmt.Errorf("pickle opcode at %d: argument of %d bytes exceeds the %d left", pos, n, len(b)-pos)
		}
		return nil
	}
	line := func() error {
		i := bytes.IndexByte(b[pos:], '\n')
		if i < 0 {
			return fmt.Errorf("pickle opcode at %d: unterminated line argument", pos)
		}
		pos += i + 1
		return nil
	}
	for pos < len(b) {
		op := b[pos]
		pos++
		var fixed int
		var lenBytes int
		switch op {
		case '.': // STOP
			return nil
		case '(', '0', '1', '2', 'N', 'Q', 'R', 'a', 'b', 'd', '}', 'e', 'l', ']', 'o', 's', 't', ')', 'u',
			0x81, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x97, 0x98:
		case 'K', 'q', 'h', 0x80, 0x82:
			fixed = 1
		case 'M', 0x83:
			fixed = 2
		case 'J', 'r', 'j', 0x84:
			fixed = 4
		case 'G':
			fixed = 8
		case 0x95: // FRAME: 8-byte length; the framed opcodes follow inline
			if err := need(8); err != nil {
				return err
			}
			n := uint64(b[pos]) | uint64(b[pos+1])<<8 | uint64(b[pos+2])<<16 | uint64(b[pos+3])<<24 |
				uint64(b[pos+4])<<32 | uint64(b[pos+5])<<40 | uint64(b[pos+6])<<48 | uint64(b[pos+7])<<56
			pos += 8
			if err := need(n); err != nil {
				return err
			}
		case 0x8a, 'U', 'C', 0x8c: // LONG1, SHORT_BINSTRING, SHORT_BINBYTES, SHORT_BINUNICODE
			lenBytes = 1
		case 0x8b, 'T', 'B', 'X': // LONG4, BINSTRING, BINBYTES, BINUNICODE
			lenBytes = 4
		case 0x8d, 0x8e, 0x96: // BINUNICODE8, BINBYTES8, BYTEARRAY8
			lenBytes = 8
		case 'I', 'L', 'F', 'S', 'V', 'P', 'g', 'p':
			if err := line(); err != nil {
				return err
			}
		case 'c', 'i':
			if err := line(); err != nil {
				return err
			}
			if err := line(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("pickle: unknown opcode 0x%02x at %d", op, pos-1)
		}
		if fixed > 0 {
			if err := need(uint64(fixed)); err != nil {
				return err
			}
			pos += fixed
		}
		if lenBytes > 0 {
			if err := need(uint64(lenBytes)); err != nil {
				return err
			}
			var n uint64
			for i := lenBytes - 1; i >= 0; i-- {
				n = n<<8 | uint64(b[pos+i])
			}
			if op == 0x8a && n == 0 {
				return fmt.Errorf("pickle: empty LONG1 at %d", pos-1)
			}
			pos += lenBytes
			if err := need(n); err != nil {
				return err
			}
			pos += int(n)
		}
	}
	return errors.New("pickle: no STOP opcode")
}

// unpickle runs gopickle with torch hooks. gopickle panics on some hostile
// inputs (unhashable dict keys); those become errors.
func unpickle(data []byte, storages map[string]*torchStorage) (out any, err error) {
	if err := scanPickle(data); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			// The panic value may quote the pickle; never echo it.
			out, err = nil, errors.New("pickle: the decoder failed on malformed input")
		}
	}()
	u := pickle.NewUnpickler(bytes.NewReader(data))
	u.FindClass = findClass
	u.PersistentLoad = func(id any) (any, error) {
		t, ok := id.(*types.Tuple)
		if !ok || t.Len() < 5 {
			return nil, fmt.Errorf("persistent id %T is not a storage tuple", id)
		}
		if s, _ := t.Get(0).(string); s != "storage" {
			return nil, errors.New(`persistent id kind is not "storage"`)
		}
		cls, ok := t.Get(1).(*storageClass)
		key, ok2 := t.Get(2).(string)
		if !ok || !ok2 {
			return nil, errors.New("malformed storage persistent id")
		}
		if st := storages[key]; st != nil {
			return st, nil
		}
		st := &torchStorage{class: cls.name, key: key}
		storages[key] = st
		return st, nil
	}
	return u.Load()
}

// tensorWalker collects tensors reachable from the unpickled object in
// depth-first order with dotted key paths.
type tensorWalker struct {
	seen  map[any]bool
	found []foundTensor
}

type foundTensor struct {
	path string
	t    *torchTensor
}

func keyString(k any) string {
	switch x := k.(type) {
	case string:
		return x
	case int, int64, bool, float64, *big.Int:
		return fmt.Sprint(x)
	}
	return fmt.Sprintf("%T", k)
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func (w *tensorWalker) walk(v any, path string, depth int) {
	if depth > 100 {
		return
	}
	switch x := v.(type) {
	case *torchTensor, *types.Dict, *types.OrderedDict, *types.List, *types.Tuple, *pyObject:
		if w.seen[x] {
			return
		}
		w.seen[x] = true
	}
	switch x := v.(type) {
	case *torchTensor:
		w.found = append(w.found, foundTensor{path, x})
	case *types.Dict:
		for _, e := range *x {
			w.walk(e.Value, join(path, keyString(e.Key)), depth+1)
		}
	case *types.OrderedDict:
		for el := x.List.Front(); el != nil; el = el.Next() {
			if e, ok := el.Value.(*types.OrderedDictEntry); ok {
				w.walk(e.Value, join(path, keyString(e.Key)), depth+1)
			}
		}
	case *types.List:
		for i, e := range *x {
			w.walk(e, join(path, strconv.Itoa(i)), depth+1)
		}
	case *types.Tuple:
		for i, e := range *x {
			w.walk(e, join(path, strconv.Itoa(i)), depth+1)
		}
	case *pyObject:
		for i, e := range x.args {
			w.walk(e, join(path, strconv.Itoa(i)), depth+1)
		}
		w.walk(x.state, path, depth+1)
	}
}

// parseTSAV extracts the tensors of a torch.save zip archive
// (<prefix>/data.pkl, <prefix>/data/<key>, <prefix>/byteorder). The
// pickle and every non-tensor object stay in the payload array byte for
// byte. A payload that is not a readable torch zip is kept opaque: it
// returns no tensors and a note instead of failing.
func parseTSAV(payload []byte, budget *formats.Budget) ([]tensorOut, string, error) {
	zr, err := openZip(payload)
	if err != nil {
		return nil, "not a torch zip archive: " + err.Error(), nil
	}
	members := map[string]*zip.File{}
	var pkl *zip.File
	for _, f := range zr.File {
		members[f.Name] = f
		if strings.HasSuffix(f.Name, "data.pkl") && (f.Name == "data.pkl" || strings.HasSuffix(f.Name, "/data.pkl")) && pkl == nil {
			pkl = f
		}
	}
	if pkl == nil {
		return nil, "torch zip without data.pkl", nil
	}
	prefix := strings.TrimSuffix(pkl.Name, "data.pkl")
	pdata, _, _, ok, err := memberBytes(payload, pkl, budget)
	if err != nil {
		return nil, "", err
	}
	if !ok {
		return nil, "data.pkl uses an unsupported zip method", nil
	}
	bigEndian := false
	if bo := members[prefix+"byteorder"]; bo != nil {
		b, _, _, ok, err := memberBytes(payload, bo, budget)
		if err != nil {
			return nil, "", err
		}
		bigEndian = ok && strings.TrimSpace(string(b)) == "big"
	}
	storages := map[string]*torchStorage{}
	obj, err := unpickle(pdata, storages)
	if err != nil {
		return nil, "data.pkl not decoded: " + err.Error(), nil
	}
	w := &tensorWalker{seen: map[any]bool{}}
	w.walk(obj, "", 0)
	var out []tensorOut
	var skipped []string
	// Storages shared by several tensors are read (and CRC-checked) once.
	type memberData struct {
		data       []byte
		off        int64
		stored, ok bool
		err        error
	}
	cache := map[*zip.File]memberData{}
	for _, ft := range w.found {
		t := ft.t
		dt, known := torchStorageTypes[t.st.class]
		if !known {
			skipped = append(skipped, ft.path+" ("+t.st.class+")")
			continue
		}
		f := members[prefix+"data/"+t.st.key]
		if f == nil {
			return nil, "", fmt.Errorf("tensor %q: storage member %sdata/%s missing", ft.path, prefix, t.st.key)
		}
		m, seen := cache[f]
		if !seen {
			m.data, m.off, m.stored, m.ok, m.err = memberBytes(payload, f, budget)
			cache[f] = m
		}
		sdata, soff, stored, ok, err := m.data, m.off, m.stored, m.ok, m.err
		if err != nil {
			return nil, "", err
		}
		if !ok {
			skipped = append(skipped, ft.path+" (zip method)")
			continue
		}
		es := int64(dt.Size())
		elems := int64(len(sdata)) / es
		n, err := elemCount(t.size, math.MaxInt64)
		if err != nil {
			return nil, "", fmt.Errorf("tensor %q: size %v: %w", ft.path, t.size, err)
		}
		name := ft.path
		if name == "" {
			name = "tensor" // the pickle's root object is a tensor
		}
		out1 := tensorOut{name: name, dtype: dt, shape: t.size}
		if bigEndian && es > 1 {
			out1.swap = int(es)
		}
		if n == 0 {
			out1.data = []byte{}
			out = append(out, out1)
			continue
		}
		// Bounds: the furthest element must lie inside the storage.
		if t.offset < 0 {
			return nil, "", fmt.Errorf("tensor %q: negative storage offset %d", ft.path, t.offset)
		}
		reach := t.offset
		contiguous := true
		expect := int64(1)
		for i := len(t.size) - 1; i >= 0; i-- {
			if t.stride[i] < 0 {
				return nil, "", fmt.Errorf("tensor %q: negative stride %v", ft.path, t.stride)
			}
			if t.size[i] > 1 {
				if t.stride[i] > (math.MaxInt64-reach)/(t.size[i]-1) {
					return nil, "", fmt.Errorf("tensor %q: stride %v overflows", ft.path, t.stride)
				}
				reach += (t.size[i] - 1) * t.stride[i]
				if t.stride[i] != expect {
					contiguous = false
				}
			}
			expect *= t.size[i]
		}
		if reach >= elems {
			return nil, "", fmt.Errorf("tensor %q: offset %d size %v stride %v reaches element %d of a %d-element storage", ft.path, t.offset, t.size, t.stride, reach, elems)
		}
		if !contiguous && n > int64(len(payload))/es {
			// Expanded views (stride 0) could make a small file gather
			// huge arrays; they stay opaque.
			skipped = append(skipped, ft.path+" (strided view larger than the chunk)")
			continue
		}
		if contiguous {
			raw := sdata[t.offset*es : (t.offset+n)*es]
			out1.data = raw
			out1.spliced, out1.off, out1.n = stored, soff+t.offset*es, n*es
		} else {
			// Every gathered view is a new copy: many stride-0 views of
			// one storage would cost views × size, so each is charged to
			// the file's budget before it is allocated.
			if err := budget.Take(n*es, fmt.Sprintf("tensor %q: strided view of %d elements", ft.path, n)); err != nil {
				return nil, "", err
			}
			raw := make([]byte, 0, n*es)
			idx := make([]int64, len(t.size))
			for c := int64(0); c < n; c++ {
				e := t.offset
				for i := range idx {
					e += idx[i] * t.stride[i]
				}
				raw = append(raw, sdata[e*es:(e+1)*es]...)
				for i := len(idx) - 1; i >= 0; i-- {
					idx[i]++
					if idx[i] < t.size[i] {
						break
					}
					idx[i] = 0
				}
			}
			out1.data = raw
		}
		if out1.swap > 0 {
			if err := budget.Take(int64(len(out1.data)), fmt.Sprintf("tensor %q: byte-swapped copy", ft.path)); err != nil {
				return nil, "", err
			}
			out1.data = append([]byte(nil), out1.data...)
			byteSwap(out1.data, out1.swap)
		}
		out = append(out, out1)
	}
	note := ""
	if len(skipped) > 0 {
		note = "tensors kept opaque (unsupported storage): " + strings.Join(skipped, ", ")
	}
	return out, note, nil
}
