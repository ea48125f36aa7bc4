package fold

import (
	"archive/zip"
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/pickle"
	"github.com/snapd-ml/snapd/snapshot"
)

// torchStorageTypes maps torch.<X>Storage class names to dtypes.
var torchStorageTypes = map[string]snapshot.DType{
	"DoubleStorage": snapshot.F64, "FloatStorage": snapshot.F32, "HalfStorage": snapshot.F16,
	"BFloat16Storage": snapshot.BF16, "LongStorage": snapshot.I64, "IntStorage": snapshot.I32,
	"ShortStorage": snapshot.I16, "CharStorage": snapshot.I8, "ByteStorage": snapshot.U8,
	"BoolStorage": snapshot.Bool,
}

// Objects the torch globals build inside the pickle machine's plain data.
type (
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
)

// rebuildTensor implements torch._utils._rebuild_tensor_v2(storage,
// storage_offset, size, stride, requires_grad, backward_hooks[, metadata]).
func rebuildTensor(args []any) (any, error) {
	if len(args) < 4 {
		return nil, pickle.Fail(formats.ErrCorrupt, "_rebuild_tensor_v2: %d arguments", len(args))
	}
	st, ok := args[0].(*torchStorage)
	if !ok {
		return nil, pickle.Fail(formats.ErrCorrupt, "_rebuild_tensor_v2: storage argument is a %s", pickle.TypeName(args[0]))
	}
	off, ok1 := pickle.AsInt(args[1])
	size, ok2 := pickle.AsInts(args[2])
	stride, ok3 := pickle.AsInts(args[3])
	if !ok1 || !ok2 || !ok3 || len(size) != len(stride) {
		return nil, pickle.Fail(formats.ErrCorrupt, "_rebuild_tensor_v2: malformed offset, size or stride")
	}
	return &torchTensor{st: st, offset: off, size: size, stride: stride}, nil
}

// rebuildParameter implements torch._utils._rebuild_parameter[_with_state]:
// the Parameter is its data tensor.
func rebuildParameter(args []any) (any, error) {
	if len(args) < 1 {
		return nil, pickle.Fail(formats.ErrCorrupt, "_rebuild_parameter: no arguments")
	}
	return args[0], nil
}

// rebuildFromType implements torch._tensor._rebuild_from_type_v2(func,
// type, args, state): the tensor subclass is its base tensor, func(*args).
func rebuildFromType(args []any) (any, error) {
	if len(args) < 3 {
		return nil, pickle.Fail(formats.ErrCorrupt, "_rebuild_from_type_v2: too few arguments")
	}
	targs, ok := args[2].(*pickle.Tuple)
	if !ok {
		return nil, pickle.Fail(formats.ErrCorrupt, "_rebuild_from_type_v2: malformed arguments")
	}
	switch fn := args[0].(type) {
	case *pickle.Global:
		if fn.Call != nil {
			return fn.Call(targs.Items)
		}
	case *pickle.Opaque:
		return &pickle.Opaque{Module: fn.Module, Name: fn.Name, Offset: fn.Offset, Reason: fn.Reason, Class: fn, Called: true, Args: targs.Items}, nil
	}
	return nil, pickle.Fail(formats.ErrCorrupt, "_rebuild_from_type_v2: function is a %s", pickle.TypeName(args[0]))
}

// resolveTSAV is the allowlist of TSAV chunks: the plain-data globals and
// the torch globals above; every other global becomes a placeholder
// (walked for tensors, kept verbatim in the payload).
func resolveTSAV(module, name string) (*pickle.Global, error) {
	if g := pickle.PlainGlobal(module, name); g != nil {
		return g, nil
	}
	g := &pickle.Global{Module: module, Name: name}
	switch module + "." + name {
	case "torch._utils._rebuild_tensor_v2":
		g.Call = rebuildTensor
	case "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state":
		g.Call = rebuildParameter
	case "torch._tensor._rebuild_from_type_v2":
		g.Call = rebuildFromType
	default:
		if module == "torch" && strings.HasSuffix(name, "Storage") {
			g.Value = name
			return g, nil
		}
		return nil, nil
	}
	return g, nil
}

// unpickle runs the pickle machine over data.pkl, charging the decode
// budget for what it builds.
func unpickle(ctx context.Context, data []byte, storages map[string]*torchStorage, budget *formats.Budget) (any, error) {
	persist := func(id any) (any, error) {
		t, ok := id.(*pickle.Tuple)
		if !ok || len(t.Items) < 5 {
			return nil, fmt.Errorf("persistent id is a %s, not a storage tuple", pickle.TypeName(id))
		}
		if s, _ := t.Items[0].(string); s != "storage" {
			return nil, errors.New(`persistent id kind is not "storage"`)
		}
		cls, ok := t.Items[1].(*pickle.Global)
		key, ok2 := t.Items[2].(string)
		var class string
		if ok {
			class, ok = cls.Value.(string)
		}
		if !ok || !ok2 {
			return nil, errors.New("malformed storage persistent id")
		}
		if st := storages[key]; st != nil {
			return st, nil
		}
		st := &torchStorage{class: class, key: key}
		storages[key] = st
		return st, nil
	}
	return pickle.Load(ctx, data, pickle.Options{Resolve: resolveTSAV, Persistent: persist, Budget: budget, Placeholders: true})
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
	case int64, bool, float64, *big.Int:
		return fmt.Sprint(x)
	}
	return pickle.TypeName(k)
}

func (w *tensorWalker) seq(items []any, path string, depth int) {
	for i, e := range items {
		w.walk(e, join(path, strconv.Itoa(i)), depth+1)
	}
}

func (w *tensorWalker) dict(d *pickle.Dict, path string, depth int) {
	for i, k := range d.Keys {
		w.walk(d.Vals[i], join(path, keyString(k)), depth+1)
	}
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
	case *torchTensor, *pickle.Dict, *pickle.List, *pickle.Tuple, *pickle.Opaque:
		if w.seen[x] {
			return
		}
		w.seen[x] = true
	}
	switch x := v.(type) {
	case *torchTensor:
		w.found = append(w.found, foundTensor{path, x})
	case *pickle.Dict:
		w.dict(x, path, depth)
	case *pickle.List:
		w.seq(x.Items, path, depth)
	case *pickle.Tuple:
		w.seq(x.Items, path, depth)
	case *pickle.Opaque:
		w.seq(x.Args, path, depth)
		w.walk(x.State, path, depth+1)
		if x.Entries != nil {
			w.dict(x.Entries, path, depth)
		}
		w.seq(x.Items, path, depth)
	}
}

// parseTSAV extracts the tensors of a torch.save zip archive
// (<prefix>/data.pkl, <prefix>/data/<key>, <prefix>/byteorder). The
// pickle and every non-tensor object stay in the payload array byte for
// byte. A payload that is not a readable torch zip or pickle is kept
// opaque: it returns no tensors and a note instead of failing; a pickle
// that exceeds the decode budget or its step bound (ErrLimit) and a
// cancelled ctx are errors.
func parseTSAV(ctx context.Context, payload []byte, budget *formats.Budget) ([]tensorOut, string, error) {
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
	obj, err := unpickle(ctx, pdata, storages, budget)
	if err != nil {
		if errors.Is(err, formats.ErrLimit) || ctx.Err() != nil {
			return nil, "", fmt.Errorf("data.pkl: %w", err)
		}
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
