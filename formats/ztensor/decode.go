package ztensor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// decoder holds the state of one Decode call.
type decoder struct {
	ctx    context.Context
	r      io.ReaderAt
	size   int64
	file   string
	budget *formats.Budget // decompressed bytes of this file
	crcTab *crc32.Table
}

// tensorInfo is one validated logical tensor.
type tensorInfo struct {
	name   string
	dtype  snapshot.DType
	dname  string  // zTensor dtype name
	shape  []int64 // validated dims
	ushape []uint64
	numel  int64
	nbytes int64 // numel × element size
	format string
	comps  []*compInfo // in blob order
	minOff uint64      // smallest component offset (blob order key)
	maxEnd uint64      // largest component end
}

// compInfo is one validated component of a tensor.
type compInfo struct {
	role      string
	entry     componentEntry
	digestAlg string // "", crc32c or sha256
	crcWant   uint32
	shaWant   []byte
	arrayName string
	data      snapshot.Source // set by materialize
}

func (d *decoder) fail(sentinel error, tensor, comp string, off int64, format string, args ...any) error {
	e := &Error{Format: "ztensor", File: d.file, Tensor: tensor, Offset: off, Check: fmt.Sprintf(format, args...), Err: sentinel}
	if comp != "" {
		e.Part = fmt.Sprintf("component %q", comp)
	}
	return e
}

// Decode implements formats.Codec. It reads the whole manifest, validates
// every tensor and component, verifies every digest and decompresses every
// zstd component before returning. Raw component data is a
// snapshot.Section of r (no copy when r is memory-backed).
func (c Codec) Decode(ctx context.Context, r io.ReaderAt, size int64, opts formats.DecodeOptions) (*snapshot.Snapshot, error) {
	if opts.MaxDecoded <= 0 && c.MaxDecompressed > 0 {
		opts.MaxDecoded = c.MaxDecompressed
	}
	d := &decoder{ctx: ctx, r: r, size: size, file: opts.Name, budget: opts.Budget(size), crcTab: crc32.MakeTable(crc32.Castagnoli)}
	mOff, mBytes, err := d.readLayout(c.maxManifest())
	if err != nil {
		return nil, err
	}
	m, err := parseManifest(mBytes)
	if err != nil {
		var me *manifestError
		if errors.As(err, &me) {
			sentinel := ErrCorrupt
			if me.unsupported {
				sentinel = ErrUnsupportedVersion
			}
			return nil, d.fail(sentinel, me.tensor, me.component, mOff, "%s", me.check)
		}
		return nil, d.fail(ErrCorrupt, "", "", mOff, "manifest: %v", err)
	}
	if err := checkVersion(m.Version); err != nil {
		return nil, d.fail(ErrUnsupportedVersion, "", "", mOff, "%v", err)
	}
	tensors, err := d.validate(m, uint64(mOff))
	if err != nil {
		return nil, err
	}
	sort.Slice(tensors, func(i, j int) bool {
		a, b := tensors[i], tensors[j]
		if a.minOff != b.minOff {
			return a.minOff < b.minOff
		}
		if a.maxEnd != b.maxEnd {
			return a.maxEnd < b.maxEnd
		}
		return a.name < b.name
	})
	assignNames(tensors)

	s := &snapshot.Snapshot{Attrs: map[string]string{
		attrVersion:   m.Version,
		attrGenerator: m.Generator,
	}}
	attrsJSON, err := marshalJSON(m.Attributes)
	if err != nil {
		return nil, d.fail(ErrCorrupt, "", "", mOff, "attributes: %v", err)
	}
	s.Attrs[attrAttributes] = string(attrsJSON)
	order := make([]string, len(tensors))
	for i, t := range tensors {
		order[i] = t.name
	}
	orderJSON, err := marshalJSON(order)
	if err != nil {
		return nil, d.fail(ErrCorrupt, "", "", mOff, "tensor order: %v", err)
	}
	s.Attrs[attrOrder] = string(orderJSON)

	for _, t := range tensors {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		arrays, err := d.materialize(t)
		if err != nil {
			return nil, err
		}
		s.Arrays = append(s.Arrays, arrays...)
	}
	return s, nil
}

