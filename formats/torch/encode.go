package torch

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/fnv"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/pickle"
	"github.com/snapd-ml/snapd/internal/jsonerr"
	"github.com/snapd-ml/snapd/snapshot"
)

// storageClassOf is the torch storage class each dtype is written as.
var storageClassOf = map[snapshot.DType]string{
	snapshot.F64: "DoubleStorage", snapshot.F32: "FloatStorage", snapshot.F16: "HalfStorage",
	snapshot.BF16: "BFloat16Storage", snapshot.I64: "LongStorage", snapshot.I32: "IntStorage",
	snapshot.I16: "ShortStorage", snapshot.I8: "CharStorage", snapshot.U8: "ByteStorage",
	snapshot.Bool: "BoolStorage", snapshot.C64: "ComplexFloatStorage", snapshot.C128: "ComplexDoubleStorage",
}

// v3DTypes are the dtypes torch (>= 2.1 for float8, >= 2.3 for the
// unsigned ones) pickles as _rebuild_tensor_v3 of an untyped storage,
// and their torch names; torch 1.13 cannot load them.
var v3DTypes = map[snapshot.DType]string{
	snapshot.F8E4M3: "float8_e4m3fn", snapshot.F8E5M2: "float8_e5m2", snapshot.F8E8M0: "float8_e8m0fnu",
	snapshot.U16: "uint16", snapshot.U32: "uint32", snapshot.U64: "uint64",
}

// MaxScatter bounds the storage Encode assembles in memory when no array
// covers a shared storage whole (views at offsets, transposes).
const MaxScatter = 1 << 30

// ArchiveName is the directory every member is written under.
const ArchiveName = "archive"

// tensorRef is a tensor in a tree parsed from AttrTree.
type tensorRef struct {
	name         string
	param        bool
	requiresGrad bool
}

func encErr(format string, args ...any) error {
	return fmt.Errorf("torch: %w: %s", ErrInvalidSnapshot, fmt.Sprintf(format, args...))
}

// parseTree turns AttrTree JSON back into Python values.
func parseTree(doc string) (any, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, encErr("%s: %v", AttrTree, jsonerr.Describe(err))
	}
	if dec.More() {
		return nil, encErr("%s: trailing data", AttrTree)
	}
	nodes := 0
	out, err := treeValue(v, 0, &nodes)
	if err != nil {
		return nil, encErr("%s: %v", AttrTree, err)
	}
	return out, nil
}

