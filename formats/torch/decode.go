package torch

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/pickle"
	"github.com/snapd-ml/snapd/snapshot"
)

// region is where a root storage's element 0 lies in the file and how
// many elements the file holds for it.
type region struct {
	off   int64
	bytes int64  // the storage's bytes the file holds
	where string // zip member or legacy record, for errors
	zip   bool   // a zip member (crc is its CRC-32)
	crc   uint32
}

type decoder struct {
	c       *Codec
	ctx     context.Context
	r       io.ReaderAt
	size    int64
	file    string
	swap    bool // storages are big-endian
	regions map[string]region
	st      map[string]*storageVal
	budget  *formats.Budget
	strict  bool // DecodeOptions.Strict: refuse unknown globals
	// ownWrite: the zip's serialization id is the one Encode gives its
	// members, so Encode reproduces the file without a torch.skeleton.
	ownWrite bool
}

func (d *decoder) errf(where string, off int64, sentinel error, format string, args ...any) error {
	return &Error{Format: "torch", File: d.file, Part: where, Offset: off, Check: fmt.Sprintf(format, args...), Err: sentinel}
}

// pickleErr turns an unpickler failure into an *Error.
func (d *decoder) pickleErr(where string, err error) error {
	var pe *pickle.Error
	if errors.As(err, &pe) {
		off := pe.Offset
		if pe.Path != "" {
			off = -1 // the key path says where; an offset would only add noise
		}
		return &Error{Format: "torch", File: d.file, Part: where, Offset: off, Check: pe.Describe(), Err: classOf(pe.Err)}
	}
	return err
}

// unpickler returns the pickle machine for b (at file offset base).
func (d *decoder) unpickler(b []byte, base int64, persist pickle.PersistentLoader) *pickle.Machine {
	return pickle.New(d.ctx, b, pickle.Options{Resolve: resolve, Persistent: persist, Budget: d.budget, Base: base, Placeholders: !d.strict})
}

// Decode implements formats.Codec.
func (c *Codec) Decode(ctx context.Context, r io.ReaderAt, size int64, opts formats.DecodeOptions) (*snapshot.Snapshot, error) {
	d := &decoder{c: c, ctx: ctx, r: r, size: size, file: opts.Name, regions: map[string]region{}, st: map[string]*storageVal{}, budget: opts.Budget(size), strict: opts.Strict}
	if size < 0 {
		return nil, d.errf("", -1, ErrCorrupt, "negative size %d", size)
	}
	head := make([]byte, min(size, 64))
	if err := snapshot.ReadFullAt(r, head, 0); err != nil {
		return nil, d.errf("", 0, ErrCorrupt, "reading the first %d bytes: %v", len(head), err)
	}
	var obj any
	var err error
	switch {
	case bytes.HasPrefix(head, zipMagic):
		obj, err = d.readZip()
	case bytes.HasPrefix(head, legacyMagic):
		obj, err = d.readLegacy()
	default:
		err = d.errf("", 0, ErrCorrupt, "neither a torch zip archive nor a legacy torch pickle (magic bytes)")
	}
	if err != nil {
		return nil, err
	}
	if !d.strict {
		unknown, err := unknownGlobals(obj)
		if err != nil {
			return nil, d.errf("data.pkl", -1, ErrLimit, "%v", err)
		}
		if len(unknown) > 0 {
			return d.verbatimSnapshot(obj, unknown)
		}
	}
	return d.snapshot(obj)
}

// member is a zip member whose bytes lie at [off, off+n) of the file.
type member struct {
	f   *zip.File
	off int64
	n   int64
}

// locate checks a member's sizes against the file and returns where its
// bytes are. Only stored (uncompressed) members are served in place.
func (d *decoder) locate(f *zip.File) (member, error) {
	where := "zip member " + strconv.QuoteToASCII(truncate(f.Name, 200))
	off, err := f.DataOffset()
	if err != nil {
		return member{}, d.errf(where, -1, ErrCorrupt, "local header: %v", err)
	}
	if f.CompressedSize64 > math.MaxInt64 || off < 0 || int64(f.CompressedSize64) > d.size-off {
		return member{}, d.errf(where, off, ErrCorrupt, "member of %d bytes at %d does not fit in the %d-byte file", f.CompressedSize64, off, d.size)
	}
	return member{f: f, off: off, n: int64(f.CompressedSize64)}, nil
}