// readLayout checks the magic and the footer and returns the manifest's
// offset and bytes.
func (d *decoder) readLayout(maxManifest int64) (int64, []byte, error) {
	if d.size < int64(len(Magic)) {
		return 0, nil, d.fail(ErrNotZTensor, "", "", 0, "file is %d bytes, shorter than the 8-byte magic", d.size)
	}
	var head [8]byte
	if _, err := d.r.ReadAt(head[:], 0); err != nil {
		return 0, nil, d.fail(err, "", "", 0, "read magic")
	}
	switch string(head[:]) {
	case Magic:
	case magicV01:
		return 0, nil, d.fail(ErrUnsupportedVersion, "", "", 0, "magic ZTEN0001 is zTensor v0.1; this codec reads v1.0 only")
	case magicV2:
		return 0, nil, d.fail(ErrUnsupportedVersion, "", "", 0, "magic 89 5A 54 32 0D 0A 1A 0A is zTensor v2; this codec reads v1.0 only")
	default:
		return 0, nil, d.fail(ErrNotZTensor, "", "", 0, "the first 8 bytes are not the zTensor magic %q", Magic)
	}
	if d.size < 16 {
		return 0, nil, d.fail(ErrCorrupt, "", "", 0, "file is %d bytes; a v1.0 file holds at least the magic and the 8-byte manifest size (16 bytes)", d.size)
	}
	var foot [8]byte
	footOff := d.size - 8
	if _, err := d.r.ReadAt(foot[:], footOff); err != nil {
		return 0, nil, d.fail(err, "", "", footOff, "read manifest size")
	}
	if string(foot[:]) == Magic {
		return 0, nil, d.fail(ErrUnsupportedVersion, "", "", footOff,
			"file ends with a second ZTEN1000 (footer magic of zTensor 1.1 and later); this codec reads v1.0 only")
	}
	msize := binary.LittleEndian.Uint64(foot[:])
	if msize > uint64(d.size-16) {
		// The size field's value is not printed: in a file that only
		// looks like zTensor these are anybody's bytes.
		return 0, nil, d.fail(ErrCorrupt, "", "", footOff, "manifest size (the last 8 bytes) exceeds file size %d - 16", d.size)
	}
	if msize > uint64(maxManifest) {
		return 0, nil, d.fail(ErrLimit, "", "", footOff, "manifest size (the last 8 bytes) exceeds limit %d", maxManifest)
	}
	mOff := footOff - int64(msize)
	buf := make([]byte, msize)
	if _, err := d.r.ReadAt(buf, mOff); err != nil {
		return 0, nil, d.fail(err, "", "", mOff, "read manifest (%d bytes)", msize)
	}
	return mOff, buf, nil
}

// checkVersion accepts MAJOR[.MINOR[.PATCH]] with MAJOR 1 (seed §6.1: a
// higher minor version is read as 1.0).
func checkVersion(v string) error {
	parts := strings.Split(v, ".")
	if len(parts) > 3 {
		return fmt.Errorf("manifest version: want MAJOR[.MINOR[.PATCH]] decimals (got %d bytes)", len(v))
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" || len(p) > 9 {
			return fmt.Errorf("manifest version: want MAJOR[.MINOR[.PATCH]] decimals (got %d bytes)", len(v))
		}
	}
	if major, _ := strconv.Atoi(parts[0]); major != 1 {
		return fmt.Errorf("manifest version: major version is not 1 (only 1.x is read)")
	}
	return nil
}

