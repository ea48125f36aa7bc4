package torch

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats/pickle"
	"github.com/snapd-ml/snapd/snapshot"
)

// unsupportedValue is the walker's failure for valid plain data the tree
// cannot hold.
type unsupportedValue struct{ msg string }

func (u unsupportedValue) Error() string { return u.msg }

// walker turns the unpickled object into the JSON tree of AttrTree and
// the list of tensors with their array names.
type walker struct {
	nodes   int
	open    map[any]bool
	names   map[string]bool
	tensors []namedTensor
}

type namedTensor struct {
	name string
	t    *tensorVal
}

func parseFloat(s string) (float64, error) {
	switch s {
	case "inf":
		return math.Inf(1), nil
	case "-inf":
		return math.Inf(-1), nil
	case "nan":
		return math.NaN(), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("malformed float %s", strconv.QuoteToASCII(truncate(s, 40)))
	}
	return f, nil
}

// arrayName makes a unique portable array name of a key path: the keys
// joined by '.', every byte WTXT cannot carry replaced by '_'; "tensor"
// for the root; a suffix _2, _3, ... on collision.
func (w *walker) arrayName(path []string) string {
	s := strings.Join(path, ".")
	b := []byte(s)
	for i, c := range b {
		if !snapshot.NameByte(c) {
			b[i] = '_'
		}
	}
	s = string(b)
	if s == "" {
		s = "tensor"
	}
	if len(s) > 1000 {
		s = s[:1000]
	}
	name := s
	for n := 2; w.names[name] || !snapshot.PortableName(name); n++ {
		name = s + "_" + strconv.Itoa(n)
	}
	w.names[name] = true
	return name
}