// small reads a whole small member (data.pkl, byteorder, version),
// stored or deflated, within limit bytes, and checks its CRC-32.
func (d *decoder) small(f *zip.File, limit int64) ([]byte, error) {
	where := "zip member " + strconv.QuoteToASCII(truncate(f.Name, 200))
	m, err := d.locate(f)
	if err != nil {
		return nil, err
	}
	if f.UncompressedSize64 > uint64(limit) {
		return nil, d.errf(where, m.off, ErrLimit, "%d bytes, the limit is %d", f.UncompressedSize64, limit)
	}
	if err := d.budget.Take(int64(f.UncompressedSize64), where); err != nil {
		return nil, d.errf(where, m.off, ErrLimit, "%v", err)
	}
	var b []byte
	switch f.Method {
	case zip.Store:
		if f.UncompressedSize64 != f.CompressedSize64 {
			return nil, d.errf(where, m.off, ErrCorrupt, "stored member says %d bytes compressed, %d uncompressed", f.CompressedSize64, f.UncompressedSize64)
		}
		b = make([]byte, m.n)
		if err := snapshot.ReadFullAt(d.r, b, m.off); err != nil {
			return nil, d.errf(where, m.off, ErrCorrupt, "read: %v", err)
		}
	case zip.Deflate:
		rc, err := f.Open()
		if err != nil {
			return nil, d.errf(where, m.off, ErrCorrupt, "open: %v", err)
		}
		b, err = io.ReadAll(io.LimitReader(rc, limit+1))
		rc.Close()
		if err != nil {
			return nil, d.errf(where, m.off, ErrCorrupt, "inflate: %v", err)
		}
		if uint64(len(b)) != f.UncompressedSize64 {
			return nil, d.errf(where, m.off, ErrCorrupt, "inflates to %d bytes, the header says %d", len(b), f.UncompressedSize64)
		}
	default:
		return nil, d.errf(where, m.off, ErrUnsupported, "compression method %d", f.Method)
	}
	if crc32.ChecksumIEEE(b) != f.CRC32 {
		return nil, d.errf(where, m.off, ErrCorrupt, "CRC-32 mismatch")
	}
	return b, nil
}

func (d *decoder) readZip() (any, error) {
	zr, err := zip.NewReader(d.r, d.size)
	if err != nil {
		return nil, d.errf("zip", -1, ErrCorrupt, "%v", err)
	}
	var pkl *zip.File
	for _, f := range zr.File {
		if i := strings.IndexByte(f.Name, '/'); i > 0 && f.Name[i+1:] == "data.pkl" {
			pkl = f
			break
		}
	}
	if pkl == nil {
		return nil, d.errf("zip", -1, ErrCorrupt, "no <archive>/data.pkl member")
	}
	prefix := strings.TrimSuffix(pkl.Name, "data.pkl")
	members := map[string]*zip.File{}
	for _, f := range zr.File {
		if strings.HasPrefix(f.Name, prefix) {
			members[f.Name[len(prefix):]] = f
		}
	}
	if f := members["byteorder"]; f != nil {
		b, err := d.small(f, 16)
		if err != nil {
			return nil, err
		}
		switch string(b) {
		case "little":
		case "big":
			d.swap = true
		default:
			return nil, d.errf("zip member byteorder", -1, ErrCorrupt, "neither \"little\" nor \"big\"")
		}
	}
	// Records of torch >= 2: numbers (the serialization id, 40 digits, is
	// only checked to be one); torch's reader ignores them beyond that.
	for _, v := range []string{"version", ".data/version", ".format_version", ".storage_alignment", ".data/serialization_id"} {
		if f := members[v]; f != nil {
			b, err := d.small(f, 64)
			if err != nil {
				return nil, err
			}
			num := strings.TrimSpace(string(b))
			bad := num == ""
			for _, c := range []byte(num) {
				bad = bad || c < '0' || c > '9'
			}
			if !bad && v != ".data/serialization_id" {
				_, err := strconv.ParseUint(num, 10, 32)
				bad = err != nil
			}
			if bad {
				return nil, d.errf("zip member "+v, -1, ErrCorrupt, "not a number")
			}
			if v == ".data/serialization_id" {
				d.ownWrite = num == ownSerializationID(zr.File, f)
			}
		}
	}
	data, err := d.small(pkl, d.c.maxPickle())
	if err != nil {
		return nil, err
	}
	pklOff, _ := pkl.DataOffset()
	if pkl.Method != zip.Store {
		pklOff = -1 // offsets into inflated bytes are not file offsets
	}
	persist := func(pid any) (any, error) {
		t, ok := pid.(*pickle.Tuple)
		if !ok || len(t.Items) != 5 {
			return nil, fmt.Errorf("not a 5-tuple")
		}
		st, err := d.storage(t.Items)
		if err != nil {
			return nil, err
		}
		if _, ok := d.regions[st.key]; !ok {
			f := members["data/"+st.key]
			if f == nil {
				return nil, fmt.Errorf("storage %s: no member data/<key>", quoteKey(st.key))
			}
			m, err := d.locate(f)
			if err != nil {
				return nil, err
			}
			if f.Method != zip.Store || f.CompressedSize64 != f.UncompressedSize64 {
				return nil, fmt.Errorf("storage %s: compression method %d (torch stores storages uncompressed)", quoteKey(st.key), f.Method)
			}
			es := int64(st.dtype.Size())
			if hi, lo := bits.Mul64(uint64(st.numel), uint64(es)); hi != 0 || lo > uint64(m.n) {
				return nil, fmt.Errorf("storage %s: member holds %d bytes, the persistent id says %d elements of %d bytes", quoteKey(st.key), m.n, st.numel, es)
			}
			d.regions[st.key] = region{off: m.off, bytes: m.n, where: "storage " + quoteKey(st.key), zip: true, crc: f.CRC32}
		}
		return st, nil
	}
	obj, err := d.unpickler(data, max(pklOff, 0), persist).Next()
	if err != nil {
		err = d.pickleErr("data.pkl", err)
		var fe *formats.Error
		if pklOff < 0 && errors.As(err, &fe) && fe.Part == "data.pkl" {
			fe.Part = "data.pkl (deflated)" // offsets count inflated bytes
		}
		return nil, err
	}
	return obj, nil
}