func treeValue(v any, depth int, nodes *int) (any, error) {
	*nodes++
	if *nodes > maxNodes || depth > maxDepth {
		return nil, errors.New("tree too large or too deep")
	}
	switch x := v.(type) {
	case nil, bool, string:
		return x, nil
	case []any, json.Number:
		return nil, errors.New("bare JSON array or number (values are tagged objects)")
	}
	m := v.(map[string]any)
	str := func(k string) (string, error) {
		s, ok := m[k].(string)
		if !ok {
			return "", fmt.Errorf("%q is not a string", k)
		}
		return s, nil
	}
	seq := func(k string) ([]any, error) {
		a, ok := m[k].([]any)
		if !ok {
			return nil, fmt.Errorf("%q is not an array", k)
		}
		out := make([]any, len(a))
		for i, e := range a {
			var err error
			if out[i], err = treeValue(e, depth+1, nodes); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	pairs := func(k string, d *pickle.Dict) error {
		a, ok := m[k].([]any)
		if !ok {
			return fmt.Errorf("%q is not an array", k)
		}
		for _, e := range a {
			kv, ok := e.([]any)
			if !ok || len(kv) != 2 {
				return errors.New("dict item is not a [key, value] pair")
			}
			kk, err := treeValue(kv[0], depth+1, nodes)
			if err != nil {
				return err
			}
			vv, err := treeValue(kv[1], depth+1, nodes)
			if err != nil {
				return err
			}
			if _, isT := kk.(*tensorRef); isT {
				return errors.New("tensor as a dict key")
			}
			if err := d.Set(kk, vv); err != nil {
				return err
			}
		}
		return nil
	}
	allowed := func(keys ...string) error {
		for k := range m {
			ok := false
			for _, a := range keys {
				ok = ok || k == a
			}
			if !ok {
				return fmt.Errorf("unexpected key (%d bytes): want one of %s", len(k), strings.Join(keys, ", "))
			}
		}
		return nil
	}
	switch {
	case m["int"] != nil:
		s, err := str("int")
		if err != nil {
			return nil, err
		}
		if len(s) > 1000 {
			return nil, errors.New("int too long")
		}
		bi, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return nil, errors.New("malformed int")
		}
		return pickle.NormInt(bi), allowed("int")
	case m["float"] != nil:
		s, err := str("float")
		if err != nil {
			return nil, err
		}
		f, err := parseFloat(s)
		if err != nil {
			return nil, err
		}
		return f, allowed("float")
	case m["bytes"] != nil:
		s, err := str("bytes")
		if err != nil {
			return nil, err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, errors.New("malformed bytes")
		}
		return pickle.Bytes(b), allowed("bytes")
	case m["list"] != nil:
		items, err := seq("list")
		if err != nil {
			return nil, err
		}
		return &pickle.List{Items: items}, allowed("list")
	case m["tuple"] != nil:
		items, err := seq("tuple")
		if err != nil {
			return nil, err
		}
		return pickle.NewTuple(items...), allowed("tuple")
	case m["dict"] != nil:
		d := &pickle.Dict{}
		if err := pairs("dict", d); err != nil {
			return nil, err
		}
		return d, allowed("dict")
	case m["odict"] != nil:
		d := &pickle.Dict{Class: gOrderedDict}
		if err := pairs("odict", d); err != nil {
			return nil, err
		}
		if m["state"] != nil {
			d.Attrs = &pickle.Dict{}
			if err := pairs("state", d.Attrs); err != nil {
				return nil, err
			}
		}
		return d, allowed("odict", "state")
	case m["tensor"] != nil:
		s, err := str("tensor")
		if err != nil {
			return nil, err
		}
		t := &tensorRef{name: s}
		for _, f := range [...]struct {
			k   string
			dst *bool
		}{{"param", &t.param}, {"requires_grad", &t.requiresGrad}} {
			if m[f.k] != nil {
				b, ok := m[f.k].(bool)
				if !ok {
					return nil, fmt.Errorf("%q is not a bool", f.k)
				}
				*f.dst = b
			}
		}
		return t, allowed("tensor", "param", "requires_grad")
	}
	return nil, errors.New("unknown node")
}

// outStorage is one storage of the written file and the arrays viewing it.
type outStorage struct {
	key   string
	dtype snapshot.DType
	numel int64
	views []*outView
}

type outView struct {
	a      *snapshot.Array
	off    int64
	stride []int64
}

// plan groups the arrays the tree references into storages, numbered in
// order of first reference.
type plan struct {
	s        *snapshot.Snapshot
	lossy    bool
	byGroup  map[string]*outStorage
	byArray  map[string]*outStorage
	views    map[string]*outView
	storages []*outStorage
	dropped  map[string]bool
}

func cStride(size []int64) []int64 {
	st := make([]int64, len(size))
	acc := int64(1)
	for i := len(size) - 1; i >= 0; i-- {
		st[i] = acc
		if size[i] > 1 {
			acc *= size[i]
		}
	}
	return st
}

// add registers an array referenced by the tree.
func (p *plan) add(name string) error {
	if _, ok := p.views[name]; ok || p.dropped[name] {
		return nil
	}
	a := p.s.Array(name)
	if a == nil {
		return encErr("%s references array %q, which the snapshot lacks", AttrTree, name)
	}
	_, typed := storageClassOf[a.DType]
	if _, v3 := v3DTypes[a.DType]; !typed && !v3 {
		if p.lossy {
			p.dropped[name] = true
			return nil
		}
		return fmt.Errorf("torch: array %q: dtype %s has no torch storage: %w", name, a.DType, formats.ErrLossy)
	}
	n, err := snapshot.NumElements(a.Shape)
	if err != nil {
		return encErr("array %q: %v", name, err)
	}
	v := &outView{a: a, stride: cStride(a.Shape)}
	group, numel := "a:"+name, n
	if g, ok := a.Attrs[AttrStorage]; ok {
		group = "s:" + g
		var err1, err2, err3 error
		numel, err1 = strconv.ParseInt(a.Attrs[AttrStorageNumel], 10, 64)
		v.off, err2 = strconv.ParseInt(a.Attrs[AttrOffset], 10, 64)
		err3 = json.Unmarshal([]byte(a.Attrs[AttrStride]), &v.stride)
		if err1 != nil || err2 != nil || err3 != nil || numel < 0 || len(v.stride) != len(a.Shape) {
			return encErr("array %q: malformed %s/%s/%s attributes", name, AttrStorageNumel, AttrOffset, AttrStride)
		}
	}
	if numel > math.MaxInt64/int64(a.DType.Size()) {
		return encErr("array %q: storage of %d elements overflows", name, numel)
	}
	last, err := reach(v.off, a.Shape, v.stride)
	if err != nil {
		return encErr("array %q: %v", name, err)
	}
	if n > 0 && last >= numel {
		return encErr("array %q: view reaches element %d of a %d-element storage", name, last, numel)
	}
	st := p.byGroup[group]
	if st == nil {
		st = &outStorage{key: strconv.Itoa(len(p.storages)), dtype: a.DType, numel: numel}
		p.byGroup[group] = st
		p.storages = append(p.storages, st)
	} else if st.dtype != a.DType || st.numel != numel {
		return encErr("array %q: storage %s is also viewed as %s[%d]", name, group[2:], st.dtype, st.numel)
	}
	st.views = append(st.views, v)
	p.byArray[name] = st
	p.views[name] = v
	return nil
}

// collect walks the tree in pickling order.
func (p *plan) collect(v any) error {
	switch x := v.(type) {
	case *tensorRef:
		return p.add(x.name)
	case *pickle.List:
		for _, e := range x.Items {
			if err := p.collect(e); err != nil {
				return err
			}
		}
	case *pickle.Tuple:
		for _, e := range x.Items {
			if err := p.collect(e); err != nil {
				return err
			}
		}
	case *pickle.Dict:
		for i := range x.Keys {
			if err := p.collect(x.Keys[i]); err != nil {
				return err
			}
			if err := p.collect(x.Vals[i]); err != nil {
				return err
			}
		}
		if x.Attrs != nil {
			return p.collect(x.Attrs)
		}
	}
	return nil
}

// Encode implements formats.Codec: a zip checkpoint that torch.load reads
// (see the package documentation for the layout and what is restored).
func (c *Codec) Encode(ctx context.Context, w io.Writer, s *snapshot.Snapshot, opts formats.EncodeOptions) error {
	if err := s.Validate(); err != nil {
		return encErr("%v", err)
	}
	if v, err := verbatimArray(s); err != nil || v != nil {
		if err != nil {
			return err
		}
		return writeVerbatim(ctx, w, v)
	}
	if ok, err := encodeSkeleton(ctx, w, s); err != nil || ok {
		return err
	}
	var tree any
	if doc, ok := s.Attrs[AttrTree]; ok {
		var err error
		if tree, err = parseTree(doc); err != nil {
			return err
		}
	} else {
		d := &pickle.Dict{Class: gOrderedDict}
		for _, a := range s.Sorted() {
			_ = d.Set(a.Name, &tensorRef{name: a.Name})
		}
		tree = d
	}
	p := &plan{s: s, lossy: opts.Lossy, byGroup: map[string]*outStorage{}, byArray: map[string]*outStorage{},
		views: map[string]*outView{}, dropped: map[string]bool{}}
	if err := p.collect(tree); err != nil {
		return err
	}
	for _, a := range s.Arrays {
		if _, ok := p.views[a.Name]; !ok && !p.dropped[a.Name] && !opts.Lossy {
			return fmt.Errorf("torch: array %q is not referenced by %s: %w", a.Name, AttrTree, formats.ErrLossy)
		}
	}
	var pk pickler
	pk.op(0x80, 2)
	if err := pk.value(p, tree); err != nil {
		return err
	}
	pk.op('.')

	bw := bufio.NewWriterSize(w, 1<<20)
	cw := &countWriter{w: bw}
	zw := zip.NewWriter(cw)
	if err := writeMember(zw, cw, "data.pkl", pk.buf.Bytes()); err != nil {
		return err
	}
	if err := writeMember(zw, cw, ".format_version", []byte("1")); err != nil {
		return err
	}
	if err := writeMember(zw, cw, ".storage_alignment", []byte("64")); err != nil {
		return err
	}
	if err := writeMember(zw, cw, "byteorder", []byte("little")); err != nil {
		return err
	}
	var buf []byte
	for _, st := range p.storages {
		if err := ctx.Err(); err != nil {
			return err
		}
		mw, err := createMember(zw, cw, "data/"+st.key)
		if err != nil {
			return err
		}
		if err := writeStorage(ctx, mw, st, &buf); err != nil {
			return err
		}
	}
	if err := writeMember(zw, cw, "version", []byte("3\n")); err != nil {
		return err
	}
	// As torch >= 2.4: a 40-digit id of the records, 20 digits from their
	// names and 20 from their CRC-32s (torch's own hashes differ; its
	// reader does not check the id). It is a function of the content.
	if err := writeMember(zw, cw, ".data/serialization_id", []byte(cw.serializationID())); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// countWriter counts what the zip writer has flushed and remembers the
// open member's size, whose data descriptor (16 bytes, 24 for zip64) the
// zip writer writes only when the next member starts.
type countWriter struct {
	w    io.Writer
	n    int64
	open bool
	last int64 // bytes written into the open member
	// names and crcs hash the members written so far (their names, and
	// the CRC-32 of each member's data) for the serialization id.
	names, crcs hash.Hash64
	crc         hash.Hash32
}

// serializationID is the id of the members written so far.
func (c *countWriter) serializationID() string {
	c.endMember()
	return fmt.Sprintf("%020d%020d", c.names.Sum64(), c.crcs.Sum64())
}

// endMember folds the open member's CRC-32 into the id.
func (c *countWriter) endMember() {
	if c.crc != nil {
		c.crcs.Write(c.crc.Sum(nil))
		c.crc = nil
	}
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// createMember starts a stored member whose data begins on a 64-byte
// boundary, padded like torch's writer (extra field "FB" of 'Z' bytes).
func createMember(zw *zip.Writer, cw *countWriter, name string) (io.Writer, error) {
	if err := zw.Flush(); err != nil {
		return nil, err
	}
	name = ArchiveName + "/" + name
	if cw.names == nil {
		cw.names, cw.crcs = fnv.New64a(), fnv.New64a()
	}
	cw.endMember()
	cw.names.Write([]byte(name + "\x00"))
	cw.crc = crc32.NewIEEE()
	start := cw.n + 30 + int64(len(name)) + 4
	if cw.open {
		start += 16
		if cw.last >= math.MaxUint32 {
			start += 8
		}
	}
	cw.open, cw.last = true, 0
	pad := (64 - start%64) % 64
	extra := make([]byte, 4+pad)
	binary.LittleEndian.PutUint16(extra, 0x4246) // "FB"
	binary.LittleEndian.PutUint16(extra[2:], uint16(pad))
	for i := 4; i < len(extra); i++ {
		extra[i] = 'Z'
	}
	mw, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store, Extra: extra})
	if err != nil {
		return nil, err
	}
	return &memberWriter{w: mw, cw: cw}, nil
}

type memberWriter struct {
	w  io.Writer
	cw *countWriter
}

func (m *memberWriter) Write(p []byte) (int, error) {
	n, err := m.w.Write(p)
	m.cw.last += int64(n)
	m.cw.crc.Write(p[:n])
	return n, err
}

func writeMember(zw *zip.Writer, cw *countWriter, name string, b []byte) error {
	mw, err := createMember(zw, cw, name)
	if err != nil {
		return err
	}
	_, err = mw.Write(b)
	return err
}

// writeStorage writes a storage's bytes: the array that covers it whole
// (offset 0, C order, every element) streamed from its source, or, when
// none does, the views scattered into a buffer of at most MaxScatter
// bytes. Every other view must agree with the result (tied arrays that
// were edited apart are an error, not silently merged).
func writeStorage(ctx context.Context, w io.Writer, st *outStorage, buf *[]byte) error {
	es := int64(st.dtype.Size())
	total := st.numel * es
	var cover *outView
	for _, v := range st.views {
		n, _ := v.a.NumBytes()
		if v.off == 0 && n == total && contiguous(v.a.Shape, v.stride) {
			cover = v
			break
		}
	}
	var storage snapshot.Source
	if cover != nil {
		if len(st.views) == 1 {
			return snapshot.CopyTo(ctx, w, cover.a.Data, total, buf)
		}
		storage = cover.a.Data
	} else {
		if total > MaxScatter || st.numel > math.MaxInt64/es {
			return encErr("storage of array %q: %d elements to assemble exceed %d bytes", st.views[0].a.Name, st.numel, MaxScatter)
		}
		mem := make([]byte, total)
		for _, v := range st.views {
			if err := scatter(mem, es, v); err != nil {
				return err
			}
		}
		storage = snapshot.Bytes(mem)
	}
	for _, v := range st.views {
		if v == cover {
			continue
		}
		if err := sameView(storage, es, v); err != nil {
			return err
		}
	}
	return snapshot.CopyTo(ctx, w, storage, total, buf)
}

// scatter writes view v's C-order bytes into the storage mem.
func scatter(mem []byte, es int64, v *outView) error {
	n, _ := v.a.NumBytes()
	if n == 0 {
		return nil
	}
	if n > MaxScatter {
		return encErr("array %q: %d bytes to scatter exceed %d", v.a.Name, n, MaxScatter)
	}
	data, err := snapshot.ReadAll(v.a.Data)
	if err != nil {
		return fmt.Errorf("torch: array %q: %w", v.a.Name, err)
	}
	nd := len(v.a.Shape)
	idx := make([]int64, nd)
	for e := int64(0); e < n/es; e++ {
		s := v.off
		for i := range idx {
			s += idx[i] * v.stride[i]
		}
		copy(mem[s*es:(s+1)*es], data[e*es:(e+1)*es])
		for i := nd - 1; i >= 0; i-- {
			idx[i]++
			if idx[i] < v.a.Shape[i] {
				break
			}
			idx[i] = 0
		}
	}
	return nil
}

// sameView checks that view v of storage holds exactly v's array bytes.
func sameView(storage snapshot.Source, es int64, v *outView) error {
	n, _ := v.a.NumBytes()
	if n == 0 {
		return nil
	}
	vs := newViewSource(storage, 0, es, v.off, v.a.Shape, v.stride, 0)
	const piece = 1 << 20
	x := make([]byte, min(n, piece))
	y := make([]byte, min(n, piece))
	for off := int64(0); off < n; off += piece {
		k := min(piece, n-off)
		if err := snapshot.ReadFullAt(vs, x[:k], off); err != nil {
			return fmt.Errorf("torch: array %q: %w", v.a.Name, err)
		}
		if err := snapshot.ReadFullAt(v.a.Data, y[:k], off); err != nil {
			return fmt.Errorf("torch: array %q: %w", v.a.Name, err)
		}
		if !bytes.Equal(x[:k], y[:k]) {
			return encErr("array %q shares storage with other arrays (%s) but its bytes differ from theirs", v.a.Name, AttrStorage)
		}
	}
	return nil
}

// pickler writes protocol-2 opcodes that torch 1.13's weights_only
// unpickler reads (BINUNICODE strings, no memo, no SHORT_BINUNICODE).
type pickler struct{ buf bytes.Buffer }

func (p *pickler) op(b ...byte) { p.buf.Write(b) }

func (p *pickler) str(s string) {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(s)))
	p.op('X')
	p.buf.Write(n[:])
	p.buf.WriteString(s)
}