// validate checks every tensor entry against the v1.0 rules and the file
// size without reading component data. blobEnd is the manifest offset:
// components must lie in [8, blobEnd).
func (d *decoder) validate(m *manifest, blobEnd uint64) ([]*tensorInfo, error) {
	out := make([]*tensorInfo, 0, len(m.Tensors))
	for _, name := range slices.Sorted(maps.Keys(m.Tensors)) {
		e := m.Tensors[name]
		t := &tensorInfo{name: name, dname: e.DType, format: e.Format, ushape: e.Shape, minOff: math.MaxUint64}
		dt, ok := parseDType(e.DType)
		if !ok {
			return nil, d.fail(ErrCorrupt, name, "", -1, "unknown dtype %q", e.DType)
		}
		t.dtype = dt
		t.shape = make([]int64, len(e.Shape))
		for i, dim := range e.Shape {
			if dim > math.MaxInt64 {
				return nil, d.fail(ErrCorrupt, name, "", -1, "shape dimension %d = %d out of range", i, dim)
			}
			t.shape[i] = int64(dim)
		}
		n, err := snapshot.NumElements(t.shape)
		if err != nil {
			return nil, d.fail(ErrCorrupt, name, "", -1, "shape %v: %v", e.Shape, err)
		}
		t.numel = n
		nb, ok := mulInt64(n, int64(dt.Size()))
		if !ok {
			return nil, d.fail(ErrCorrupt, name, "", -1, "shape %v × %d-byte %s overflows", e.Shape, dt.Size(), e.DType)
		}
		t.nbytes = nb

		roles := knownRoles(e.Format)
		if roles != nil {
			for _, role := range roles {
				if _, ok := e.Components[role]; !ok {
					return nil, d.fail(ErrCorrupt, name, role, -1, "format %q requires component %q", e.Format, role)
				}
			}
			for _, role := range slices.Sorted(maps.Keys(e.Components)) {
				if !contains(roles, role) {
					return nil, d.fail(ErrCorrupt, name, role, -1, "format %q has no component %q (want %s)", e.Format, role, strings.Join(roles, ", "))
				}
			}
		} else {
			// Extension format: carry its components in role order.
			if len(e.Components) == 0 {
				return nil, d.fail(ErrCorrupt, name, "", -1, "format %q: tensor has no components", e.Format)
			}
			roles = slices.Sorted(maps.Keys(e.Components))
		}
		if e.Format == formatCSR && len(t.shape) != 2 {
			return nil, d.fail(ErrCorrupt, name, "", -1, "sparse_csr tensor has shape %v; it must have rank 2", e.Shape)
		}

		for _, role := range roles {
			c := e.Components[role]
			ci := &compInfo{role: role, entry: c}
			if c.Offset%Alignment != 0 {
				return nil, d.fail(ErrCorrupt, name, role, offsetOrNone(c.Offset), "offset %d is not a multiple of %d", c.Offset, Alignment)
			}
			if c.Offset < uint64(len(Magic)) || c.Offset > blobEnd || c.Length > blobEnd-c.Offset {
				return nil, d.fail(ErrCorrupt, name, role, offsetOrNone(c.Offset),
					"offset %d + length %d exceeds the blob region [8, %d) before the manifest (file size %d)", c.Offset, c.Length, blobEnd, d.size)
			}
			if err := parseDigest(ci); err != nil {
				return nil, d.fail(ErrCorrupt, name, role, int64(c.Offset), "%v", err)
			}
			if e.Format == formatDense && c.Encoding == "" && int64(c.Length) != t.nbytes {
				return nil, d.fail(ErrCorrupt, name, role, int64(c.Offset),
					"length %d != %d bytes required by shape %v and dtype %s", c.Length, t.nbytes, e.Shape, e.DType)
			}
			t.minOff = min(t.minOff, c.Offset)
			t.maxEnd = max(t.maxEnd, c.Offset+c.Length)
			t.comps = append(t.comps, ci)
		}
		out = append(out, t)
	}
	return out, nil
}

func offsetOrNone(off uint64) int64 {
	if off > math.MaxInt64 {
		return -1
	}
	return int64(off)
}

// parseDigest parses "crc32c:0x<1-8 hex digits>" or "sha256:<64 hex
// digits>" (hex case-insensitive). Other forms are errors: a digest this
// reader cannot verify is refused rather than skipped.
func parseDigest(ci *compInfo) error {
	s := ci.entry.Digest
	switch {
	case s == "":
		return nil
	case strings.HasPrefix(s, "crc32c:0x"):
		h := s[len("crc32c:0x"):]
		v, err := strconv.ParseUint(h, 16, 32)
		if err != nil || len(h) == 0 || len(h) > 8 || strings.ContainsAny(h, "+-_") {
			return fmt.Errorf("digest %q: want crc32c:0x followed by up to 8 hex digits", s)
		}
		ci.digestAlg, ci.crcWant = digestCRC32C, uint32(v)
		return nil
	case strings.HasPrefix(s, "sha256:"):
		h := s[len("sha256:"):]
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != sha256.Size {
			return fmt.Errorf("digest %q: want sha256: followed by 64 hex digits", s)
		}
		ci.digestAlg, ci.shaWant = digestSHA256, b
		return nil
	}
	return fmt.Errorf("digest %q: unsupported algorithm (supported: crc32c:0x…, sha256:…)", s)
}

