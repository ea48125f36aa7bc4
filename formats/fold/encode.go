package fold

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/fold/rs"
	"github.com/snapd-ml/snapd/internal/jsonerr"
	"github.com/snapd-ml/snapd/snapshot"
)

// ErrModified is returned by Encode when an array that a decoded chunk's
// container (zip, safetensors header) was built around no longer holds
// the bytes, dtype or shape it was decoded with: the container cannot be
// rebuilt byte for byte around it.
var ErrModified = errors.New("fold: array differs from the chunk it was decoded from")

// builtChunk is one chunk ready to be laid out.
type builtChunk struct {
	name    string
	desc    *jvalue
	ctype   string
	flags   uint32
	payload []byte
}

// Encode implements formats.Codec. Snapshots decoded from FOLD (with the
// fold.index and fold.chunks attributes) are rebuilt chunk by chunk; other
// arrays go to one new STEN chunk. See doc.go.
func (Codec) Encode(ctx context.Context, w io.Writer, s *snapshot.Snapshot, opts formats.EncodeOptions) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("fold: %w", err)
	}
	byName := make(map[string]*snapshot.Array, len(s.Arrays))
	for _, a := range s.Arrays {
		byName[a.Name] = a
	}
	used := map[string]bool{snapshot.AttrsArrayName: true}

	var root *jvalue
	var chunks []builtChunk
	hashPrefixed := s.Attrs[AttrHashForm] == "sha256"
	if idx, ok := s.Attrs[AttrIndex]; ok {
		var err error
		root, err = parseJSON([]byte(idx))
		if err != nil || root.kind != jObject {
			return fmt.Errorf("fold: attribute %s: not a JSON object: %v", AttrIndex, err)
		}
		var recs []chunkRec
		if err := json.Unmarshal([]byte(s.Attrs[AttrChunks]), &recs); err != nil {
			return fmt.Errorf("fold: attribute %s: %w", AttrChunks, jsonerr.Describe(err))
		}
		for i, rec := range recs {
			if err := ctx.Err(); err != nil {
				return err
			}
			c, err := rebuildChunk(rec, byName, used)
			if err != nil {
				return fmt.Errorf("fold: chunk %d: %w", i, err)
			}
			chunks = append(chunks, c)
		}
	} else {
		root = freshRoot()
	}

	// Arrays no chunk claims go to a new STEN chunk.
	var rest []*snapshot.Array
	for _, a := range s.Arrays {
		if !used[a.Name] {
			rest = append(rest, a)
		}
	}
	if !opts.Lossy {
		if err := checkForeignAttrs(s, rest); err != nil {
			return err
		}
	}
	if len(rest) > 0 {
		name := "torch_state"
		for i := 1; slices.ContainsFunc(chunks, func(c builtChunk) bool { return c.name == name }); i++ {
			name = fmt.Sprintf("snapd_arrays_%d", i)
		}
		c, err := stenChunk(name, rest)
		if err != nil {
			return fmt.Errorf("fold: %w", err)
		}
		chunks = append(chunks, c)
	}
	return writeFile(ctx, w, root, chunks, hashPrefixed)
}

// checkForeignAttrs refuses attributes of other formats, which a FOLD file
// has no place for (only fold.* keys are understood).
func checkForeignAttrs(s *snapshot.Snapshot, arrays []*snapshot.Array) error {
	for _, k := range slices.Sorted(maps.Keys(s.Attrs)) {
		if !strings.HasPrefix(k, "fold.") {
			return fmt.Errorf("fold: snapshot attribute %q: %w (FOLD keeps only fold.* attributes)", k, formats.ErrLossy)
		}
	}
	for _, a := range arrays {
		for _, k := range slices.Sorted(maps.Keys(a.Attrs)) {
			if !strings.HasPrefix(k, "fold.") {
				return fmt.Errorf("fold: array %q attribute %q: %w (FOLD keeps only fold.* attributes)", a.Name, k, formats.ErrLossy)
			}
		}
	}
	return nil
}