func (p *pickler) global(mod, name string) {
	p.op('c')
	p.buf.WriteString(mod + "\n" + name + "\n")
}

func (p *pickler) int(v int64) {
	switch {
	case v >= 0 && v < 1<<8:
		p.op('K', byte(v))
	case v >= 0 && v < 1<<16:
		p.op('M', byte(v), byte(v>>8))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(int32(v)))
		p.op('J')
		p.buf.Write(b[:])
	default:
		p.long(big.NewInt(v))
	}
}

// long writes LONG1/LONG4 in Python's encoding (minimal two's
// complement, little-endian).
func (p *pickler) long(x *big.Int) {
	if x.Sign() == 0 {
		p.op(0x8a, 0)
		return
	}
	nbytes := x.BitLen()/8 + 1
	v := new(big.Int).Set(x)
	if x.Sign() < 0 {
		v.Add(v, new(big.Int).Lsh(big.NewInt(1), uint(8*nbytes)))
	}
	be := v.FillBytes(make([]byte, nbytes))
	le := make([]byte, nbytes)
	for i := range be {
		le[i] = be[nbytes-1-i]
	}
	if x.Sign() < 0 && nbytes > 1 && le[nbytes-1] == 0xff && le[nbytes-2]&0x80 != 0 {
		le = le[:nbytes-1]
	}
	if len(le) < 256 {
		p.op(0x8a, byte(len(le)))
	} else {
		var n [4]byte
		binary.LittleEndian.PutUint32(n[:], uint32(len(le)))
		p.op(0x8b)
		p.buf.Write(n[:])
	}
	p.buf.Write(le)
}