// materialize reads, verifies and (for zstd) decompresses the components
// of t and returns its arrays.
func (d *decoder) materialize(t *tensorInfo) ([]*snapshot.Array, error) {
	elem := int64(t.dtype.Size())
	for _, ci := range t.comps {
		off, n := int64(ci.entry.Offset), int64(ci.entry.Length)
		stored := snapshot.Section(d.r, off, n)
		var storedHash hash.Hash
		switch ci.digestAlg {
		case digestCRC32C:
			storedHash = crc32.New(d.crcTab)
		case digestSHA256:
			storedHash = sha256.New()
		}
		if storedHash != nil {
			if err := d.hashSource(stored, storedHash); err != nil {
				return nil, d.fail(err, t.name, ci.role, off, "read %d bytes for digest", n)
			}
		}
		storedOK := true
		switch ci.digestAlg {
		case digestCRC32C:
			if got := binary.BigEndian.Uint32(storedHash.Sum(nil)); got != ci.crcWant {
				return nil, d.fail(ErrChecksum, t.name, ci.role, off,
					"crc32c of %d stored bytes is 0x%08X, the manifest's digest differs", n, got)
			}
		case digestSHA256:
			storedOK = bytes.Equal(storedHash.Sum(nil), ci.shaWant)
			if !storedOK && ci.entry.Encoding == "" {
				return nil, d.fail(ErrChecksum, t.name, ci.role, off,
					"sha256 of %d stored bytes is %x, the manifest's digest differs", n, storedHash.Sum(nil))
			}
		}
		if ci.entry.Encoding == "" {
			ci.data = stored
			continue
		}
		bound, exact := d.decodedBound(t, ci.role)
		buf, err := d.decompress(t, ci, stored, bound, exact)
		if err != nil {
			if !storedOK && d.ctx.Err() == nil {
				// The stored bytes already failed the digest; report that.
				return nil, d.fail(ErrChecksum, t.name, ci.role, off,
					"sha256 of %d stored bytes is %x, the manifest's digest differs, and the data does not decompress: %v",
					n, storedHash.Sum(nil), err)
			}
			return nil, err
		}
		if exact && int64(len(buf)) != bound {
			return nil, d.fail(ErrCorrupt, t.name, ci.role, off,
				"zstd data decompresses to %d bytes, shape %v and dtype %s require %d", len(buf), t.ushape, t.dname, bound)
		}
		if !storedOK {
			if sum := sha256.Sum256(buf); !bytes.Equal(sum[:], ci.shaWant) {
				return nil, d.fail(ErrChecksum, t.name, ci.role, off,
					"the manifest's sha256 matches neither the %d stored bytes (%x) nor the %d decoded bytes (%x)",
					n, storedHash.Sum(nil), len(buf), sum)
			}
		}
		ci.data = snapshot.Bytes(buf)
	}

	if t.format == formatDense {
		ci := t.comps[0]
		return []*snapshot.Array{{Name: ci.arrayName, DType: t.dtype, Shape: t.shape, Data: ci.data, Attrs: t.attrs(ci)}}, nil
	}

	shapes := map[string][]int64{}
	dts := map[string]snapshot.DType{}
	switch t.format {
	case formatCSR, formatCOO:
		vals := t.comp(roleValues)
		if vals.data.Size()%elem != 0 {
			return nil, d.fail(ErrCorrupt, t.name, roleValues, int64(vals.entry.Offset),
				"%d bytes is not a whole number of %d-byte %s values", vals.data.Size(), elem, t.dname)
		}
		nnz := vals.data.Size() / elem
		if nnz > t.numel {
			return nil, d.fail(ErrCorrupt, t.name, roleValues, int64(vals.entry.Offset),
				"%d non-zeros exceed the %d elements of shape %v", nnz, t.numel, t.ushape)
		}
		shapes[roleValues], dts[roleValues] = []int64{nnz}, t.dtype
		want := func(role string, count int64, why string) error {
			ci := t.comp(role)
			if got := ci.data.Size(); got/8 != count || got%8 != 0 {
				return d.fail(ErrCorrupt, t.name, role, int64(ci.entry.Offset),
					"%d bytes; want %d u64 (%s)", got, count, why)
			}
			dts[role] = snapshot.U64
			return nil
		}
		if t.format == formatCSR {
			if err := want(roleIndices, nnz, "one column index per value"); err != nil {
				return nil, err
			}
			if err := want(roleIndptr, satAdd(t.shape[0], 1), "rows + 1 row pointers"); err != nil {
				return nil, err
			}
			shapes[roleIndices], shapes[roleIndptr] = []int64{nnz}, []int64{t.shape[0] + 1} // cannot overflow: checked against the data size above
		} else {
			ndim := int64(len(t.shape))
			count, ok := mulInt64(ndim, nnz)
			if !ok {
				return nil, d.fail(ErrCorrupt, t.name, roleCoords, -1, "ndim × nnz overflows")
			}
			if err := want(roleCoords, count, fmt.Sprintf("ndim %d × nnz %d, dimension-major", ndim, nnz)); err != nil {
				return nil, err
			}
			shapes[roleCoords] = []int64{ndim, nnz}
		}
	default:
		for _, ci := range t.comps {
			shapes[ci.role], dts[ci.role] = []int64{ci.data.Size()}, snapshot.U8
		}
	}
	arrays := make([]*snapshot.Array, 0, len(t.comps))
	for _, ci := range t.comps {
		arrays = append(arrays, &snapshot.Array{Name: ci.arrayName, DType: dts[ci.role], Shape: shapes[ci.role], Data: ci.data, Attrs: t.attrs(ci)})
	}
	return arrays, nil
}