func freshRoot() *jvalue {
	meta := &jvalue{kind: jObject}
	meta.set("protection", jstr("off"))
	meta.set("chunk_hashes", &jvalue{kind: jObject})
	meta.set("manifest_hash", jstr(""))
	root := &jvalue{kind: jObject}
	root.set("format", jstr("fold"))
	root.set("version", jstr(Version))
	root.set("created_at_unix", &jvalue{kind: jFloat, f: 0})
	root.set("metadata", meta)
	root.set("chunks", &jvalue{kind: jArray})
	return root
}

func freshDesc(name, ctype string) *jvalue {
	d := &jvalue{kind: jObject}
	d.set("name", jstr(name))
	d.set("ctype", jstr(ctype))
	d.set("flags", jint(0))
	for _, k := range []string{"offset", "header_len", "comp_len", "uncomp_len", "crc32c"} {
		d.set(k, jint(0))
	}
	d.set("sha256", jstr(""))
	d.set("ecc_algo", jstr("none"))
	d.set("ecc_len", jint(0))
	return d
}

// stenChunk packs arrays (in snapshot order) into a safetensors payload.
func stenChunk(name string, arrays []*snapshot.Array) (builtChunk, error) {
	names := make([]string, len(arrays))
	data := make([][]byte, len(arrays))
	for i, a := range arrays {
		names[i] = a.Name
		if orig, ok := a.Attrs[AttrName]; ok {
			names[i] = orig
		}
		b, err := arrayBytes(a)
		if err != nil {
			return builtChunk{}, err
		}
		data[i] = b
	}
	p, err := writeSTEN(arrays, names, data)
	if err != nil {
		return builtChunk{}, fmt.Errorf("chunk %q: %w", name, err)
	}
	return builtChunk{name: name, desc: freshDesc(name, CTypeSTEN), ctype: CTypeSTEN, payload: p}, nil
}

func arrayBytes(a *snapshot.Array) ([]byte, error) {
	if a.Data == nil {
		return nil, nil
	}
	b, err := snapshot.ReadAll(a.Data)
	if err != nil {
		return nil, fmt.Errorf("array %q: %w", a.Name, err)
	}
	return b, nil
}

