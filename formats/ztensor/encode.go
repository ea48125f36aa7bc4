package ztensor

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/jsonerr"
	"github.com/snapd-ml/snapd/snapshot"
)

// encTensor is one logical tensor to write.
type encTensor struct {
	name   string
	format string
	dtype  snapshot.DType
	shape  []uint64
	comps  map[string]*encComp
	first  int // index of its first array in the snapshot
}

type encComp struct {
	role     string
	arr      *snapshot.Array
	zstd     bool
	digest   string // "", crc32c, sha256
	nbytes   int64
	elements int64
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("ztensor: encode: %s: %w", fmt.Sprintf(format, args...), ErrInvalidSnapshot)
}

func lossy(format string, args ...any) error {
	return fmt.Errorf("ztensor: encode: %s: %w", fmt.Sprintf(format, args...), formats.ErrLossy)
}

// Encode implements formats.Codec: it writes s as a zTensor v1.0 file laid
// out exactly as the reference writer lays it out (see doc.go). Tensors
// are written in Attrs["ztensor.order"] order, then in snapshot order; the
// per-array ztensor.* attributes select sparse layouts, zstd and digests.
// Snapshot attributes of other formats fail with formats.ErrLossy unless
// opts.Lossy, in which case they are dropped.
func (c Codec) Encode(ctx context.Context, w io.Writer, s *snapshot.Snapshot, opts formats.EncodeOptions) error {
	if s == nil {
		return invalid("nil snapshot")
	}
	s, err := keepDTypes(s, opts)
	if err != nil {
		return err
	}
	m, order, err := plan(s, opts)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	cw := &countWriter{w: bw}
	if _, err := cw.Write([]byte(Magic)); err != nil {
		return fmt.Errorf("ztensor: encode: %w", err)
	}
	// One single-threaded (synchronous, goroutine-free) encoder per call,
	// Reset per component and Closed after each, which ends its frame.
	var enc *zstd.Encoder
	crcTab := crc32.MakeTable(crc32.Castagnoli)
	var zero [Alignment]byte
	for _, t := range order {
		entry := &tensorEntry{DType: mustDTypeName(t.dtype), Shape: t.shape, Format: t.format, Components: map[string]componentEntry{}}
		m.Tensors[t.name] = entry
		for _, role := range rolesOf(t) {
			if err := ctx.Err(); err != nil {
				return err
			}
			ec := t.comps[role]
			if pad := (Alignment - cw.n%Alignment) % Alignment; pad != 0 {
				if _, err := cw.Write(zero[:pad]); err != nil {
					return fmt.Errorf("ztensor: encode: %w", err)
				}
			}
			start := cw.n
			switch ec.digest {
			case digestCRC32C:
				cw.h = crc32.New(crcTab)
			case digestSHA256:
				cw.h = sha256.New()
			default:
				cw.h = nil
			}
			var dst io.Writer = cw
			if ec.zstd {
				if enc == nil {
					enc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault),
						zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false))
					if err != nil {
						return fmt.Errorf("ztensor: encode: zstd: %w", err)
					}
				}
				enc.Reset(cw)
				dst = enc
			}
			if err := copySource(ctx, dst, ec.arr.Data, ec.nbytes); err != nil {
				return fmt.Errorf("ztensor: encode: tensor %q component %q (array %q): %w", t.name, role, ec.arr.Name, err)
			}
			if ec.zstd {
				if err := enc.Close(); err != nil {
					return fmt.Errorf("ztensor: encode: tensor %q component %q: zstd: %w", t.name, role, err)
				}
			}
			ce := componentEntry{Offset: uint64(start), Length: uint64(cw.n - start)}
			if ec.zstd {
				ce.Encoding = encodingZstd
			}
			switch ec.digest {
			case digestCRC32C:
				ce.Digest = fmt.Sprintf("crc32c:0x%08X", binary.BigEndian.Uint32(cw.h.Sum(nil)))
			case digestSHA256:
				ce.Digest = "sha256:" + hex.EncodeToString(cw.h.Sum(nil))
			}
			cw.h = nil
			entry.Components[role] = ce
		}
	}
	mb := m.marshal()
	var foot [8]byte
	binary.LittleEndian.PutUint64(foot[:], uint64(len(mb)))
	if _, err := cw.Write(mb); err != nil {
		return fmt.Errorf("ztensor: encode: %w", err)
	}
	if _, err := cw.Write(foot[:]); err != nil {
		return fmt.Errorf("ztensor: encode: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("ztensor: encode: %w", err)
	}
	return nil
}