// storage interprets ('storage', class, key, location, numel[, view]) and
// returns the one storageVal per key.
func (d *decoder) storage(t []any) (*storageVal, error) {
	if s, _ := t[0].(string); s != "storage" {
		return nil, fmt.Errorf("persistent id of kind %s (only storages are allowed)", pickle.TypeName(t[0]))
	}
	g, ok := t[1].(*pickle.Global)
	var sc storageClass
	if ok {
		sc, ok = g.Value.(storageClass)
	}
	if !ok {
		return nil, fmt.Errorf("storage type is a %s", pickle.TypeName(t[1]))
	}
	key, ok := t[2].(string)
	if !ok || key == "" || len(key) > 64 {
		return nil, fmt.Errorf("storage key is not a short string")
	}
	if _, ok := t[3].(string); !ok {
		return nil, fmt.Errorf("storage location is a %s", pickle.TypeName(t[3]))
	}
	numel, ok := pickle.AsInt(t[4])
	if !ok || numel < 0 {
		return nil, fmt.Errorf("storage size is not a non-negative int")
	}
	if st := d.st[key]; st != nil {
		if st.dtype != sc.dtype || st.numel != numel {
			return nil, fmt.Errorf("storage %s used as %s[%d] and %s[%d]", quoteKey(key), st.dtype, st.numel, sc.dtype, numel)
		}
		return st, nil
	}
	st := &storageVal{key: key, dtype: sc.dtype, numel: numel}
	d.st[key] = st
	return st, nil
}

