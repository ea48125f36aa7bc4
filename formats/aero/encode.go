package aero

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
	"lukechampine.com/blake3"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/jsonerr"
	"github.com/snapd-ml/snapd/snapshot"
)

// maxSlack bounds the zero filler the writer reproduces from attributes:
// per shard (gaps and uncovered tail) and per chunk reservation. Larger
// recorded layouts are re-packed / not reserved, so attributes cannot make
// the writer emit unbounded zeros.
const maxSlack = 16 << 20

// Defaults of a file written from a snapshot that carries no AERO attrs.
const (
	defaultModelName    = "snapd"
	defaultArchitecture = "unknown"
)

type ptensor struct {
	name      string // AERO name (Attrs["aero.name"] or the array name)
	arr       *snapshot.Array
	dtype     uint64
	shape     []uint64
	n         int64
	flags     uint64
	extra     []mpair
	hashMode  int // 0: no hash_b3, 1: hash_b3 "", 2: computed hash_b3
	shardID   uint64
	off       int64
	hasLayout bool
	hash      [32]byte
}

type pshard struct {
	id       uint64
	name     string
	size     int64
	tensors  []*ptensor // by offset
	pageSize int64      // 0: no PHSH
	pages    [][32]byte
	hash     [32]byte
	tocIndex int
}

type pchunk struct {
	desc     chunkDesc
	kind     string // IHSH MJSN MMSG TIDX WTSH PHSH opaque
	shard    *pshard
	raw      []byte // uncompressed payload (all but WTSH)
	stored   []byte
	off      int64
	length   int64
	ulen     int64
	reserved int64
	hash     [32]byte
}

type plan struct {
	s        *snapshot.Snapshot
	fresh    bool // no aero.chunks attr: defaults apply
	repacked bool // shards were assigned by the writer
	tensors  []*ptensor
	chunks   []*pchunk
	shards   map[string]*pshard
	uuid     [16]byte
	cfg      encConfig
}

// Encode implements formats.Codec. A snapshot decoded from AERO is written
// back with its chunk list, flags, uuid, shard layout, metadata and
// per-tensor extras (see doc.go for what is recomputed); any other snapshot
// gets the model writer's defaults (IHSH, MJSN, MMSG, TIDX with hash_b3,
// greedy 2 GiB shards).
func (Codec) Encode(ctx context.Context, w io.Writer, s *snapshot.Snapshot, opts formats.EncodeOptions) error {
	var zenc *zstd.Encoder // created on first use: its tables cost megabytes
	defer func() {
		if zenc != nil {
			zenc.Close()
		}
	}()
	compress := func(b []byte) ([]byte, error) {
		if zenc == nil {
			var err error
			zenc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(6)), zstd.WithEncoderCRC(false),
				zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))
			if err != nil {
				return nil, err
			}
		}
		return zenc.EncodeAll(b, nil), nil
	}
	return encode(ctx, w, s, opts, encConfig{compress: compress, shardCap: DefaultShardCap})
}

// aeroDTypesWhy says what AERO 0.1 holds instead of fp8 and complex.
const aeroDTypesWhy = "AERO 0.1 dtype codes are f16, f32, bf16, f64, (u)int8-64, bool and packed"

// dropAeroDTypes returns s without the arrays whose dtype has no AERO
// code (fp8, complex) and that carry no aero.dtype, reporting each
// through opts.Drop (Lossy only; without it encode refuses them with a
// formats.DTypeError).
func dropAeroDTypes(s *snapshot.Snapshot, opts formats.EncodeOptions) *snapshot.Snapshot {
	var keep []*snapshot.Array
	for _, a := range s.Arrays {
		if _, ok := snapToAero(a.DType); ok || a.Attrs["aero.dtype"] != "" {
			keep = append(keep, a)
			continue
		}
		opts.Drop(formats.DroppedDType("aero", a.Name, a.DType, aeroDTypesWhy))
	}
	if len(keep) == len(s.Arrays) {
		return s
	}
	c := *s
	c.Arrays = keep
	return &c
}

