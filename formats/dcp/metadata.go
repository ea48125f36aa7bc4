package dcp

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/snapd-ml/snapd/snapshot"
)

// Class names of the objects a .metadata pickle holds (module.name). The
// dataclasses lived in torch.distributed._shard.sharded_tensor.metadata
// (TensorProperties) before torch 2.2; both spellings are read.
const (
	modMetadata   = "torch.distributed.checkpoint.metadata"
	modFilesystem = "torch.distributed.checkpoint.filesystem"
	modShardMeta  = "torch.distributed._shard.sharded_tensor.metadata"

	clsMetadata      = modMetadata + ".Metadata"
	clsTensorStorage = modMetadata + ".TensorStorageMetadata"
	clsBytesStorage  = modMetadata + ".BytesStorageMetadata"
	clsChunk         = modMetadata + ".ChunkStorageMetadata"
	clsIndex         = modMetadata + ".MetadataIndex"
	clsProps         = modMetadata + ".TensorProperties"
	clsPropsOld      = modShardMeta + ".TensorProperties"
	clsMemFormat     = modMetadata + "._MEM_FORMAT_ENCODING"
	clsMemFormatOld  = modShardMeta + "._MEM_FORMAT_ENCODING"
	clsStorageInfo   = modFilesystem + "._StorageInfo"
	clsStorageMeta   = modMetadata + ".StorageMeta"
)

// The value model the .metadata unpickler hands to interpret: plain data
// plus the few torch objects DCP pickles. Scalars are nil, bool, int64,
// float64 and string.
type (
	// pyInst is an instance of a class (a dataclass, an enum member):
	// what NEWOBJ/REDUCE built from args and BUILD gave as state.
	pyInst struct {
		class string // module.name
		args  []any
		state any
	}
	pyTuple []any
	pyList  []any
	pyDict  struct{ keys, vals []any }
	// pySize is a torch.Size.
	pySize []int64
	// pyDType is a torch dtype (torch.float32 -> "float32").
	pyDType string
	// pyLayout is a torch layout ("torch.strided").
	pyLayout string
	// pyOther is anything else (a global outside what DCP pickles),
	// named for messages.
	pyOther struct{ what string }
)

func (d *pyDict) get(k string) (any, bool) {
	for i, key := range d.keys {
		if s, ok := key.(string); ok && s == k {
			return d.vals[i], true
		}
	}
	return nil, false
}

// typeName names v's type for messages (never its content).
func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case *pyInst:
		return x.class
	case pyTuple:
		return "tuple"
	case pyList:
		return "list"
	case *pyDict:
		return "dict"
	case pySize:
		return "torch.Size"
	case pyDType:
		return "torch.dtype"
	case pyLayout:
		return "torch.layout"
	case *pyOther:
		return x.what
	}
	return fmt.Sprintf("%T", v)
}

// Kind of an item.
type Kind uint8

const (
	// Tensor: a TensorStorageMetadata entry, assembled from its chunks.
	Tensor Kind = iota + 1
	// Bytes: a BytesStorageMetadata entry (a non-tensor leaf, the
	// torch.save bytes of the object), kept verbatim.
	Bytes
)

// Storage is where an item's bytes are (a _StorageInfo).
type Storage struct {
	File   string // relative_path: a plain file name in the directory
	Offset int64
	Length int64
}

// Chunk is one ChunkStorageMetadata of a tensor and the storage of its
// item.
type Chunk struct {
	Offsets []int64
	Sizes   []int64
	Storage Storage
}

// Properties are a tensor's TensorProperties beyond its dtype.
type Properties struct {
	RequiresGrad bool
	PinMemory    bool
	// MemoryFormat: 0 contiguous, 1 channels_last, 2 preserve_format.
	MemoryFormat int64
}

// Item is one entry of state_dict_metadata.
type Item struct {
	FQN  string
	Kind Kind
	// Tensor items.
	DType  snapshot.DType
	Size   []int64
	Props  Properties
	Chunks []Chunk
	// Bytes items.
	Storage Storage
}

// PathElem is one key of planner_data's path of an FQN: a string or an
// int (a list index).
type PathElem struct {
	Str   string
	Int   int64
	IsInt bool
}

// Metadata is what snapd takes from a .metadata file.
type Metadata struct {
	// Items sorted by FQN.
	Items []*Item
	// PlannerData maps an FQN to its path in the nested state dict
	// (DefaultSavePlanner's flatten mapping); nil when the file has none.
	PlannerData map[string][]PathElem
}