func (t *tensorInfo) comp(role string) *compInfo {
	for _, ci := range t.comps {
		if ci.role == role {
			return ci
		}
	}
	return nil
}

// attrs returns the Array.Attrs of component ci (see doc.go).
func (t *tensorInfo) attrs(ci *compInfo) map[string]string {
	a := map[string]string{}
	if t.format != formatDense {
		shape, _ := json.Marshal(t.ushape)
		a[attrName] = t.name
		a[attrFormat] = t.format
		a[attrRole] = ci.role
		a[attrDType] = t.dname
		a[attrShape] = string(shape)
	} else if ci.arrayName != t.name {
		a[attrName] = t.name
	}
	if ci.entry.Encoding != "" {
		a[attrEncoding] = ci.entry.Encoding
	}
	if ci.digestAlg != "" {
		a[attrDigest] = ci.digestAlg
	}
	if len(a) == 0 {
		return nil
	}
	return a
}

// decodedBound returns the most bytes a zstd component of t may decode to
// and whether exactly that many are required. For extension formats the
// manifest declares nothing and the remaining budget is the bound.
func (d *decoder) decodedBound(t *tensorInfo, role string) (int64, bool) {
	switch {
	case t.format == formatDense:
		return t.nbytes, true
	case (t.format == formatCSR || t.format == formatCOO) && role == roleValues:
		return t.nbytes, false
	case t.format == formatCSR && role == roleIndices:
		return satMul(t.numel, 8), false
	case t.format == formatCSR && role == roleIndptr:
		return satMul(satAdd(t.shape[0], 1), 8), true
	case t.format == formatCOO && role == roleCoords:
		return satMul(satMul(t.numel, int64(len(t.shape))), 8), false
	}
	return math.MaxInt64, false
}

// decompress decodes the zstd frames of a component through the file's
// decode budget (formats.Budget.DecompressZstd): at most bound bytes
// (exactly bound when exact), charged before the buffer is allocated.
func (d *decoder) decompress(t *tensorInfo, ci *compInfo, stored snapshot.Source, bound int64, exact bool) ([]byte, error) {
	off := int64(ci.entry.Offset)
	what := fmt.Sprintf("tensor %q component %q (shape %v, dtype %s)", t.name, ci.role, t.ushape, t.dname)
	buf, err := d.budget.DecompressZstd(d.ctx, io.NewSectionReader(stored, 0, stored.Size()), bound, exact, what)
	if err != nil {
		if ctxErr := d.ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		sentinel := ErrCorrupt
		if errors.Is(err, formats.ErrLimit) {
			sentinel = ErrLimit
		}
		return nil, d.fail(sentinel, t.name, ci.role, off, "zstd data (%d bytes): %v", stored.Size(), err)
	}
	return buf, nil
}

// hashSource feeds all bytes of s to h.
func (d *decoder) hashSource(s snapshot.Source, h hash.Hash) error {
	if b, ok := snapshot.BytesOf(s); ok {
		h.Write(b)
		return nil
	}
	_, err := io.Copy(h, formats.ContextReader(d.ctx, io.NewSectionReader(s, 0, s.Size())))
	return err
}

func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func mulInt64(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

func satMul(a, b int64) int64 {
	if v, ok := mulInt64(a, b); ok {
		return v
	}
	return math.MaxInt64
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