// ztDTypesWhy says what zTensor 1.0 holds instead of fp8 and complex.
const ztDTypesWhy = "zTensor 1.0 dtypes are float16/32/64, bfloat16, (u)int8-64 and bool"

// keepDTypes refuses (formats.DTypeError) a dense array whose dtype
// zTensor 1.0 has no name for (fp8, complex), or with opts.Lossy returns
// s without such arrays, reporting each through opts.Drop.
func keepDTypes(s *snapshot.Snapshot, opts formats.EncodeOptions) (*snapshot.Snapshot, error) {
	var keep []*snapshot.Array
	dropped := false
	for _, a := range s.Arrays {
		if _, ok := dtypeName(a.DType); ok || a.Attrs[attrRole] != "" {
			keep = append(keep, a)
			continue
		}
		if !opts.Lossy {
			return nil, &formats.DTypeError{Format: "ztensor", Array: a.Name, DType: a.DType, Why: ztDTypesWhy}
		}
		opts.Drop(formats.DroppedDType("ztensor", a.Name, a.DType, ztDTypesWhy))
		dropped = true
	}
	if !dropped {
		return s, nil
	}
	c := *s
	c.Arrays = keep
	return &c, nil
}

// rolesOf returns t's roles in blob order.
func rolesOf(t *encTensor) []string {
	if r := knownRoles(t.format); r != nil {
		return r
	}
	return slices.Sorted(maps.Keys(t.comps))
}

func mustDTypeName(dt snapshot.DType) string {
	n, _ := dtypeName(dt)
	return n
}

// plan validates s and returns the manifest skeleton (root fields) and the
// tensors in write order.
func plan(s *snapshot.Snapshot, opts formats.EncodeOptions) (*manifest, []*encTensor, error) {
	m := &manifest{Version: DefaultVersion, Generator: DefaultGenerator, Attributes: map[string]string{}, Tensors: map[string]*tensorEntry{}}
	var order []string
	for _, k := range slices.Sorted(maps.Keys(s.Attrs)) {
		v := s.Attrs[k]
		switch k {
		case attrVersion:
			if err := checkVersion(v); err != nil {
				return nil, nil, invalid("snapshot attribute %s: %v", k, err)
			}
			m.Version = v
		case attrGenerator:
			g, err := utf8Text(v, opts, "generator")
			if err != nil {
				return nil, nil, err
			}
			m.Generator = g
		case attrAttributes:
			var a map[string]string
			if err := json.Unmarshal([]byte(v), &a); err != nil {
				return nil, nil, invalid("snapshot attribute %s: want a JSON object of strings: %v", k, jsonerr.Describe(err))
			}
			for ak, av := range a {
				// encoding/json already replaced invalid UTF-8 by U+FFFD.
				m.Attributes[ak] = av
			}
		case attrOrder:
			if err := json.Unmarshal([]byte(v), &order); err != nil {
				return nil, nil, invalid("snapshot attribute %s: want a JSON list of tensor names: %v", k, jsonerr.Describe(err))
			}
		default:
			if strings.HasPrefix(k, attrPrefix) {
				return nil, nil, invalid("unknown snapshot attribute %q", k)
			}
			if !opts.Lossy {
				return nil, nil, lossy("snapshot attribute %q has no place in a zTensor file", k)
			}
		}
	}

	tensors := map[string]*encTensor{}
	var appearance []*encTensor
	for i, a := range s.Arrays {
		t, ec, err := arrayComponent(a, opts)
		if err != nil {
			return nil, nil, err
		}
		prev := tensors[t.name]
		if prev == nil {
			t.first = i
			tensors[t.name] = t
			appearance = append(appearance, t)
			prev = t
		} else if t.format == formatDense || prev.format == formatDense {
			return nil, nil, invalid("array %q: tensor %q is already defined by array %q", a.Name, t.name, s.Arrays[prev.first].Name)
		} else if t.format != prev.format || t.dtype != prev.dtype || !equalShape(t.shape, prev.shape) {
			return nil, nil, invalid("array %q: format, dtype or shape of tensor %q disagree with array %q", a.Name, t.name, s.Arrays[prev.first].Name)
		}
		if _, dup := prev.comps[ec.role]; dup {
			return nil, nil, invalid("array %q: tensor %q has two %q components", a.Name, t.name, ec.role)
		}
		prev.comps[ec.role] = ec
	}
	for _, t := range appearance {
		if err := checkTensor(t); err != nil {
			return nil, nil, err
		}
	}

	out := make([]*encTensor, 0, len(appearance))
	placed := map[string]bool{}
	for _, name := range order {
		t := tensors[name]
		if t == nil {
			return nil, nil, invalid("snapshot attribute %s names tensor %q, which no array holds", attrOrder, name)
		}
		if placed[name] {
			return nil, nil, invalid("snapshot attribute %s lists tensor %q twice", attrOrder, name)
		}
		placed[name] = true
		out = append(out, t)
	}
	for _, t := range appearance {
		if !placed[t.name] {
			out = append(out, t)
		}
	}
	return m, out, nil
}