func (p *pickler) ints(v []int64) {
	switch len(v) {
	case 0:
		p.op(')')
		return
	case 1, 2, 3:
		for _, x := range v {
			p.int(x)
		}
		p.op(byte(0x84 + len(v)))
		return
	}
	p.op('(')
	for _, x := range v {
		p.int(x)
	}
	p.op('t')
}

func (p *pickler) pairs(pl *plan, d *pickle.Dict) error {
	if len(d.Keys) == 0 {
		return nil
	}
	p.op('(')
	for i := range d.Keys {
		if err := p.value(pl, d.Keys[i]); err != nil {
			return err
		}
		if err := p.value(pl, d.Vals[i]); err != nil {
			return err
		}
	}
	p.op('u')
	return nil
}

func (p *pickler) value(pl *plan, v any) error {
	switch x := v.(type) {
	case nil:
		p.op('N')
	case bool:
		if x {
			p.op(0x88)
		} else {
			p.op(0x89)
		}
	case int64:
		p.int(x)
	case *big.Int:
		p.long(x)
	case float64:
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], math.Float64bits(x))
		p.op('G')
		p.buf.Write(b[:])
	case string:
		p.str(x)
	case pickle.Bytes:
		// As Python's protocol 2 does: _codecs.encode(str, 'latin1').
		r := make([]rune, len(x))
		for i, c := range x {
			r[i] = rune(c)
		}
		p.global("_codecs", "encode")
		p.str(string(r))
		p.str("latin1")
		p.op(0x86, 'R')
	case *pickle.List:
		p.op(']')
		if len(x.Items) > 0 {
			p.op('(')
			for _, e := range x.Items {
				if err := p.value(pl, e); err != nil {
					return err
				}
			}
			p.op('e')
		}
	case *pickle.Tuple:
		if len(x.Items) == 0 {
			p.op(')')
			return nil
		}
		if len(x.Items) > 3 {
			p.op('(')
		}
		for _, e := range x.Items {
			if err := p.value(pl, e); err != nil {
				return err
			}
		}
		if len(x.Items) > 3 {
			p.op('t')
		} else {
			p.op(byte(0x84 + len(x.Items)))
		}
	case *pickle.Dict:
		if x.Class == gOrderedDict {
			p.global("collections", "OrderedDict")
			p.op(')', 'R')
		} else {
			p.op('}')
		}
		if err := p.pairs(pl, x); err != nil {
			return err
		}
		if x.Attrs != nil && len(x.Attrs.Keys) > 0 {
			p.op('}')
			if err := p.pairs(pl, x.Attrs); err != nil {
				return err
			}
			p.op('b')
		}
	case *tensorRef:
		if pl.dropped[x.name] {
			p.op('N')
			return nil
		}
		st, view := pl.byArray[x.name], pl.views[x.name]
		if x.param {
			p.global("torch._utils", "_rebuild_parameter")
			p.op('(')
		}
		// torch's _reduce_ex_internal: _rebuild_tensor_v2 of a typed
		// storage, or for the dtypes without a typed storage class
		// _rebuild_tensor_v3 of an untyped one (numel in bytes) with the
		// dtype as the last argument.
		dtName, v3 := v3DTypes[st.dtype]
		if v3 {
			p.global("torch._utils", "_rebuild_tensor_v3")
		} else {
			p.global("torch._utils", "_rebuild_tensor_v2")
		}
		p.op('(', '(')
		p.str("storage")
		if v3 {
			p.global("torch.storage", "UntypedStorage")
		} else {
			p.global("torch", storageClassOf[st.dtype])
		}
		p.str(st.key)
		p.str("cpu")
		if v3 {
			p.int(st.numel * int64(st.dtype.Size()))
		} else {
			p.int(st.numel)
		}
		p.op('t', 'Q')
		p.int(view.off)
		p.ints(view.a.Shape)
		p.ints(view.stride)
		p.value(pl, x.requiresGrad && !x.param)
		p.global("collections", "OrderedDict")
		p.op(')', 'R')
		if v3 {
			p.global("torch", dtName)
		}
		p.op('t', 'R')
		if x.param {
			p.value(pl, x.requiresGrad)
			p.global("collections", "OrderedDict")
			p.op(')', 'R', 't', 'R')
		}
	default:
		return encErr("tree value %s cannot be written", pickle.TypeName(v))
	}
	return nil
}