// encConfig holds what Encode fixes and tests vary.
type encConfig struct {
	compress func([]byte) ([]byte, error) // zstd one-shot frame of its input
	shardCap int64                        // shard capacity when the writer assigns shards
}

func encode(ctx context.Context, w io.Writer, s *snapshot.Snapshot, opts formats.EncodeOptions, cfg encConfig) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("aero: encode: %w", err)
	}
	if d := s.Attrs["aero.dropped"]; d != "" && !opts.Lossy {
		return fmt.Errorf("aero: encode: %w: the source file had chunks too large to keep: %s", formats.ErrLossy, d)
	} else if d != "" {
		opts.Drop(formats.Loss{Format: "aero", What: "chunks the source file had but were too large to keep: " + d, Why: "their bytes were not read into the snapshot"})
	}
	if opts.Lossy {
		s = dropAeroDTypes(s, opts)
	}
	if !opts.Lossy {
		if err := foreignAttrs(s); err != nil {
			return err
		}
	}
	p := &plan{s: s, cfg: cfg}
	if err := p.collectTensors(); err != nil {
		return err
	}
	if err := p.planChunks(); err != nil {
		return err
	}
	if err := p.hashShards(ctx); err != nil {
		return err
	}
	if err := p.buildPayloads(); err != nil {
		return err
	}
	ctrl, err := p.layout()
	if err != nil {
		return err
	}
	return p.write(ctx, w, ctrl)
}

// foreignAttrs reports attributes of other formats, which AERO cannot hold.
func foreignAttrs(s *snapshot.Snapshot) error {
	for _, k := range slices.Sorted(maps.Keys(s.Attrs)) {
		if !strings.HasPrefix(k, "aero.") {
			return fmt.Errorf("aero: encode: %w: snapshot attribute %q has no place in an AERO file", formats.ErrLossy, k)
		}
	}
	for _, a := range s.Arrays {
		for _, k := range slices.Sorted(maps.Keys(a.Attrs)) {
			if !strings.HasPrefix(k, "aero.") {
				return fmt.Errorf("aero: encode: array %q: %w: attribute %q has no place in an AERO file", a.Name, formats.ErrLossy, k)
			}
		}
	}
	return nil
}

func attrErr(a *snapshot.Array, key string, err error) error {
	return fmt.Errorf("aero: encode: array %q: attribute %s: %w", a.Name, key, err)
}