// arrayComponent interprets one array and its attributes.
func arrayComponent(a *snapshot.Array, opts formats.EncodeOptions) (*encTensor, *encComp, error) {
	if !a.DType.Valid() {
		return nil, nil, invalid("array %q: invalid dtype", a.Name)
	}
	nb, err := a.NumBytes()
	if err != nil {
		return nil, nil, invalid("array %q: %v", a.Name, err)
	}
	var have int64
	if a.Data != nil {
		have = a.Data.Size()
	}
	if have != nb {
		return nil, nil, invalid("array %q: data holds %d bytes, shape %v and dtype %s need %d", a.Name, have, a.Shape, a.DType, nb)
	}
	ne, _ := a.NumElements()
	for k := range a.Attrs {
		switch k {
		case attrName, attrFormat, attrRole, attrDType, attrShape, attrEncoding, attrDigest:
		default:
			if strings.HasPrefix(k, attrPrefix) {
				return nil, nil, invalid("array %q: unknown attribute %q", a.Name, k)
			}
			if !opts.Lossy {
				return nil, nil, lossy("array %q: attribute %q has no place in a zTensor file", a.Name, k)
			}
		}
	}
	at := a.Attrs
	name := a.Name
	if v, ok := at[attrName]; ok {
		name = v
	}
	name, err = utf8Text(name, opts, fmt.Sprintf("array %q: tensor name", a.Name))
	if err != nil {
		return nil, nil, err
	}
	ec := &encComp{arr: a, nbytes: nb, elements: ne}
	switch at[attrEncoding] {
	case "", "raw":
	case encodingZstd:
		ec.zstd = true
	default:
		return nil, nil, invalid("array %q: %s: want raw or zstd (got %d bytes)", a.Name, attrEncoding, len(at[attrEncoding]))
	}
	switch at[attrDigest] {
	case "", digestCRC32C, digestSHA256:
		ec.digest = at[attrDigest]
	default:
		return nil, nil, invalid("array %q: %s: want crc32c or sha256 (got %d bytes)", a.Name, attrDigest, len(at[attrDigest]))
	}
	t := &encTensor{name: name, comps: map[string]*encComp{}}
	role, sparse := at[attrRole]
	if !sparse {
		for _, k := range []string{attrDType, attrShape} {
			if _, ok := at[k]; ok {
				return nil, nil, invalid("array %q: %s set without %s", a.Name, k, attrRole)
			}
		}
		if f, ok := at[attrFormat]; ok && f != formatDense {
			return nil, nil, invalid("array %q: %s other than %s (%d bytes) set without %s", a.Name, attrFormat, formatDense, len(f), attrRole)
		}
		t.format, t.dtype = formatDense, a.DType
		t.shape = make([]uint64, len(a.Shape))
		for i, d := range a.Shape {
			t.shape[i] = uint64(d)
		}
		ec.role = roleData
		return t, ec, nil
	}
	for _, k := range []string{attrName, attrFormat, attrDType, attrShape} {
		if _, ok := at[k]; !ok {
			return nil, nil, invalid("array %q: component array (%s set) lacks %s", a.Name, attrRole, k)
		}
	}
	if role == "" || !utf8.ValidString(role) {
		return nil, nil, invalid("array %q: %s is empty or not UTF-8 (got %d bytes)", a.Name, attrRole, len(role))
	}
	t.format = at[attrFormat]
	if t.format == formatDense || t.format == "" || !utf8.ValidString(t.format) {
		return nil, nil, invalid("array %q: %s: a component array needs a non-dense format in UTF-8 (got %d bytes)", a.Name, attrFormat, len(t.format))
	}
	dt, ok := parseDType(at[attrDType])
	if !ok {
		return nil, nil, invalid("array %q: %s: not a zTensor dtype (got %d bytes)", a.Name, attrDType, len(at[attrDType]))
	}
	t.dtype = dt
	if err := json.Unmarshal([]byte(at[attrShape]), &t.shape); err != nil {
		return nil, nil, invalid("array %q: %s: not a JSON list of dimensions: %v", a.Name, attrShape, jsonerr.Describe(err))
	} else if t.shape == nil {
		return nil, nil, invalid("array %q: %s: not a JSON list of dimensions (null)", a.Name, attrShape)
	}
	ec.role = role
	return t, ec, nil
}