// node converts v; path is the key path to v (callees may append to it:
// its elements are only read, never kept).
func (w *walker) node(v any, path []string, depth int) (any, error) {
	w.nodes++
	if w.nodes > maxNodes {
		return nil, fmt.Errorf("the object expands to more than %d values", maxNodes)
	}
	if depth > maxDepth {
		return nil, fmt.Errorf("containers nested deeper than %d", maxDepth)
	}
	switch x := v.(type) {
	case *pickle.List, *pickle.Tuple, *pickle.Dict:
		if w.open[x] {
			return nil, fmt.Errorf("%s at %s contains itself", pickle.TypeName(x), strconv.QuoteToASCII(truncate(strings.Join(path, "."), 200)))
		}
		w.open[x] = true
		defer delete(w.open, x)
	}
	seq := func(items []any) ([]any, error) {
		out := make([]any, len(items))
		for i, e := range items {
			n, err := w.node(e, append(path, strconv.Itoa(i)), depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	}
	switch x := v.(type) {
	case nil, bool, string:
		return x, nil
	case int64:
		return map[string]any{"int": strconv.FormatInt(x, 10)}, nil
	case *big.Int:
		return map[string]any{"int": x.String()}, nil
	case float64:
		return map[string]any{"float": pickle.FormatFloat(x)}, nil
	case pickle.Bytes:
		return map[string]any{"bytes": base64.StdEncoding.EncodeToString(x)}, nil
	case *pickle.List:
		items, err := seq(x.Items)
		return map[string]any{"list": items}, err
	case *pickle.Tuple:
		items, err := seq(x.Items)
		return map[string]any{"tuple": items}, err
	case *pickle.Dict:
		pairs, err := w.pairs(x, path, depth)
		if err != nil {
			return nil, err
		}
		kind := "dict"
		if x.Class == gOrderedDict {
			kind = "odict"
		}
		n := map[string]any{kind: pairs}
		if x.Attrs != nil {
			st, err := w.pairs(x.Attrs, append(path, "_state"), depth)
			if err != nil {
				return nil, err
			}
			n["state"] = st
		}
		return n, nil
	case *tensorVal:
		name := w.arrayName(path)
		w.tensors = append(w.tensors, namedTensor{name, x})
		n := map[string]any{"tensor": name}
		if x.param {
			n["param"] = true
		}
		if x.requiresGrad {
			n["requires_grad"] = true
		}
		return n, nil
	}
	at := strconv.QuoteToASCII(truncate(strings.Join(path, "."), 200))
	switch v.(type) {
	case *pickle.Set, complex128, pickle.ByteArray:
		// Plain data torch's loader allows that torch.tree has no form for.
		return nil, unsupportedValue{fmt.Sprintf("a %s at %s is not supported in a checkpoint tree", pickle.TypeName(v), at)}
	}
	return nil, fmt.Errorf("a %s at %s is not checkpoint data", pickle.TypeName(v), at)
}

func (w *walker) pairs(d *pickle.Dict, path []string, depth int) ([]any, error) {
	out := make([]any, len(d.Keys))
	for i, k := range d.Keys {
		kn, err := w.node(k, path, depth+1)
		if err != nil {
			return nil, err
		}
		if _, isT := k.(*tensorVal); isT {
			return nil, fmt.Errorf("tensor used as a dict key")
		}
		vn, err := w.node(d.Vals[i], append(path, pickle.KeyString(k)), depth+1)
		if err != nil {
			return nil, err
		}
		out[i] = []any{kn, vn}
	}
	return out, nil
}

// canonicalJSON encodes v with sorted keys, no HTML escaping, no newline.
func canonicalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// contiguous reports whether stride is the C-order stride of size
// (dimensions of size 1 may have any stride, as in torch).
func contiguous(size, stride []int64) bool {
	expect := int64(1)
	for i := len(size) - 1; i >= 0; i-- {
		if size[i] != 1 && stride[i] != expect {
			return false
		}
		expect *= size[i]
	}
	return true
}

// reach returns the largest storage element a view touches (offset when
// it has no elements), with overflow checks.
func reach(offset int64, size, stride []int64) (int64, error) {
	if offset < 0 {
		return 0, fmt.Errorf("negative storage offset %d", offset)
	}
	r := offset
	for i := range size {
		if size[i] < 0 || stride[i] < 0 {
			return 0, fmt.Errorf("negative size or stride")
		}
		if size[i] > 1 {
			if stride[i] > 0 && size[i]-1 > (math.MaxInt64-r)/stride[i] {
				return 0, fmt.Errorf("size %v × stride %v overflows", size, stride)
			}
			r += (size[i] - 1) * stride[i]
		}
	}
	return r, nil
}

func jsonInts(v []int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// snapshot builds the snapshot from the unpickled object.
func (d *decoder) snapshot(obj any) (*snapshot.Snapshot, error) {
	w := &walker{open: map[any]bool{}, names: map[string]bool{}}
	tree, err := w.node(obj, nil, 0)
	if err != nil {
		sentinel := ErrCorrupt
		var uv unsupportedValue
		switch {
		case w.nodes > maxNodes || strings.Contains(err.Error(), "nested deeper"):
			sentinel = ErrLimit
		case errors.As(err, &uv):
			sentinel = ErrUnsupported
		}
		return nil, d.errf("data.pkl", -1, sentinel, "%v", err)
	}
	treeJSON, err := canonicalJSON(tree)
	if err != nil {
		return nil, d.errf("data.pkl", -1, ErrCorrupt, "tree: %v", err)
	}
	s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta()}
	if !defaultTree(obj, w) {
		s.Attrs = map[string]string{AttrTree: string(treeJSON)}
	}
	arrays, err := d.arrays(w)
	if err != nil {
		return nil, err
	}
	s.Arrays = arrays
	if s.Attrs != nil {
		if err := d.skeleton(s, w); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// arrays makes the arrays of the tensors w found, their storages
// numbered in order of first use.
func (d *decoder) arrays(w *walker) ([]*snapshot.Array, error) {
	// Storages are numbered in order of first use; count the views of each.
	ordinal := map[string]int{}
	uses := map[string]int{}
	dtypes := map[string]snapshot.DType{}
	for _, nt := range w.tensors {
		k := nt.t.st.key
		if _, ok := ordinal[k]; !ok {
			ordinal[k] = len(ordinal)
			dtypes[k] = nt.t.dtype
		}
		if dtypes[k] != nt.t.dtype {
			return nil, d.errf(fmt.Sprintf("tensor %q", nt.name), -1, ErrUnsupported, "storage %s is viewed as %s and as %s", quoteKey(k), dtypes[k], nt.t.dtype)
		}
		uses[k]++
	}
	var out []*snapshot.Array
	budget := d.c.expandBudget(d.size)
	for _, nt := range w.tensors {
		if err := d.ctx.Err(); err != nil {
			return nil, err
		}
		a, n, err := d.array(nt, uses[nt.t.st.key] > 1, ordinal[nt.t.st.key])
		if err != nil {
			return nil, err
		}
		if n > budget {
			return nil, d.errf(fmt.Sprintf("tensor %q", nt.name), -1, ErrLimit, "the arrays exceed %d bytes, the budget for a %d-byte file: views expand it too much", d.c.expandBudget(d.size), d.size)
		}
		budget -= n
		out = append(out, a)
	}
	return out, nil
}

func (d *decoder) array(nt namedTensor, shared bool, ordinal int) (*snapshot.Array, int64, error) {
	t := nt.t
	where := fmt.Sprintf("tensor %q", nt.name)
	root := d.st[t.st.key]
	rg, ok := d.regions[t.st.key]
	if root == nil || !ok {
		return nil, 0, d.errf(where, -1, ErrCorrupt, "storage without data")
	}
	a := &snapshot.Array{Name: nt.name, DType: t.dtype, Shape: append([]int64{}, t.size...)}
	nb, err := a.NumBytes()
	if err != nil {
		return nil, 0, d.errf(where, -1, ErrCorrupt, "shape %v: %v", t.size, err)
	}
	es := int64(a.DType.Size())
	n := nb / es
	// The storage in elements of the tensor's dtype (an untyped storage,
	// _rebuild_tensor_v3, counts bytes).
	rootBytes, viewBytes := root.numel*int64(root.dtype.Size()), t.st.viewOff*int64(root.dtype.Size())
	if rootBytes%es != 0 || viewBytes%es != 0 {
		return nil, 0, d.errf(where, -1, ErrCorrupt, "a %s view of a %d-byte storage", a.DType, rootBytes)
	}
	rootNumel, elems := rootBytes/es, rg.bytes/es
	if t.offset > math.MaxInt64-viewBytes/es {
		return nil, 0, d.errf(where, -1, ErrCorrupt, "storage offset overflows")
	}
	off := viewBytes/es + t.offset
	last, err := reach(off, t.size, t.stride)
	if err != nil {
		return nil, 0, d.errf(where, -1, ErrCorrupt, "%v", err)
	}
	if n > 0 && last >= elems {
		return nil, 0, d.errf(where, rg.off, ErrCorrupt, "view (offset %d, size %v, stride %v) reaches element %d, %s holds %d elements", off, t.size, t.stride, last, rg.where, elems)
	}
	cont := contiguous(t.size, t.stride)
	if shared || off != 0 || !cont || n != rootNumel {
		a.Attrs = map[string]string{
			AttrStorage:      strconv.Itoa(ordinal),
			AttrStorageNumel: strconv.FormatInt(rootNumel, 10),
			AttrOffset:       strconv.FormatInt(off, 10),
			AttrStride:       jsonInts(t.stride),
		}
	}
	swap := 0
	if d.swap && es > 1 {
		swap = int(es)
		if a.DType.IsComplex() {
			swap /= 2 // real and imaginary parts swap separately
		}
	}
	switch {
	case n == 0:
		a.Data = snapshot.Bytes{}
	case cont && swap == 0:
		a.Data = snapshot.Section(d.r, rg.off+off*es, nb)
	default:
		a.Data = newViewSource(d.r, rg.off, es, off, t.size, t.stride, swap)
	}
	return a, nb, nil
}

// defaultTree reports whether obj is what Encode writes for a snapshot
// without AttrTree: an OrderedDict, without attributes, of plain tensors
// keyed by their array names in ascending order. Such a checkpoint needs
// no torch.tree (so it converts to formats without attributes).
func defaultTree(obj any, w *walker) bool {
	d, ok := obj.(*pickle.Dict)
	if !ok || d.Class != gOrderedDict || d.Attrs != nil || len(d.Keys) != len(w.tensors) {
		return false
	}
	for i, k := range d.Keys {
		name, ok := k.(string)
		t, ok2 := d.Vals[i].(*tensorVal)
		if !ok || !ok2 || t.param || t.requiresGrad || w.tensors[i].name != name || i > 0 && d.Keys[i-1].(string) >= name {
			return false
		}
	}
	return true
}