// torchDTypes maps torch dtype names to snapshot dtypes.
var torchDTypes = map[string]snapshot.DType{
	"float64": snapshot.F64, "float32": snapshot.F32, "float16": snapshot.F16, "bfloat16": snapshot.BF16,
	"int64": snapshot.I64, "int32": snapshot.I32, "int16": snapshot.I16, "int8": snapshot.I8,
	"uint64": snapshot.U64, "uint32": snapshot.U32, "uint16": snapshot.U16, "uint8": snapshot.U8,
	"bool": snapshot.Bool, "float8_e4m3fn": snapshot.F8E4M3, "float8_e5m2": snapshot.F8E5M2,
	"float8_e8m0fnu": snapshot.F8E8M0, "complex64": snapshot.C64, "complex128": snapshot.C128,
}

// torchName is the torch dtype name of d ("" when torch has none).
func torchName(d snapshot.DType) string {
	for n, t := range torchDTypes {
		if t == d {
			return n
		}
	}
	return ""
}

// interpreter turns the unpickled value into Metadata, checking every
// field it takes; fields it does not need (storage_meta, version, fields
// newer torch adds) are ignored whatever they hold.
type interpreter struct {
	file string // .metadata path, for errors
	lim  Limits
}

func (in *interpreter) errf(where, fqn string, err error, format string, args ...any) error {
	return errf(in.file, where, -1, fqn, err, format, args...)
}

// fields returns the attribute dict of a dataclass instance of class cls.
func (in *interpreter) fields(v any, where, fqn string, classes ...string) (*pyDict, error) {
	o, ok := v.(*pyInst)
	if !ok || !oneOf(o.class, classes) {
		return nil, in.errf(where, fqn, ErrCorrupt, "is a %s, not a %s", typeName(v), classes[0])
	}
	if len(o.args) != 0 {
		return nil, in.errf(where, fqn, ErrCorrupt, "%s built with %d arguments, want none", classes[0], len(o.args))
	}
	switch s := o.state.(type) {
	case *pyDict:
		return s, nil
	case nil:
		return &pyDict{}, nil
	}
	return nil, in.errf(where, fqn, ErrCorrupt, "%s state is a %s, not a dict", classes[0], typeName(o.state))
}

func oneOf(s string, set []string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

func (in *interpreter) size(v any, where, fqn string) ([]int64, error) {
	s, ok := v.(pySize)
	if !ok {
		return nil, in.errf(where, fqn, ErrCorrupt, "is a %s, not a torch.Size", typeName(v))
	}
	if len(s) > in.lim.MaxRank {
		return nil, in.errf(where, fqn, ErrLimit, "%d dimensions, more than %d", len(s), in.lim.MaxRank)
	}
	for _, d := range s {
		if d < 0 {
			return nil, in.errf(where, fqn, ErrCorrupt, "negative dimension %d", d)
		}
	}
	return []int64(s), nil
}

func (in *interpreter) int(v any, where, fqn string) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	}
	return 0, in.errf(where, fqn, ErrCorrupt, "is a %s, not an int", typeName(v))
}

// interpret reads the Metadata object.
func (in *interpreter) interpret(root any) (*Metadata, error) {
	top, err := in.fields(root, "Metadata", "", clsMetadata)
	if err != nil {
		return nil, err
	}
	sdm, ok := top.get("state_dict_metadata")
	if !ok {
		return nil, in.errf("Metadata", "", ErrCorrupt, "no state_dict_metadata")
	}
	sd, ok := sdm.(*pyDict)
	if !ok {
		return nil, in.errf("Metadata.state_dict_metadata", "", ErrCorrupt, "is a %s, not a dict", typeName(sdm))
	}
	if len(sd.keys) > in.lim.MaxItems {
		return nil, in.errf("Metadata.state_dict_metadata", "", ErrLimit, "%d entries, more than %d", len(sd.keys), in.lim.MaxItems)
	}
	md := &Metadata{}
	byFQN := make(map[string]*Item, len(sd.keys))
	chunks := 0
	for i, k := range sd.keys {
		fqn, ok := k.(string)
		if !ok {
			return nil, in.errf("Metadata.state_dict_metadata", "", ErrCorrupt, "key %d is a %s, not a str", i, typeName(k))
		}
		if _, dup := byFQN[fqn]; dup {
			return nil, in.errf("Metadata.state_dict_metadata", fqn, ErrCorrupt, "listed twice")
		}
		it, err := in.item(fqn, sd.vals[i])
		if err != nil {
			return nil, err
		}
		chunks += len(it.Chunks)
		if chunks > in.lim.MaxChunks {
			return nil, in.errf("Metadata.state_dict_metadata", fqn, ErrLimit, "more than %d chunks in all", in.lim.MaxChunks)
		}
		byFQN[fqn] = it
		md.Items = append(md.Items, it)
	}
	sort.Slice(md.Items, func(i, j int) bool { return md.Items[i].FQN < md.Items[j].FQN })
	if err := in.storage(top, byFQN); err != nil {
		return nil, err
	}
	if pd, ok := top.get("planner_data"); ok {
		md.PlannerData, err = in.plannerData(pd, byFQN)
		if err != nil {
			return nil, err
		}
	}
	return md, nil
}