// checkTensor applies the decoder's structural rules so that Encode never
// writes a file Decode refuses.
func checkTensor(t *encTensor) error {
	shape := make([]int64, len(t.shape))
	for i, d := range t.shape {
		if d > math.MaxInt64 {
			return invalid("tensor %q: dimension %d out of range", t.name, d)
		}
		shape[i] = int64(d)
	}
	numel, err := snapshot.NumElements(shape)
	if err != nil {
		return invalid("tensor %q: shape %v: %v", t.name, t.shape, err)
	}
	if _, ok := mulInt64(numel, int64(t.dtype.Size())); !ok {
		return invalid("tensor %q: shape %v: byte size overflows", t.name, t.shape)
	}
	roles := knownRoles(t.format)
	if roles == nil {
		return nil // extension format: any components, bytes as they are
	}
	for _, r := range roles {
		if t.comps[r] == nil {
			return invalid("tensor %q: format %s lacks component %q", t.name, t.format, r)
		}
	}
	for r := range t.comps {
		if !contains(roles, r) {
			return invalid("tensor %q: format %s has a component other than %s (%d bytes)", t.name, t.format, strings.Join(roles, ", "), len(r))
		}
	}
	if t.format == formatDense {
		return nil
	}
	vals := t.comps[roleValues]
	if vals.arr.DType != t.dtype {
		return invalid("tensor %q: values array %q has dtype %s, tensor dtype is %s", t.name, vals.arr.Name, vals.arr.DType, t.dtype)
	}
	nnz := vals.elements
	if nnz > numel {
		return invalid("tensor %q: %d non-zeros exceed %d elements", t.name, nnz, numel)
	}
	idx := func(role string, want int64) error {
		ec := t.comps[role]
		if ec.arr.DType != snapshot.U64 {
			return invalid("tensor %q: %s array %q has dtype %s, want u64", t.name, role, ec.arr.Name, ec.arr.DType)
		}
		if ec.elements != want {
			return invalid("tensor %q: %s array %q has %d elements, want %d", t.name, role, ec.arr.Name, ec.elements, want)
		}
		return nil
	}
	if t.format == formatCSR {
		if len(shape) != 2 {
			return invalid("tensor %q: sparse_csr needs rank 2, shape is %v", t.name, t.shape)
		}
		if err := idx(roleIndices, nnz); err != nil {
			return err
		}
		return idx(roleIndptr, satAdd(shape[0], 1))
	}
	return idx(roleCoords, satMul(int64(len(shape)), nnz))
}

func equalShape(a, b []uint64) bool {
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

// utf8Text returns s if it is valid UTF-8 (CBOR text strings must be);
// otherwise an ErrLossy error, or with opts.Lossy the string with invalid
// bytes replaced by U+FFFD.
func utf8Text(s string, opts formats.EncodeOptions, what string) (string, error) {
	if utf8.ValidString(s) {
		return s, nil
	}
	if !opts.Lossy {
		return "", lossy("%s is not valid UTF-8 (%d bytes)", what, len(s))
	}
	return strings.ToValidUTF8(s, "\uFFFD"), nil
}

// copySource streams the n bytes of src (nil when n is 0) to w.
func copySource(ctx context.Context, w io.Writer, src snapshot.Source, n int64) error {
	if n == 0 {
		return nil
	}
	if b, ok := snapshot.BytesOf(src); ok && int64(len(b)) == n {
		const chunk = 4 << 20
		for len(b) > 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			k := min(len(b), chunk)
			if _, err := w.Write(b[:k]); err != nil {
				return err
			}
			b = b[k:]
		}
		return nil
	}
	got, err := io.Copy(w, formats.ContextReader(ctx, io.NewSectionReader(src, 0, n)))
	if err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("source delivered %d of %d bytes", got, n)
	}
	return nil
}

// countWriter counts bytes and feeds them to an optional hash.
type countWriter struct {
	w io.Writer
	n int64
	h hash.Hash
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if c.h != nil {
		c.h.Write(p[:n])
	}
	return n, err
}