func (p *plan) collectTensors() error {
	arrs := p.s.Arrays
	if o, ok := p.s.Attrs["aero.order"]; ok {
		var names []string
		if err := json.Unmarshal([]byte(o), &names); err != nil {
			return fmt.Errorf("aero: encode: attribute aero.order: %w", jsonerr.Describe(err))
		}
		byName := make(map[string]*snapshot.Array, len(arrs))
		for _, a := range arrs {
			byName[a.Name] = a
		}
		ordered := make([]*snapshot.Array, 0, len(arrs))
		for _, n := range names {
			if a := byName[n]; a != nil {
				ordered = append(ordered, a)
				delete(byName, n)
			}
		}
		for _, a := range arrs {
			if byName[a.Name] != nil {
				ordered = append(ordered, a)
			}
		}
		arrs = ordered
	}
	_, hasChunks := p.s.Attrs["aero.chunks"]
	p.fresh = !hasChunks
	seen := map[string]bool{}
	for _, a := range arrs {
		t := &ptensor{name: a.Name, arr: a}
		if n, ok := a.Attrs["aero.name"]; ok {
			t.name = n
		}
		if seen[t.name] {
			return fmt.Errorf("aero: encode: array %q: duplicate AERO tensor name %q", a.Name, t.name)
		}
		seen[t.name] = true
		if len(t.name) > MaxNameLen {
			return fmt.Errorf("aero: encode: array %q: name of %d bytes exceeds %d", a.Name, len(t.name), MaxNameLen)
		}
		if a.Data != nil {
			t.n = a.Data.Size()
		}
		if ds, ok := a.Attrs["aero.dtype"]; ok {
			v, err := strconv.ParseUint(ds, 10, 16)
			if err != nil {
				// strconv's error quotes the value.
				return attrErr(a, "aero.dtype", fmt.Errorf("not an unsigned 16-bit integer (%d bytes)", len(ds)))
			}
			if a.DType != snapshot.U8 || len(a.Shape) != 1 {
				return attrErr(a, "aero.dtype", fmt.Errorf("needs a rank-1 u8 array carrying the bytes, have %s %v", a.DType, a.Shape))
			}
			t.dtype = v
			sh, err := parseUints(a.Attrs["aero.shape"])
			if err != nil {
				return attrErr(a, "aero.shape", err)
			}
			t.shape = sh
		} else {
			code, ok := snapToAero(a.DType)
			if !ok {
				return &formats.DTypeError{Format: "aero", Array: a.Name, DType: a.DType, Why: aeroDTypesWhy}
			}
			t.dtype = code
			t.shape = make([]uint64, len(a.Shape))
			for i, d := range a.Shape {
				t.shape[i] = uint64(d)
			}
		}
		if len(t.shape) > MaxRank {
			return fmt.Errorf("aero: encode: array %q: rank %d exceeds %d", a.Name, len(t.shape), MaxRank)
		}
		if fs, ok := a.Attrs["aero.flags"]; ok {
			v, err := strconv.ParseUint(fs, 10, 64)
			if err != nil {
				// strconv's error quotes the value.
				return attrErr(a, "aero.flags", fmt.Errorf("not an unsigned 64-bit integer (%d bytes)", len(fs)))
			}
			t.flags = v
		}
		if xs, ok := a.Attrs["aero.extra"]; ok {
			v, err := fromTypedJSON(xs)
			if err != nil {
				return attrErr(a, "aero.extra", err)
			}
			if v.kind != kMap {
				return attrErr(a, "aero.extra", errors.New("not a map"))
			}
			for _, kvp := range v.m {
				for _, r := range []string{"name", "dtype", "shape", "shard_id", "data_off", "data_len", "flags", "hash_b3"} {
					if kvp.k.isStr(r) {
						return attrErr(a, "aero.extra", fmt.Errorf("reserved key %q", r))
					}
				}
			}
			t.extra = v.m
		}
		switch h, ok := a.Attrs["aero.hash_b3"]; {
		case p.fresh || ok && h != "":
			t.hashMode = 2
		case ok:
			t.hashMode = 1
		}
		ss, ok1 := a.Attrs["aero.shard"]
		os, ok2 := a.Attrs["aero.offset"]
		if ok1 && ok2 {
			id, err1 := strconv.ParseUint(ss, 10, 64)
			off, err2 := strconv.ParseInt(os, 10, 64)
			t.shardID, t.off, t.hasLayout = id, off, err1 == nil && err2 == nil && off >= 0
		}
		p.tensors = append(p.tensors, t)
	}
	return nil
}

func parseUints(s string) ([]uint64, error) {
	var raw []json.Number
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, jsonerr.Describe(err)
	}
	out := make([]uint64, len(raw))
	for i, n := range raw {
		v, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil {
			// strconv's error quotes the number.
			return nil, fmt.Errorf("element %d is not an unsigned 64-bit integer", i)
		}
		out[i] = v
	}
	return out, nil
}