func (in *interpreter) item(fqn string, v any) (*Item, error) {
	const where = "Metadata.state_dict_metadata"
	if o, ok := v.(*pyInst); ok && o.class == clsBytesStorage {
		return &Item{FQN: fqn, Kind: Bytes}, nil
	}
	f, err := in.fields(v, where, fqn, clsTensorStorage, clsBytesStorage)
	if err != nil {
		return nil, err
	}
	it := &Item{FQN: fqn, Kind: Tensor}
	pv, _ := f.get("properties")
	if it.DType, it.Props, err = in.properties(pv, fqn); err != nil {
		return nil, err
	}
	sv, _ := f.get("size")
	if it.Size, err = in.size(sv, where+".size", fqn); err != nil {
		return nil, err
	}
	if _, err := snapshot.NumElements(it.Size); err != nil {
		return nil, in.errf(where+".size", fqn, ErrLimit, "%v", err)
	}
	cv, _ := f.get("chunks")
	cl, ok := cv.(pyList)
	if !ok {
		return nil, in.errf(where+".chunks", fqn, ErrCorrupt, "is a %s, not a list", typeName(cv))
	}
	if len(cl) == 0 {
		return nil, in.errf(where+".chunks", fqn, ErrCorrupt, "a tensor without chunks")
	}
	if len(cl) > in.lim.MaxChunks {
		return nil, in.errf(where+".chunks", fqn, ErrLimit, "%d chunks, more than %d", len(cl), in.lim.MaxChunks)
	}
	for i, c := range cl {
		w := fmt.Sprintf("chunk %d", i)
		cf, err := in.fields(c, w, fqn, clsChunk)
		if err != nil {
			return nil, err
		}
		ov, _ := cf.get("offsets")
		off, err := in.size(ov, w+" offsets", fqn)
		if err != nil {
			return nil, err
		}
		zv, _ := cf.get("sizes")
		sz, err := in.size(zv, w+" sizes", fqn)
		if err != nil {
			return nil, err
		}
		it.Chunks = append(it.Chunks, Chunk{Offsets: off, Sizes: sz})
	}
	return it, nil
}