// readLegacy reads torch's pre-1.6 format: pickles of the magic number,
// the protocol version, sys_info and the object, a pickled list of storage
// keys, then each storage as an 8-byte element count and its bytes.
func (d *decoder) readLegacy() (any, error) {
	n := min(d.size, d.c.maxPickle())
	buf, ok := snapshot.BytesOf(d.r)
	if ok && int64(len(buf)) >= n {
		buf = buf[:n] // memory-backed: the pickles are read in place
	} else {
		buf = make([]byte, n)
		if err := snapshot.ReadFullAt(d.r, buf, 0); err != nil {
			return nil, d.errf("legacy header", 0, ErrCorrupt, "read: %v", err)
		}
	}
	u := d.unpickler(buf, 0, nil)
	next := func(what string) (any, int64, error) {
		start := int64(u.Pos())
		v, err := u.Next()
		if err != nil {
			return nil, 0, d.pickleErr("legacy "+what+" pickle", err)
		}
		return v, start, nil
	}
	magic, _, err := next("magic number")
	if err != nil {
		return nil, err
	}
	if bi, ok := magic.(interface{ String() string }); !ok || bi.String() != "119547037146038801333356" {
		return nil, d.errf("legacy magic number pickle", 0, ErrCorrupt, "not torch's magic number")
	}
	proto, at, err := next("protocol version")
	if err != nil {
		return nil, err
	}
	if p, ok := proto.(int64); !ok || p != 1001 {
		return nil, d.errf("legacy protocol version pickle", at, ErrUnsupported, "protocol version is not 1001")
	}
	info, at, err := next("sys_info")
	if err != nil {
		return nil, err
	}
	sd, ok := info.(*pickle.Dict)
	if !ok {
		return nil, d.errf("legacy sys_info pickle", at, ErrCorrupt, "sys_info is a %s", pickle.TypeName(info))
	}
	if v, ok := sd.Lookup("little_endian"); ok {
		le, ok := v.(bool)
		if !ok {
			return nil, d.errf("legacy sys_info pickle", at, ErrCorrupt, "little_endian is a %s", pickle.TypeName(v))
		}
		d.swap = !le
	}
	type view struct {
		root  *storageVal
		off   int64
		numel int64
	}
	u.SetPersistent(func(pid any) (any, error) {
		t, ok := pid.(*pickle.Tuple)
		if !ok || len(t.Items) != 6 {
			return nil, fmt.Errorf("not a 6-tuple")
		}
		root, err := d.storage(t.Items[:5])
		if err != nil {
			return nil, err
		}
		if t.Items[5] == nil {
			return root, nil
		}
		vm, ok := t.Items[5].(*pickle.Tuple)
		if !ok || len(vm.Items) != 3 {
			return nil, fmt.Errorf("storage view metadata is not a 3-tuple")
		}
		vkey, ok1 := vm.Items[0].(string)
		off, ok2 := pickle.AsInt(vm.Items[1])
		vn, ok3 := pickle.AsInt(vm.Items[2])
		if !ok1 || !ok2 || !ok3 || off < 0 || vn < 0 || off > root.numel || vn > root.numel-off {
			return nil, fmt.Errorf("storage view %d+%d outside its %d-element root", off, vn, root.numel)
		}
		vk := "\x00view:" + vkey
		if v := d.st[vk]; v != nil {
			if v.key != root.key || v.viewOff != off || v.numel != vn {
				return nil, fmt.Errorf("storage view redefined")
			}
			return v, nil
		}
		v := &storageVal{key: root.key, dtype: root.dtype, numel: vn, viewOff: off}
		d.st[vk] = v
		return v, nil
	})
	obj, _, err := next("object")
	if err != nil {
		return nil, err
	}
	u.SetPersistent(nil)
	keysV, at, err := next("storage keys")
	if err != nil {
		return nil, err
	}
	kl, ok := keysV.(*pickle.List)
	if !ok {
		return nil, d.errf("legacy storage keys pickle", at, ErrCorrupt, "storage keys are a %s", pickle.TypeName(keysV))
	}
	off := int64(u.Pos())
	for i, k := range kl.Items {
		key, ok := k.(string)
		st := d.st[key]
		if !ok || st == nil {
			return nil, d.errf("legacy storage keys pickle", at, ErrCorrupt, "key %d names no storage of the object", i)
		}
		where := fmt.Sprintf("legacy storage %d (key %s)", i, quoteKey(key))
		var hdr [8]byte
		if err := snapshot.ReadFullAt(d.r, hdr[:], off); err != nil {
			return nil, d.errf(where, off, ErrCorrupt, "element count: %v", err)
		}
		cnt := binary.LittleEndian.Uint64(hdr[:])
		if d.swap {
			cnt = binary.BigEndian.Uint64(hdr[:])
		}
		if cnt != uint64(st.numel) {
			return nil, d.errf(where, off, ErrCorrupt, "holds %d elements, the persistent id says %d", cnt, st.numel)
		}
		es := int64(st.dtype.Size())
		nb := st.numel * es // numel ≤ file size checked below before use
		if st.numel > (d.size-off-8)/es {
			return nil, d.errf(where, off, ErrCorrupt, "%d elements of %d bytes run past the end of the %d-byte file", st.numel, es, d.size)
		}
		if _, dup := d.regions[key]; dup {
			return nil, d.errf(where, off, ErrCorrupt, "storage listed twice")
		}
		d.regions[key] = region{off: off + 8, bytes: nb, where: where}
		off += 8 + nb
	}
	for k, st := range d.st {
		if _, ok := d.regions[st.key]; !ok {
			return nil, d.errf("legacy storage keys pickle", at, ErrCorrupt, "storage %s has no data record", quoteKey(strings.TrimPrefix(k, "\x00view:")))
		}
	}
	return obj, nil
}

// quoteKey renders a storage key (file content) for an error: quoted,
// ASCII, at most 64 bytes.
func quoteKey(k string) string { return strconv.QuoteToASCII(truncate(k, 64)) }