// planChunks decides the chunk list and the shard layout.
func (p *plan) planChunks() error {
	var descs []chunkDesc
	if p.fresh {
		descs = []chunkDesc{
			{FourCC: "IHSH", Name: "control.integrity", Flags: flagOptional},
			{FourCC: "MJSN", Name: "meta.json"},
			{FourCC: "MMSG", Name: "manifest", Flags: flagZstd},
			{FourCC: "TIDX", Name: "tensors", Flags: flagZstd | flagIndex},
		}
	} else {
		dec := json.NewDecoder(strings.NewReader(p.s.Attrs["aero.chunks"]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&descs); err != nil {
			return fmt.Errorf("aero: encode: attribute aero.chunks: %w", jsonerr.Describe(err))
		}
	}
	if err := p.setChunks(descs); err != nil {
		return err
	}
	if p.fresh || !p.layoutHonoured() {
		p.repacked = true
		if err := p.setChunks(p.repack()); err != nil {
			return err
		}
		if !p.layoutHonoured() {
			return errors.New("aero: encode: internal error: repacked layout rejected")
		}
	}
	if len(p.chunks) > MaxEntryCount {
		return fmt.Errorf("aero: encode: %d chunks exceed MAX_ENTRY_COUNT %d", len(p.chunks), MaxEntryCount)
	}
	return nil
}

// setChunks validates descs and builds chunks and shards from them.
func (p *plan) setChunks(descs []chunkDesc) error {
	p.chunks = p.chunks[:0]
	p.shards = map[string]*pshard{}
	once := map[string]bool{}
	for i, cd := range descs {
		where := fmt.Sprintf("aero: encode: chunk %d %q", i, cd.Name)
		if len(cd.FourCC) != 4 || !fourccValid([4]byte([]byte(cd.FourCC))) {
			return fmt.Errorf("%s: fourcc is not four printable ASCII characters (got %d bytes)", where, len(cd.FourCC))
		}
		if cd.Name == "" || strings.IndexByte(cd.Name, 0) >= 0 {
			return fmt.Errorf("%s: empty name or name with NUL", where)
		}
		c := &pchunk{desc: cd, kind: cd.FourCC}
		switch {
		case cd.Data != nil:
			c.kind = "opaque"
			b, err := base64.StdEncoding.DecodeString(*cd.Data)
			if err != nil {
				return fmt.Errorf("%s: data: %w", where, err)
			}
			c.raw = b
		case cd.FourCC == "IHSH" || cd.FourCC == "MJSN" || cd.FourCC == "MMSG" || cd.FourCC == "TIDX":
			if once[cd.FourCC] {
				return fmt.Errorf("%s: second %s without data", where, cd.FourCC)
			}
			once[cd.FourCC] = true
			if cd.FourCC == "IHSH" && cd.Flags&flagZstd != 0 {
				return fmt.Errorf("%s: IHSH cannot be compressed (its size is part of what it covers)", where)
			}
		case cd.FourCC == "WTSH":
			id, ok := parseShardName(cd.Name)
			if !ok {
				return fmt.Errorf("%s: WTSH name is not weights.shard<N>", where)
			}
			if cd.Flags&flagZstd != 0 {
				return fmt.Errorf("%s: WTSH cannot be compressed", where)
			}
			if p.shards[cd.Name] != nil {
				return fmt.Errorf("%s: duplicate shard", where)
			}
			sh := &pshard{id: id, name: cd.Name, tocIndex: i}
			if cd.Size != nil {
				sh.size = *cd.Size
			}
			p.shards[cd.Name] = sh
			c.shard = sh
		case cd.FourCC == "PHSH":
			name, _ := strings.CutSuffix(cd.Name, ".phsh")
			sh := p.shards[name]
			if sh == nil || sh.pageSize != 0 || cd.PageSize <= 0 || !strings.HasSuffix(cd.Name, ".phsh") {
				return fmt.Errorf("%s: PHSH must follow its WTSH, be named <shard>.phsh and have page_size > 0", where)
			}
			sh.pageSize = cd.PageSize
			c.shard = sh
		default:
			return fmt.Errorf("%s: unknown fourcc without data", where)
		}
		p.chunks = append(p.chunks, c)
	}
	return nil
}

// layoutHonoured assigns tensors to the described shards at their recorded
// offsets, when every tensor has a layout, every shard exists and no two
// non-empty tensors overlap.
func (p *plan) layoutHonoured() bool {
	for _, sh := range p.shards {
		sh.tensors = nil
	}
	for _, t := range p.tensors {
		sh := p.shards[shardName(t.shardID)]
		if !t.hasLayout || sh == nil {
			return false
		}
		sh.tensors = append(sh.tensors, t)
	}
	for _, sh := range p.shards {
		sort.SliceStable(sh.tensors, func(i, j int) bool { return sh.tensors[i].off < sh.tensors[j].off })
		var end int64
		for _, t := range sh.tensors {
			if t.n == 0 {
				continue
			}
			if t.off < end || t.off > (1<<62)-t.n {
				return false
			}
			end = t.off + t.n
		}
		var covered int64
		for _, t := range sh.tensors {
			end = max(end, t.off)
			covered += t.n
		}
		sh.size = max(sh.size, end)
		if sh.size-covered > maxSlack {
			return false // more zero filler than a real layout needs
		}
		if sh.pageSize > 0 && sh.size == 0 {
			return false // an empty shard cannot carry a valid PHSH
		}
	}
	return true
}

// repack assigns shards greedily (model writer): a tensor goes into the
// current shard unless that would push it past the shard cap (Encode:
// DefaultShardCap); an empty
// shard always takes the next tensor. The chunk list keeps its non-shard
// chunks in order and gets the new WTSH (+PHSH) chunks appended.
func (p *plan) repack() []chunkDesc {
	wFlags, pFlags := uint32(flagMmap), uint32(flagOptional)
	var pageSize int64
	var keep []chunkDesc
	for _, c := range p.chunks {
		switch c.kind {
		case "WTSH":
			wFlags = c.desc.Flags
		case "PHSH":
			pFlags = c.desc.Flags
			if pageSize == 0 {
				pageSize = c.desc.PageSize
			}
		default:
			keep = append(keep, c.desc)
		}
	}
	var id uint64
	var used int64
	started := false
	for _, t := range p.tensors {
		if started && used > 0 && used+t.n > p.cfg.shardCap {
			id++
			used = 0
		}
		started = true
		t.shardID, t.off, t.hasLayout = id, used, true
		used += t.n
	}
	if started {
		for i := uint64(0); i <= id; i++ {
			zero := int64(0)
			keep = append(keep, chunkDesc{FourCC: "WTSH", Name: shardName(i), Flags: wFlags, Size: &zero})
			if pageSize > 0 {
				keep = append(keep, chunkDesc{FourCC: "PHSH", Name: shardName(i) + ".phsh", Flags: pFlags, PageSize: pageSize})
			}
		}
	}
	return keep
}

// streamShard calls fn with the shard's bytes in order: zero gaps and the
// tensors' data (t is nil for gaps).
func streamShard(ctx context.Context, sh *pshard, fn func(t *ptensor, b []byte) error) error {
	var zero [64 << 10]byte
	gap := func(n int64) error {
		for n > 0 {
			k := min(n, int64(len(zero)))
			if err := fn(nil, zero[:k]); err != nil {
				return err
			}
			n -= k
		}
		return nil
	}
	var pos int64
	buf := make([]byte, 0)
	for _, t := range sh.tensors {
		if t.n == 0 {
			continue
		}
		if err := gap(t.off - pos); err != nil {
			return err
		}
		if b, ok := snapshot.BytesOf(t.arr.Data); ok && int64(len(b)) == t.n {
			for off := int64(0); off < t.n; off += streamBlock {
				if err := ctx.Err(); err != nil {
					return err
				}
				if err := fn(t, b[off:min(off+streamBlock, t.n)]); err != nil {
					return err
				}
			}
		} else {
			if len(buf) == 0 {
				buf = make([]byte, streamBlock)
			}
			for off := int64(0); off < t.n; off += streamBlock {
				if err := ctx.Err(); err != nil {
					return err
				}
				k := min(streamBlock, t.n-off)
				if n, err := t.arr.Data.ReadAt(buf[:k], off); int64(n) != k {
					return fmt.Errorf("aero: encode: array %q: read %d bytes at %d: %v", t.arr.Name, k, off, err)
				}
				if err := fn(t, buf[:k]); err != nil {
					return err
				}
			}
		}
		pos = t.off + t.n
	}
	return gap(sh.size - pos)
}

// hashShards computes, in one pass per shard, the shard BLAKE3, the PHSH
// page digests and the hash_b3 of every tensor.
func (p *plan) hashShards(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for _, sh := range p.shards {
		g.Go(func() error {
			h := blake3.New(32, nil)
			var ph *blake3.Hasher
			var inPage int64
			if sh.pageSize > 0 {
				ph = blake3.New(32, nil)
			}
			var cur *ptensor
			var th *blake3.Hasher
			endTensor := func() {
				if cur != nil {
					cur.hash = [32]byte(th.Sum(nil))
					cur = nil
				}
			}
			err := streamShard(gctx, sh, func(t *ptensor, b []byte) error {
				h.Write(b)
				if t != cur {
					endTensor()
					if t != nil {
						cur, th = t, blake3.New(32, nil)
					}
				}
				if cur != nil {
					th.Write(b)
				}
				for ph != nil && len(b) > 0 {
					k := min(int64(len(b)), sh.pageSize-inPage)
					ph.Write(b[:k])
					inPage += k
					b = b[k:]
					if inPage == sh.pageSize {
						sh.pages = append(sh.pages, [32]byte(ph.Sum(nil)))
						ph.Reset()
						inPage = 0
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			endTensor()
			if ph != nil && inPage > 0 {
				sh.pages = append(sh.pages, [32]byte(ph.Sum(nil)))
			}
			sh.hash = [32]byte(h.Sum(nil))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	empty := blake3.Sum256(nil)
	for _, t := range p.tensors {
		if t.n == 0 {
			t.hash = empty
		}
	}
	return nil
}

func (p *plan) buildPayloads() error {
	for _, c := range p.chunks {
		switch c.kind {
		case "MJSN":
			if m, ok := p.s.Attrs["aero.mjsn"]; ok {
				if !json.Valid([]byte(m)) {
					return errors.New("aero: encode: attribute aero.mjsn is not valid JSON")
				}
				c.raw = []byte(m)
			} else {
				c.raw = []byte(`{"architecture":"` + defaultArchitecture + `","model_name":"` + defaultModelName + `"}`)
			}
		case "TIDX":
			v, err := p.tidx()
			if err != nil {
				return err
			}
			c.raw = encodeMval(v)
		case "PHSH":
			digests := make([]mval, len(c.shard.pages))
			for j := range c.shard.pages {
				digests[j] = mBin(c.shard.pages[j][:])
			}
			c.raw = encodeMval(mMap(kv("shard_name", mStr(c.shard.name)), kv("page_size", mUint(uint64(c.shard.pageSize))),
				kv("digests", mArr(digests...))))
		case "IHSH":
			c.raw = make([]byte, ihshSize) // filled in by layout
		case "WTSH":
			c.ulen = c.shard.size
			c.length = c.shard.size
			c.hash = c.shard.hash
			continue
		}
	}
	for _, c := range p.chunks {
		if c.kind == "MMSG" {
			v, err := p.mmsg()
			if err != nil {
				return err
			}
			c.raw = encodeMval(v)
		}
	}
	for _, c := range p.chunks {
		if c.kind == "WTSH" {
			continue
		}
		if int64(len(c.raw)) > MaxMetadataULen {
			return fmt.Errorf("aero: encode: chunk %q: %d bytes exceed MAX_METADATA_ULEN", c.desc.Name, len(c.raw))
		}
		c.ulen = int64(len(c.raw))
		c.hash = blake3.Sum256(c.raw)
		c.stored = c.raw
		if c.desc.Flags&flagZstd != 0 && c.kind != "IHSH" {
			z, err := p.cfg.compress(c.raw)
			if err != nil {
				return fmt.Errorf("aero: encode: chunk %q: zstd: %w", c.desc.Name, err)
			}
			c.stored = z
		}
		c.length = int64(len(c.stored))
	}
	if u, ok := p.s.Attrs["aero.uuid"]; ok {
		b, err := hex.DecodeString(u)
		if err != nil || len(b) != 16 {
			return fmt.Errorf("aero: encode: attribute aero.uuid: want 32 hex digits (got %d bytes)", len(u))
		}
		p.uuid = [16]byte(b)
	} else {
		h := blake3.New(32, nil)
		h.Write([]byte("snapd aero uuid\x00"))
		for _, c := range p.chunks {
			h.Write(c.hash[:])
		}
		copy(p.uuid[:], h.Sum(nil))
	}
	return nil
}

func (p *plan) tidx() (mval, error) {
	entries := make([]mval, len(p.tensors))
	for i, t := range p.tensors {
		shape := make([]mval, len(t.shape))
		for j, d := range t.shape {
			shape[j] = mUint(d)
		}
		m := []mpair{
			kv("name", mStr(t.name)), kv("dtype", mUint(t.dtype)), kv("shape", mArr(shape...)),
			kv("shard_id", mUint(t.shardID)), kv("data_off", mUint(uint64(t.off))), kv("data_len", mUint(uint64(t.n))),
			kv("flags", mUint(t.flags)),
		}
		m = append(m, t.extra...)
		switch t.hashMode {
		case 1:
			m = append(m, kv("hash_b3", mStr("")))
		case 2:
			m = append(m, kv("hash_b3", mStr(hex.EncodeToString(t.hash[:]))))
		}
		entries[i] = mMap(m...)
	}
	root := []mpair{kv("tensors", mArr(entries...))}
	if x, ok := p.s.Attrs["aero.tidx"]; ok {
		v, err := fromTypedJSON(x)
		if err != nil || v.kind != kMap {
			return mval{}, fmt.Errorf("aero: encode: attribute aero.tidx: not a typed-JSON map: %v", err)
		}
		for _, kvp := range v.m {
			if kvp.k.isStr("tensors") {
				return mval{}, errors.New("aero: encode: attribute aero.tidx: reserved key \"tensors\"")
			}
		}
		root = append(root, v.m...)
	}
	return mMap(root...), nil
}

var roles = map[string]string{"IHSH": "control_integrity", "MJSN": "json", "MMSG": "manifest", "TIDX": "tensors", "WTSH": "weights", "PHSH": "page_hashes"}

func (p *plan) mmsg() (mval, error) {
	var items, shards []mval
	for i, c := range p.chunks {
		role, ok := roles[c.desc.FourCC]
		if !ok {
			role = strings.ToLower(strings.TrimSpace(c.desc.FourCC))
		}
		it := []mpair{kv("role", mStr(role)), kv("fourcc", mStr(c.desc.FourCC)), kv("toc_index", mUint(uint64(i)))}
		name, _ := strings.CutSuffix(c.desc.Name, ".phsh")
		if id, ok := parseShardName(name); ok && (c.desc.FourCC == "WTSH" || c.desc.FourCC == "PHSH") {
			it = append(it, kv("shard_id", mUint(id)))
		}
		items = append(items, mMap(it...))
		if c.kind == "WTSH" {
			shards = append(shards, mMap(kv("shard_id", mUint(c.shard.id)), kv("toc_index", mUint(uint64(i))),
				kv("size_bytes", mUint(uint64(c.shard.size))), kv("tensor_count", mUint(uint64(len(c.shard.tensors)))),
				kv("mmap_critical", mBool(true))))
		}
	}
	chunks, shardList := mArr(items...), mArr(shards...)
	if chunks.arr == nil {
		chunks.arr = []mval{}
	}
	if shardList.arr == nil {
		shardList.arr = []mval{}
	}
	x, ok := p.s.Attrs["aero.mmsg"]
	if !ok {
		return mMap(
			kv("format", mMap(kv("name", mStr("AERO")), kv("version", mArr(mUint(0), mUint(1))))),
			kv("model", mMap(kv("name", mStr(defaultModelName)), kv("architecture", mStr(defaultArchitecture)))),
			kv("chunks", chunks), kv("shards", shardList)), nil
	}
	v, err := fromTypedJSON(x)
	if err != nil {
		return mval{}, fmt.Errorf("aero: encode: attribute aero.mmsg: %w", err)
	}
	if v.kind == kMap {
		for i := range v.m {
			switch {
			case v.m[i].k.isStr("chunks"):
				v.m[i].v = chunks
			case v.m[i].k.isStr("shards"):
				v.m[i].v = shardList
			}
		}
	}
	return v, nil
}

// layout fixes offsets, fills the TOC hashes and IHSH, and returns the
// control region [0, payloads_start).
func (p *plan) layout() ([]byte, error) {
	n := len(p.chunks)
	tocLen := int64(tocHeaderLen + tocEntryLen*n)
	stOff := align(headerSize+tocLen, 8)
	var st []byte
	nameOff := make([]int, n)
	for i, c := range p.chunks {
		nameOff[i] = len(st)
		st = append(st, c.desc.Name...)
		st = append(st, 0)
	}
	stLen := align(int64(len(st)), 8)
	if stLen > MaxStringTable {
		return nil, fmt.Errorf("aero: encode: string table of %d bytes exceeds MAX_STRING_TABLE", stLen)
	}
	payloads := align(stOff+stLen, 16)
	pos := payloads
	for _, c := range p.chunks {
		c.off = pos
		c.reserved = c.length
		if c.desc.Reserve > c.length && c.desc.Reserve-c.length <= maxSlack {
			c.reserved = c.desc.Reserve
		}
		if c.kind == "PHSH" && p.repacked && c.desc.Reserve == 0 {
			// The model writer's reservation for a PHSH.
			c.reserved = max(c.length, int64(80+len(c.shard.name)+32*len(c.shard.pages)))
		}
		pos = align(c.off+c.reserved, 16)
	}
	ctrl := make([]byte, payloads)
	le := binary.LittleEndian
	copy(ctrl, magic[:])
	le.PutUint16(ctrl[4:], 0)
	le.PutUint16(ctrl[6:], 1)
	le.PutUint32(ctrl[8:], headerSize)
	le.PutUint64(ctrl[12:], headerSize)
	le.PutUint64(ctrl[20:], uint64(tocLen))
	le.PutUint64(ctrl[28:], uint64(stOff))
	le.PutUint64(ctrl[36:], uint64(stLen))
	copy(ctrl[52:68], p.uuid[:])
	le.PutUint32(ctrl[headerSize:], uint32(n))
	for i, c := range p.chunks {
		e := ctrl[headerSize+tocHeaderLen+tocEntryLen*i:]
		copy(e[0:4], c.desc.FourCC)
		le.PutUint32(e[4:], c.desc.Flags)
		le.PutUint64(e[8:], uint64(c.off))
		le.PutUint64(e[16:], uint64(c.length))
		le.PutUint64(e[24:], uint64(c.ulen))
		le.PutUint32(e[32:], uint32(nameOff[i]))
		le.PutUint32(e[36:], uint32(len(c.desc.Name)))
	}
	copy(ctrl[stOff:], st)
	// IHSH: digest over the control region with every hash field zero.
	digest := blake3.Sum256(ctrl)
	for _, c := range p.chunks {
		if c.kind != "IHSH" {
			continue
		}
		m := encodeMval(mMap(kv("algo", mStr("blake3-256")),
			kv("covered_ranges", mArr(mArr(mUint(0), mUint(uint64(payloads))))), kv("digest", mBin(digest[:]))))
		clear(c.raw)
		copy(c.raw, m)
		c.stored = c.raw
		c.hash = blake3.Sum256(c.raw)
	}
	for i, c := range p.chunks {
		copy(ctrl[headerSize+tocHeaderLen+tocEntryLen*i+hashOff:], c.hash[:])
	}
	return ctrl, nil
}

type countWriter struct {
	w *bufio.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

func (c *countWriter) padTo(off int64) error {
	var zero [16]byte
	for c.n < off {
		k := min(off-c.n, int64(len(zero)))
		if _, err := c.Write(zero[:k]); err != nil {
			return err
		}
	}
	return nil
}

func (p *plan) write(ctx context.Context, w io.Writer, ctrl []byte) error {
	cw := &countWriter{w: bufio.NewWriterSize(w, 1<<20)}
	if _, err := cw.Write(ctrl); err != nil {
		return fmt.Errorf("aero: encode: write: %w", err)
	}
	for _, c := range p.chunks {
		if err := cw.padTo(c.off); err != nil {
			return fmt.Errorf("aero: encode: write: %w", err)
		}
		if c.kind == "WTSH" {
			err := streamShard(ctx, c.shard, func(_ *ptensor, b []byte) error {
				_, err := cw.Write(b)
				return err
			})
			if err != nil {
				return fmt.Errorf("aero: encode: shard %q: %w", c.shard.name, err)
			}
			continue
		}
		if _, err := cw.Write(c.stored); err != nil {
			return fmt.Errorf("aero: encode: write: %w", err)
		}
	}
	if err := cw.w.Flush(); err != nil {
		return fmt.Errorf("aero: encode: write: %w", err)
	}
	return nil
}