// rebuildChunk reassembles a decoded chunk's payload from its payload
// array and the spliced arrays.
func rebuildChunk(rec chunkRec, byName map[string]*snapshot.Array, used map[string]bool) (builtChunk, error) {
	desc, err := parseJSON([]byte(rec.Desc))
	if err != nil || desc.kind != jObject {
		return builtChunk{}, fmt.Errorf("descriptor: not a JSON object: %v", err)
	}
	name, _ := desc.get("name").asString()
	if len(rec.CType) != 4 {
		return builtChunk{}, fmt.Errorf("chunk %q: ctype is not 4 bytes (got %d)", name, len(rec.CType))
	}
	get := func(n string) (*snapshot.Array, error) {
		a := byName[n]
		if a == nil {
			return nil, fmt.Errorf("chunk %q: array %q is missing from the snapshot", name, n)
		}
		if used[n] {
			return nil, fmt.Errorf("chunk %q: array %q is claimed twice", name, n)
		}
		used[n] = true
		return a, nil
	}
	pa, err := get(rec.Payload)
	if err != nil {
		return builtChunk{}, err
	}
	if pa.DType != snapshot.U8 || len(pa.Shape) != 1 {
		return builtChunk{}, fmt.Errorf("chunk %q: payload array %q must be 1-D u8, is %s%v", name, pa.Name, pa.DType, pa.Shape)
	}
	skel, err := arrayBytes(pa)
	if err != nil {
		return builtChunk{}, err
	}
	check := func(a *snapshot.Array, b []byte, want uint32, sig string) error {
		if got := arraySig(a.DType, a.Shape); got != sig {
			return fmt.Errorf("%w: chunk %q array %q: dtype/shape %s, decoded as %s", ErrModified, name, a.Name, got, sig)
		}
		if got := crc32.ChecksumIEEE(b); got != want {
			return fmt.Errorf("%w: chunk %q array %q: crc32 %08x, decoded with %08x", ErrModified, name, a.Name, got, want)
		}
		return nil
	}
	total := int64(len(skel))
	parts := make([][]byte, len(rec.Splices))
	for i, sp := range rec.Splices {
		a, err := get(sp.Array)
		if err != nil {
			return builtChunk{}, err
		}
		b, err := arrayBytes(a)
		if err != nil {
			return builtChunk{}, err
		}
		if err := check(a, b, sp.CRC, sp.Sig); err != nil {
			return builtChunk{}, err
		}
		if sp.Fortran {
			b = cToFortran(b, a.Shape, a.DType.Size())
		}
		if sp.Swap > 0 {
			b = append([]byte(nil), b...)
			byteSwap(b, sp.Swap)
		}
		parts[i] = b
		total += int64(len(b))
	}
	for _, c := range rec.Copies {
		a, err := get(c.Array)
		if err != nil {
			return builtChunk{}, err
		}
		b, err := arrayBytes(a)
		if err != nil {
			return builtChunk{}, err
		}
		if err := check(a, b, c.CRC, c.Sig); err != nil {
			return builtChunk{}, err
		}
	}
	out := make([]byte, 0, total)
	var pos int64
	for i, sp := range rec.Splices {
		if sp.At < pos || sp.At > int64(len(skel)) {
			return builtChunk{}, fmt.Errorf("chunk %q: splice of %q at %d outside payload array [%d, %d]", name, sp.Array, sp.At, pos, len(skel))
		}
		out = append(out, skel[pos:sp.At]...)
		out = append(out, parts[i]...)
		pos = sp.At
	}
	out = append(out, skel[pos:]...)
	return builtChunk{name: name, desc: desc, ctype: rec.CType, flags: rec.Flags, payload: out}, nil
}

func newZstdEncoder() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithEncoderCRC(false),
		zstd.WithZeroFrames(true),
		zstd.WithSingleSegment(true),
		zstd.WithEncoderConcurrency(1))
}