// properties reads a TensorProperties: pickled with the tuple state
// (dtype, layout, requires_grad, memory format encoding, pin_memory) of
// its __getstate__ (torch >= 2.0), or a dict state (older torch).
func (in *interpreter) properties(v any, fqn string) (snapshot.DType, Properties, error) {
	const where = "TensorProperties"
	var p Properties
	o, ok := v.(*pyInst)
	if !ok || (o.class != clsProps && o.class != clsPropsOld) {
		return 0, p, in.errf(where, fqn, ErrCorrupt, "is a %s, not a %s", typeName(v), clsProps)
	}
	var dt, layout, rg, mf, pin any
	switch s := o.state.(type) {
	case pyTuple:
		if len(s) != 5 {
			return 0, p, in.errf(where, fqn, ErrCorrupt, "state has %d fields, want 5", len(s))
		}
		dt, layout, rg, mf, pin = s[0], s[1], s[2], s[3], s[4]
	case *pyDict:
		dt, _ = s.get("dtype")
		layout, _ = s.get("layout")
		rg, _ = s.get("requires_grad")
		mf, _ = s.get("memory_format")
		pin, _ = s.get("pin_memory")
	default:
		return 0, p, in.errf(where, fqn, ErrCorrupt, "state is a %s", typeName(o.state))
	}
	name, ok := dt.(pyDType)
	if !ok {
		return 0, p, in.errf(where+".dtype", fqn, ErrCorrupt, "is a %s, not a torch.dtype", typeName(dt))
	}
	d, ok := torchDTypes[string(name)]
	if !ok {
		return 0, p, in.errf(where+".dtype", fqn, ErrUnsupported, "dtype torch.%s has no snapshot counterpart", printable(string(name)))
	}
	switch l := layout.(type) {
	case nil:
	case pyLayout:
		if l != "torch.strided" && l != "strided" {
			return 0, p, in.errf(where+".layout", fqn, ErrUnsupported, "layout %s (only dense strided tensors are read)", printable(string(l)))
		}
	default:
		return 0, p, in.errf(where+".layout", fqn, ErrCorrupt, "is a %s, not a torch.layout", typeName(layout))
	}
	if rg != nil {
		b, ok := rg.(bool)
		if !ok {
			return 0, p, in.errf(where+".requires_grad", fqn, ErrCorrupt, "is a %s, not a bool", typeName(rg))
		}
		p.RequiresGrad = b
	}
	if pin != nil {
		b, ok := pin.(bool)
		if !ok {
			return 0, p, in.errf(where+".pin_memory", fqn, ErrCorrupt, "is a %s, not a bool", typeName(pin))
		}
		p.PinMemory = b
	}
	switch m := mf.(type) {
	case nil:
	case *pyInst:
		if (m.class != clsMemFormat && m.class != clsMemFormatOld) || len(m.args) != 1 {
			return 0, p, in.errf(where+".memory_format", fqn, ErrCorrupt, "is a %s, not a %s", typeName(mf), clsMemFormat)
		}
		e, ok := m.args[0].(int64)
		if !ok || e < 0 || e > 2 {
			return 0, p, in.errf(where+".memory_format", fqn, ErrCorrupt, "encoding is not 0, 1 or 2")
		}
		p.MemoryFormat = e
	default:
		return 0, p, in.errf(where+".memory_format", fqn, ErrCorrupt, "is a %s, not a %s", typeName(mf), clsMemFormat)
	}
	return d, p, nil
}

// storage reads storage_data: MetadataIndex(fqn, offset) -> _StorageInfo.
// torch looks entries up by (fqn, offset) (index is only a hint), so
// that is the key here too.
func (in *interpreter) storage(top *pyDict, items map[string]*Item) error {
	const where = "Metadata.storage_data"
	v, _ := top.get("storage_data")
	sd, ok := v.(*pyDict)
	if !ok {
		return in.errf(where, "", ErrCorrupt, "is a %s, not a dict", typeName(v))
	}
	type key struct{ fqn, off string }
	seen := make(map[key]bool, len(sd.keys))
	chunkAt := map[string]map[string]int{} // fqn -> offsets -> chunk index
	for _, it := range items {
		if it.Kind != Tensor {
			continue
		}
		m := make(map[string]int, len(it.Chunks))
		for i, c := range it.Chunks {
			k := offKey(c.Offsets)
			if j, dup := m[k]; dup {
				if !equalInts(it.Chunks[j].Sizes, c.Sizes) {
					return in.errf(fmt.Sprintf("chunk %d", i), it.FQN, ErrCorrupt, "starts where chunk %d does with other sizes (overlapping chunks)", j)
				}
				continue // the same chunk listed twice (older torch without dedup): one item
			}
			m[k] = i
		}
		chunkAt[it.FQN] = m
	}
	found := map[string]bool{}
	for i, k := range sd.keys {
		w := fmt.Sprintf("%s entry %d", where, i)
		kf, err := in.fields(k, w, "", clsIndex)
		if err != nil {
			return err
		}
		fv, _ := kf.get("fqn")
		fqn, ok := fv.(string)
		if !ok {
			return in.errf(w, "", ErrCorrupt, "MetadataIndex.fqn is a %s, not a str", typeName(fv))
		}
		it := items[fqn]
		if it == nil {
			return in.errf(w, fqn, ErrCorrupt, "storage for an FQN state_dict_metadata does not list")
		}
		var off []int64
		if ov, ok := kf.get("offset"); ok && ov != nil {
			if off, err = in.size(ov, w+" offset", fqn); err != nil {
				return err
			}
		}
		st, err := in.storageInfo(sd.vals[i], w, fqn)
		if err != nil {
			return err
		}
		kk := key{fqn, offKey(off)}
		if off == nil {
			kk.off = "none"
		}
		if seen[kk] {
			return in.errf(w, fqn, ErrCorrupt, "a second storage entry for the same item")
		}
		seen[kk] = true
		switch it.Kind {
		case Bytes:
			if off != nil {
				return in.errf(w, fqn, ErrCorrupt, "a non-tensor item's storage entry has a tensor offset")
			}
			it.Storage = st
			found[fqn] = true
		case Tensor:
			if off == nil {
				return in.errf(w, fqn, ErrCorrupt, "a tensor's storage entry without chunk offsets")
			}
			ci, ok := chunkAt[fqn][offKey(off)]
			if !ok {
				return in.errf(w, fqn, ErrCorrupt, "storage entry for chunk offsets %v, which no chunk of the tensor has", off)
			}
			for j := range it.Chunks {
				if j == ci || equalInts(it.Chunks[j].Offsets, off) {
					it.Chunks[j].Storage = st
				}
			}
			found[fqn+"\x00"+offKey(off)] = true
		}
	}
	for _, it := range sortedItems(items) {
		switch it.Kind {
		case Bytes:
			if !found[it.FQN] {
				return in.errf(where, it.FQN, ErrCorrupt, "no storage entry for this non-tensor item")
			}
		case Tensor:
			for i, c := range it.Chunks {
				if !found[it.FQN+"\x00"+offKey(c.Offsets)] {
					return in.errf(fmt.Sprintf("chunk %d", i), it.FQN, ErrCorrupt, "no storage entry for this chunk")
				}
			}
		}
	}
	return nil
}

func sortedItems(m map[string]*Item) []*Item {
	out := make([]*Item, 0, len(m))
	for _, it := range m {
		out = append(out, it)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FQN < out[j].FQN })
	return out
}

func (in *interpreter) storageInfo(v any, where, fqn string) (Storage, error) {
	var st Storage
	f, err := in.fields(v, where, fqn, clsStorageInfo)
	if err != nil {
		return st, err
	}
	rp, _ := f.get("relative_path")
	name, ok := rp.(string)
	if !ok {
		return st, in.errf(where, fqn, ErrCorrupt, "_StorageInfo.relative_path is a %s, not a str", typeName(rp))
	}
	if err := checkFileName(name); err != nil {
		return st, in.errf(where, fqn, ErrUnsafe, "_StorageInfo.relative_path %v", err)
	}
	st.File = name
	ov, _ := f.get("offset")
	if st.Offset, err = in.int(ov, where+" _StorageInfo.offset", fqn); err != nil {
		return st, err
	}
	lv, _ := f.get("length")
	if st.Length, err = in.int(lv, where+" _StorageInfo.length", fqn); err != nil {
		return st, err
	}
	if st.Offset < 0 || st.Length < 0 || st.Offset > math.MaxInt64-st.Length {
		return st, in.errf(where, fqn, ErrCorrupt, "item range offset %d length %d is not a range of a file", st.Offset, st.Length)
	}
	// Storage transforms (compression, torch >= 2.8) change the item's
	// bytes; an empty list means none.
	if td, ok := f.get("transform_descriptors"); ok && td != nil {
		if l, ok := td.(pyList); !ok || len(l) > 0 {
			return st, in.errf(where, fqn, ErrUnsupported, "storage transforms (transform_descriptors) are not read")
		}
	}
	return st, nil
}

// plannerData reads DefaultSavePlanner's flatten mapping: FQN -> tuple
// of str/int keys. Another planner's data (any other shape) is ignored.
func (in *interpreter) plannerData(v any, items map[string]*Item) (map[string][]PathElem, error) {
	d, ok := v.(*pyDict)
	if !ok || len(d.keys) == 0 {
		return nil, nil
	}
	out := make(map[string][]PathElem, len(d.keys))
	for i, k := range d.keys {
		fqn, ok := k.(string)
		if !ok {
			return nil, nil
		}
		t, ok := d.vals[i].(pyTuple)
		if !ok {
			return nil, nil
		}
		if len(t) > in.lim.MaxRank*16 {
			return nil, in.errf("Metadata.planner_data", fqn, ErrLimit, "path of %d keys", len(t))
		}
		path := make([]PathElem, len(t))
		for j, e := range t {
			switch x := e.(type) {
			case string:
				path[j] = PathElem{Str: x}
			case int64:
				path[j] = PathElem{Int: x, IsInt: true}
			default:
				return nil, nil
			}
		}
		if items[fqn] != nil {
			out[fqn] = path
		}
	}
	return out, nil
}

// offKey is a map key for chunk offsets.
func offKey(off []int64) string {
	var b strings.Builder
	for i, o := range off {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, o)
	}
	return "[" + b.String() + "]"
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// printable is s with bytes outside printable ASCII escaped and cut to
// 80 bytes: for names from the file in messages.
func printable(s string) string {
	q := fmt.Sprintf("%+q", cut(s))
	return q[1 : len(q)-1]
}