// writeFile lays out header, chunks and index.
func writeFile(ctx context.Context, w io.Writer, root *jvalue, chunks []builtChunk, prefixed bool) error {
	hashString := func(sum []byte) string {
		if prefixed {
			return "sha256:" + hex.EncodeToString(sum)
		}
		return hex.EncodeToString(sum)
	}
	var enc *zstd.Encoder
	defer func() {
		if enc != nil {
			enc.Close()
		}
	}()
	type laid struct {
		hdr    [ChunkHeaderLen]byte
		stored []byte
		ecc    []byte
	}
	out := make([]laid, len(chunks))
	descs := &jvalue{kind: jArray}
	hashes := &jvalue{kind: jObject}
	off := uint64(HeaderLen)
	for i, c := range chunks {
		if err := ctx.Err(); err != nil {
			return err
		}
		if uint64(len(c.payload)) > MaxChunkSize {
			return fmt.Errorf("fold: chunk %q: payload of %d bytes exceeds MAX_CHUNK_SIZE", c.name, len(c.payload))
		}
		stored := c.payload
		if c.flags == 1 {
			if enc == nil {
				var err error
				if enc, err = newZstdEncoder(); err != nil {
					return fmt.Errorf("fold: zstd: %w", err)
				}
			}
			stored = enc.EncodeAll(c.payload, nil)
		}
		// The index repeats the chunk header's ctype and flags; Decode
		// refuses a file where they disagree, so Encode never writes one.
		if v := c.desc.get("ctype"); v != nil {
			if ct, ok := v.asString(); !ok || ct != c.ctype {
				return fmt.Errorf("fold: chunk %q: descriptor ctype disagrees with the chunk's ctype %q", c.name, c.ctype)
			}
		}
		if v := c.desc.get("flags"); v != nil {
			if fl, ok := v.asInt64(); !ok || fl != int64(c.flags) {
				return fmt.Errorf("fold: chunk %q: descriptor flags disagree with the chunk's flags %d", c.name, c.flags)
			}
		}
		algo := "none"
		if a := c.desc.get("ecc_algo"); a != nil {
			algo, _ = a.asString()
		}
		nsym, err := parseECCAlgo(algo)
		if err != nil {
			return fmt.Errorf("fold: chunk %q: %w", c.name, err)
		}
		var ecc []byte
		if nsym > 0 {
			codec, err := rs.New(nsym)
			if err != nil {
				return err
			}
			k := codec.DataLen()
			ecc = make([]byte, eccLen(uint64(len(stored)), nsym))
			for b := 0; b*k < len(stored); b++ {
				if err := codec.Parity(ecc[b*nsym:(b+1)*nsym], stored[b*k:min((b+1)*k, len(stored))]); err != nil {
					return err
				}
			}
		}
		sum := sha256.Sum256(stored)
		crc := crc32.Checksum(stored, castagnoli)
		l := laid{stored: stored, ecc: ecc}
		copy(l.hdr[:4], c.ctype)
		binary.BigEndian.PutUint32(l.hdr[4:], c.flags)
		binary.BigEndian.PutUint64(l.hdr[8:], uint64(len(c.payload)))
		binary.BigEndian.PutUint64(l.hdr[16:], uint64(len(stored)))
		binary.BigEndian.PutUint32(l.hdr[24:], crc)
		binary.BigEndian.PutUint32(l.hdr[28:], uint32(len(ecc)))
		out[i] = l
		d := &jvalue{kind: jObject, obj: append([]jmember(nil), c.desc.obj...)}
		vals := map[string]*jvalue{
			"offset": juint(off), "header_len": jint(ChunkHeaderLen),
			"comp_len": jint(int64(len(stored))), "uncomp_len": jint(int64(len(c.payload))),
			"crc32c": juint(uint64(crc)), "sha256": jstr(hashString(sum[:])), "ecc_len": jint(int64(len(ecc))),
		}
		for _, k := range derivedKeys {
			if d.get(k) != nil {
				d.set(k, vals[k])
			}
		}
		descs.arr = append(descs.arr, d)
		hashes.set(c.name, jstr(hashString(sum[:])))
		off += ChunkHeaderLen + uint64(len(stored)) + uint64(len(ecc))
	}
	if m := root.get("metadata"); m != nil && m.kind == jObject {
		meta := &jvalue{kind: jObject, obj: append([]jmember(nil), m.obj...)}
		if meta.get("chunk_hashes") != nil {
			meta.set("chunk_hashes", hashes)
		}
		if meta.get("manifest_hash") != nil {
			sum := sha256.Sum256([]byte(canonicalJSON(meta.without("manifest_hash"))))
			meta.set("manifest_hash", jstr(hashString(sum[:])))
		}
		root = &jvalue{kind: jObject, obj: append([]jmember(nil), root.obj...)}
		root.set("metadata", meta)
	}
	root.set("chunks", descs)
	index := []byte(indexJSON(root))
	if len(index) > MaxIndexSize {
		return fmt.Errorf("fold: index of %d bytes exceeds MAX_INDEX_SIZE", len(index))
	}
	var hdr [HeaderLen]byte
	copy(hdr[:], Magic)
	binary.BigEndian.PutUint32(hdr[8:], HeaderLen)
	binary.BigEndian.PutUint64(hdr[12:], off)
	binary.BigEndian.PutUint64(hdr[20:], uint64(len(index)))
	if _, err := w.Write(hdr[:]); err != nil {
		return fmt.Errorf("fold: write header: %w", err)
	}
	for i, l := range out {
		for _, part := range [][]byte{l.hdr[:], l.stored, l.ecc} {
			if _, err := w.Write(part); err != nil {
				return fmt.Errorf("fold: write chunk %q: %w", chunks[i].name, err)
			}
		}
	}
	if _, err := w.Write(index); err != nil {
		return fmt.Errorf("fold: write index: %w", err)
	}
	return nil
}
