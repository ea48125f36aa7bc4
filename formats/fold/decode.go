package fold

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/fold/rs"
	"github.com/snapd-ml/snapd/snapshot"
)

// chunkRec is one element of the fold.chunks attribute: everything Encode
// needs to rebuild the chunk's payload and index descriptor.
type chunkRec struct {
	// Desc is the chunk's index descriptor, keys in file order, with the
	// derived fields (offset, header_len, comp_len, uncomp_len, crc32c,
	// sha256, ecc_len) zeroed; Encode fills them in again.
	Desc string `json:"desc"`
	// CType and Flags come from the 32-byte chunk header.
	CType string `json:"ctype"`
	Flags uint32 `json:"flags"`
	// Kind is raw, npz, sten or tsav.
	Kind string `json:"kind"`
	// Payload names the u8 array holding the uncompressed payload with
	// the spliced tensor byte ranges cut out.
	Payload string `json:"payload"`
	// Splices put arrays back into the payload, in payload order.
	Splices []spliceRec `json:"splices,omitempty"`
	// Copies are arrays decoded from bytes the payload keeps itself
	// (compressed zip members, strided torch views).
	Copies []copyRec `json:"copies,omitempty"`
	// Note says why a tensor chunk (TSAV) was kept opaque, wholly or
	// partly.
	Note string `json:"note,omitempty"`
}

type spliceRec struct {
	// At is the position in the payload array where the array's bytes go.
	At    int64  `json:"at"`
	Array string `json:"array"`
	// Swap is the element size to byte-swap back to big-endian (0: none).
	Swap int `json:"swap,omitempty"`
	// Fortran: the payload holds the array in Fortran (column-major) order.
	Fortran bool `json:"fortran,omitempty"`
	// CRC is the CRC-32 (IEEE) of the array's data, so Encode can refuse
	// data that no longer matches the container around it.
	CRC uint32 `json:"crc"`
	// Sig is the array's dtype and shape when decoded ("f32[2,3]").
	Sig string `json:"sig"`
}

type copyRec struct {
	Array string `json:"array"`
	CRC   uint32 `json:"crc"`
	Sig   string `json:"sig"`
}

// arraySig is the dtype and shape of an array as one string.
func arraySig(dt snapshot.DType, shape []int64) string {
	return dt.String() + jsonInts(shape)
}

// tensorOut is a tensor found inside a chunk payload.
type tensorOut struct {
	name  string // name inside the chunk
	dtype snapshot.DType
	shape []int64
	attrs map[string]string
	// data is the tensor's bytes as the snapshot holds them.
	data []byte
	// When spliced, the tensor's raw bytes are payload[off:off+n], and
	// data equals them after undoing swap/fortran.
	spliced bool
	off, n  int64
	swap    int
	fortran bool
}

// namer hands out unique WTXT-compatible array names; next remembers the
// last suffix tried per base so that many colliding names stay linear.
type namer struct {
	used map[string]bool
	next map[string]int
}

// sanitize maps s to the WTXT name alphabet, replacing every other byte by
// '_' and bounding the length.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !snapshot.NameByte(c) {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	if len(b) > 1000 {
		b = b[:1000]
	}
	return string(b)
}

func (n *namer) take(want string) string {
	base := sanitize(want)
	name := base
	for n.used[name] || name == snapshot.AttrsArrayName {
		n.next[base]++
		name = base + "." + strconv.Itoa(n.next[base])
	}
	n.used[name] = true
	return name
}

// derivedKeys are descriptor fields Encode recomputes.
var derivedKeys = []string{"offset", "header_len", "comp_len", "uncomp_len", "crc32c", "sha256", "ecc_len"}

// Decode implements formats.Codec. See doc.go for the checks and the
// snapshot it produces.
func (Codec) Decode(ctx context.Context, r io.ReaderAt, size int64, opts formats.DecodeOptions) (*snapshot.Snapshot, error) {
	d := &decoder{ctx: ctx, r: r, size: size, file: opts.Name, opts: opts, budget: opts.Budget(size)}
	if b, ok := snapshot.BytesOf(r); ok && int64(len(b)) >= size {
		d.mem = b[:size]
	}
	s, err := d.decode(ctx)
	if err != nil {
		// The message of err already starts with the sentinel's
		// ("fold: malformed file: ..."), so Format stays empty.
		return nil, &formats.Error{File: d.file, Offset: -1, Err: err}
	}
	return s, nil
}

type decoder struct {
	ctx    context.Context
	r      io.ReaderAt
	mem    []byte
	size   int64
	file   string
	opts   formats.DecodeOptions
	budget *formats.Budget
}

// read returns n bytes at off; the caller has checked off+n <= size. With
// a memory-backed reader the result aliases it.
func (d *decoder) read(off, n int64) ([]byte, error) {
	if d.mem != nil {
		return d.mem[off : off+n : off+n], nil
	}
	buf := make([]byte, n)
	if _, err := d.r.ReadAt(buf, off); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		if !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read %d bytes at offset %d: %w", n, off, err)
		}
		return nil, errorf(ErrTruncated, "read %d bytes at offset %d: %v", n, off, err)
	}
	return buf, nil
}

// inFile reports whether [off, off+n) lies inside the file, without
// overflow.
func (d *decoder) inFile(off, n uint64) bool {
	return off <= uint64(d.size) && n <= uint64(d.size)-off
}

// hashForm classifies a sha256 string of the index.
type hashForm int

const (
	formBad hashForm = iota
	formHex
	formPrefixed
	formHMAC
)

func parseHashString(s string) (hashForm, string) {
	isHex := func(h string) bool {
		if len(h) != 64 {
			return false
		}
		_, err := hex.DecodeString(h)
		return err == nil
	}
	switch {
	case strings.HasPrefix(s, "sha256:") && isHex(s[7:]):
		return formPrefixed, strings.ToLower(s[7:])
	case strings.HasPrefix(s, "hmac-sha256:"):
		if _, err := hex.DecodeString(s[12:]); err == nil && len(s) > 12 {
			return formHMAC, ""
		}
	case isHex(s):
		return formHex, strings.ToLower(s)
	}
	return formBad, ""
}

// checkHash compares an index hash string with digest. hmac-sha256 values
// cannot be verified without the key and are accepted unverified.
func checkHash(s string, digest []byte, what string) (hashForm, error) {
	form, h := parseHashString(s)
	switch form {
	case formBad:
		return form, errorf(ErrFormat, "%s: malformed sha256 string (%d bytes; want 64 hex digits, sha256:<hex> or hmac-sha256:<hex>)", what, len(s))
	case formHMAC:
		return form, nil
	}
	if h != hex.EncodeToString(digest) {
		return form, errorf(ErrChecksum, "%s: sha256 of the bytes is %s, the index's value differs", what, hex.EncodeToString(digest))
	}
	return form, nil
}

// parseECCAlgo returns nsym for "rs(N)" and 0 for "none".
func parseECCAlgo(s string) (int, error) {
	if s == "none" || s == "" {
		return 0, nil
	}
	if strings.HasPrefix(s, "rs(") && strings.HasSuffix(s, ")") {
		n, err := strconv.Atoi(s[3 : len(s)-1])
		if err == nil && n >= 1 && n < rs.MaxCodeword {
			return n, nil
		}
	}
	return 0, fmt.Errorf("unknown ecc_algo (%d bytes; want none or rs(N), 1 <= N < %d)", len(s), rs.MaxCodeword)
}

// eccLen is the ECC length for a payload of n bytes: nsym per block of
// 255-nsym bytes.
func eccLen(n uint64, nsym int) uint64 {
	k := uint64(rs.MaxCodeword - nsym)
	return uint64(nsym) * ((n + k - 1) / k)
}

func (d *decoder) decode(ctx context.Context) (*snapshot.Snapshot, error) {
	if d.size < HeaderLen {
		return nil, errorf(ErrTruncated, "file of %d bytes is shorter than the %d-byte header", d.size, HeaderLen)
	}
	hdr, err := d.read(0, HeaderLen)
	if err != nil {
		return nil, err
	}
	if string(hdr[:8]) != Magic {
		return nil, errorf(ErrFormat, "offset 0: the first 8 bytes are not the FOLD magic %q", Magic)
	}
	if hl := binary.BigEndian.Uint32(hdr[8:]); hl != HeaderLen {
		// The value is not printed: after a forged magic these are anybody's bytes.
		return nil, errorf(ErrFormat, "offset 8: header_len is not %d", HeaderLen)
	}
	indexOff := binary.BigEndian.Uint64(hdr[12:])
	indexLen := binary.BigEndian.Uint64(hdr[20:])
	if indexOff < HeaderLen {
		return nil, errorf(ErrFormat, "offset 12: index_off %d is inside the header", indexOff)
	}
	if indexLen > MaxIndexSize {
		return nil, errorf(ErrLimit, "offset 20: index_len %d exceeds MAX_INDEX_SIZE %d", indexLen, MaxIndexSize)
	}
	if !d.inFile(indexOff, indexLen) {
		return nil, errorf(ErrTruncated, "index at %d + length %d exceeds file size %d", indexOff, indexLen, d.size)
	}
	raw, err := d.read(int64(indexOff), int64(indexLen))
	if err != nil {
		return nil, err
	}
	root, err := parseJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: index at offset %d: %w", ErrFormat, indexOff, err)
	}
	if root.kind != jObject {
		return nil, errorf(ErrFormat, "index at offset %d is not a JSON object", indexOff)
	}
	if f := root.get("format"); f != nil {
		if s, _ := f.asString(); s != "fold" {
			return nil, errorf(ErrFormat, "index format is not \"fold\"")
		}
	}
	meta := root.get("metadata")
	if meta == nil {
		meta = &jvalue{kind: jObject}
	}
	if meta.kind != jObject {
		return nil, errorf(ErrFormat, "index metadata is not an object")
	}
	chunksV := root.get("chunks")
	if chunksV == nil || chunksV.kind != jArray {
		return nil, errorf(ErrFormat, "index has no chunks list")
	}

	forms := map[hashForm]bool{}

	// manifest_hash: sha256 of the canonical metadata without it.
	if mh := meta.get("manifest_hash"); mh != nil {
		s, ok := mh.asString()
		if !ok {
			return nil, errorf(ErrFormat, "metadata.manifest_hash is not a string")
		}
		sum := sha256.Sum256([]byte(canonicalJSON(meta.without("manifest_hash"))))
		f, err := checkHash(s, sum[:], "metadata.manifest_hash")
		if err != nil {
			return nil, err
		}
		forms[f] = true
	}
	var chunkHashes *jvalue
	if ch := meta.get("chunk_hashes"); ch != nil {
		if ch.kind != jObject {
			return nil, errorf(ErrFormat, "metadata.chunk_hashes is not an object")
		}
		chunkHashes = ch
	}

	// Descriptors.
	descs := make([]descInfo, len(chunksV.arr))
	lastByName := map[string]int{}
	for i, c := range chunksV.arr {
		if c.kind != jObject {
			return nil, errorf(ErrFormat, "index chunks[%d] is not an object", i)
		}
		di := descInfo{v: c}
		var ok bool
		if di.name, ok = c.get("name").asString(); !ok {
			return nil, errorf(ErrFormat, "index chunks[%d]: name missing or not a string", i)
		}
		off, ok := c.get("offset").asInt64()
		if !ok || off < 0 {
			return nil, errorf(ErrFormat, "index chunk %q: offset missing or not a non-negative integer", di.name)
		}
		di.offset = uint64(off)
		if di.sha, ok = c.get("sha256").asString(); !ok {
			return nil, errorf(ErrFormat, "index chunk %q: sha256 missing or not a string", di.name)
		}
		di.algo = "none"
		if a := c.get("ecc_algo"); a != nil {
			if di.algo, ok = a.asString(); !ok {
				return nil, errorf(ErrFormat, "index chunk %q: ecc_algo is not a string", di.name)
			}
		}
		if e := c.get("encrypted"); e != nil && e.kind == jBool && e.b {
			return nil, errorf(ErrUnsupported, "chunk %q is encrypted (AES-256-GCM); no key support", di.name)
		}
		if di.dup, err = parseDup(c, di.name); err != nil {
			return nil, err
		}
		descs[i] = di
		lastByName[di.name] = i
	}

	if err := checkLayout(descs, indexOff, indexLen); err != nil {
		return nil, err
	}

	s := &snapshot.Snapshot{Attrs: map[string]string{}}
	nm := &namer{used: map[string]bool{}, next: map[string]int{}}
	var recs []chunkRec
	ends := make([]uint64, len(descs))
	for i, di := range descs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c, err := d.readChunk(i, di)
		if err != nil {
			return nil, err
		}
		ends[i] = c.end
		if c.eccNote != "" {
			d.opts.Report(c.where, "ecc: %s", c.eccNote)
		}
		f, _ := parseHashString(di.sha)
		forms[f] = true
		if chunkHashes != nil && lastByName[di.name] == i {
			if hv := chunkHashes.get(di.name); hv != nil {
				hs, ok := hv.asString()
				if !ok {
					return nil, errorf(ErrFormat, "metadata.chunk_hashes[%q] is not a string", di.name)
				}
				if _, err := checkHash(hs, c.sum[:], fmt.Sprintf("metadata.chunk_hashes[%q]", di.name)); err != nil {
					return nil, err
				}
			}
		}
		ctype, flags, payload, where := c.ctype, c.flags, c.payload, c.where

		var tensors []tensorOut
		var note string
		kind := "raw"
		switch ctype {
		case CTypeNPZ:
			kind = "npz"
			tensors, err = parseNPZ(payload, d.budget)
		case CTypeSTEN:
			kind = "sten"
			tensors, err = parseSTEN(payload)
		case CTypeTSAV:
			kind = "tsav"
			tensors, note, err = parseTSAV(d.ctx, payload, d.budget)
		}
		if err != nil {
			if errors.Is(err, formats.ErrLimit) {
				return nil, fmt.Errorf("%w: %s (%s): %w", ErrLimit, where, ctype, err)
			}
			return nil, fmt.Errorf("%w: %s (%s): %w", ErrFormat, where, ctype, err)
		}
		rec, arrays, err := assemble(payload, tensors, di.name, kind, nm, d.budget)
		if err != nil {
			if errors.Is(err, formats.ErrLimit) {
				return nil, fmt.Errorf("%w: %s: %w", ErrLimit, where, err)
			}
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		// Descriptor with derived fields zeroed.
		dv := &jvalue{kind: jObject, obj: append([]jmember(nil), di.v.obj...)}
		for _, k := range derivedKeys {
			if dv.get(k) != nil {
				if k == "sha256" {
					dv.set(k, jstr(""))
				} else {
					dv.set(k, jint(0))
				}
			}
		}
		rec.Desc = indexJSON(dv)
		rec.CType = ctype
		rec.Note = note
		rec.Flags = flags
		recs = append(recs, rec)
		s.Arrays = append(s.Arrays, arrays...)
	}

	if err := checkTiling(descs, ends, indexOff, indexLen, uint64(d.size)); err != nil {
		return nil, err
	}
	if chunkHashes != nil {
		for _, m := range chunkHashes.obj {
			if _, ok := lastByName[m.key]; !ok {
				return nil, errorf(ErrFormat, "metadata.chunk_hashes lists a chunk (%d-byte name) that the index does not", len(m.key))
			}
		}
	}

	// Index skeleton: chunks emptied, hashes blanked, key order kept.
	rootCopy := &jvalue{kind: jObject, obj: append([]jmember(nil), root.obj...)}
	metaCopy := &jvalue{kind: jObject, obj: append([]jmember(nil), meta.obj...)}
	if metaCopy.get("chunk_hashes") != nil {
		metaCopy.set("chunk_hashes", &jvalue{kind: jObject})
	}
	if metaCopy.get("manifest_hash") != nil {
		metaCopy.set("manifest_hash", jstr(""))
	}
	if root.get("metadata") != nil {
		rootCopy.set("metadata", metaCopy)
	}
	rootCopy.set("chunks", &jvalue{kind: jArray})
	s.Attrs[AttrIndex] = indexJSON(rootCopy)
	recJSON, err := json.Marshal(recs)
	if err != nil {
		return nil, err
	}
	if recs == nil {
		recJSON = []byte("[]")
	}
	s.Attrs[AttrChunks] = string(recJSON)
	switch {
	case forms[formPrefixed] || forms[formHMAC]:
		s.Attrs[AttrHashForm] = "sha256"
	default:
		s.Attrs[AttrHashForm] = "hex"
	}
	return s, nil
}

// checkTiling requires the chunks to fill [28, index_off) back to back in
// offset order, and the file to end with the index, as the writers lay
// files out: a chunk dropped from the index (or bytes added) leaves a gap
// and is refused instead of disappearing silently.
func checkTiling(descs []descInfo, ends []uint64, indexOff, indexLen, size uint64) error {
	order := make([]int, len(descs))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return descs[order[a]].offset < descs[order[b]].offset })
	pos := uint64(HeaderLen)
	for _, i := range order {
		if descs[i].offset != pos {
			return errorf(ErrFormat, "bytes [%d, %d) belong to no chunk the index lists (next: chunk %q at %d)", pos, descs[i].offset, descs[i].name, descs[i].offset)
		}
		pos = ends[i]
	}
	if pos != indexOff {
		return errorf(ErrFormat, "bytes [%d, %d) between the last chunk and the index belong to no chunk the index lists", pos, indexOff)
	}
	if end := indexOff + indexLen; end != size {
		return errorf(ErrFormat, "the index ends at %d but the file has %d bytes", end, size)
	}
	return nil
}

// descInfo is what the reader takes from one index chunk descriptor.
type descInfo struct {
	v      *jvalue
	name   string
	offset uint64
	sha    string
	algo   string
	dup    dupFields
	// end is where the next chunk or the index starts (0: none follows);
	// the chunk's bytes must end there at the latest.
	end uint64
}

// dupFields are the chunk header's fields that the index descriptor
// repeats; each is checked against the header when the descriptor has it.
type dupFields struct {
	ctype                                    *string
	flags, headerLen, comp, uncomp, crc, ecc *uint64
}

// parseDup reads the descriptor's copies of header fields.
func parseDup(c *jvalue, name string) (dupFields, error) {
	var f dupFields
	if v := c.get("ctype"); v != nil {
		s, ok := v.asString()
		if !ok {
			return f, errorf(ErrFormat, "index chunk %q: ctype is not a string", name)
		}
		f.ctype = &s
	}
	for _, k := range []struct {
		key string
		dst **uint64
	}{{"flags", &f.flags}, {"header_len", &f.headerLen}, {"comp_len", &f.comp}, {"uncomp_len", &f.uncomp}, {"crc32c", &f.crc}, {"ecc_len", &f.ecc}} {
		v := c.get(k.key)
		if v == nil {
			continue
		}
		n, ok := v.asInt64()
		if !ok || n < 0 {
			return f, errorf(ErrFormat, "index chunk %q: %s is not a non-negative integer", name, k.key)
		}
		u := uint64(n)
		*k.dst = &u
	}
	return f, nil
}

// checkLayout refuses an index whose chunks overlap the header, the index
// or each other: every chunk must own its bytes, as the writers lay them
// out. Only the 32-byte headers are known here; payload extents are
// checked against the next chunk once the headers are read (readChunk).
func checkLayout(descs []descInfo, indexOff, indexLen uint64) error {
	type span struct {
		off  uint64
		name string
		i    int
	}
	spans := make([]span, len(descs))
	for i, di := range descs {
		if di.offset < HeaderLen {
			return errorf(ErrFormat, "index chunk %q (index %d): offset %d is inside the %d-byte file header", di.name, i, di.offset, HeaderLen)
		}
		if di.offset < indexOff+indexLen && indexOff < di.offset+ChunkHeaderLen {
			return errorf(ErrFormat, "index chunk %q (index %d): offset %d overlaps the index at [%d, %d)", di.name, i, di.offset, indexOff, indexOff+indexLen)
		}
		spans[i] = span{di.offset, di.name, i}
	}
	sort.Slice(spans, func(a, b int) bool { return spans[a].off < spans[b].off })
	for k := range spans {
		if k > 0 && spans[k].off-spans[k-1].off < ChunkHeaderLen {
			return errorf(ErrFormat, "index chunks %q (index %d) and %q (index %d): offsets %d and %d overlap",
				spans[k-1].name, spans[k-1].i, spans[k].name, spans[k].i, spans[k-1].off, spans[k].off)
		}
		end := uint64(0)
		if k+1 < len(spans) {
			end = spans[k+1].off
		}
		if indexOff > spans[k].off && (end == 0 || indexOff < end) {
			end = indexOff
		}
		descs[spans[k].i].end = end
	}
	return nil
}

// chunkData is one chunk after the integrity checks and decompression.
type chunkData struct {
	where   string // for error messages
	ctype   string
	flags   uint32
	payload []byte
	sum     [32]byte // sha256 of the (corrected) stored bytes
	eccNote string   // ECC report, a diagnostic ("" when clean)
	end     uint64   // file offset just past the chunk's ECC bytes
}

// readChunk reads chunk i's header, checks bounds and limits, verifies
// crc32c and the index sha256 (correcting with ECC when they fail) and
// decompresses the payload.
func (d *decoder) readChunk(i int, di descInfo) (chunkData, error) {
	where := fmt.Sprintf("chunk %q (index %d, offset %d)", di.name, i, di.offset)
	c := chunkData{where: where}
	if !d.inFile(di.offset, ChunkHeaderLen) {
		return c, errorf(ErrTruncated, "%s: 32-byte chunk header exceeds file size %d", where, d.size)
	}
	ch, err := d.read(int64(di.offset), ChunkHeaderLen)
	if err != nil {
		return c, fmt.Errorf("%s: %w", where, err)
	}
	ctype := string(ch[:4])
	for k, b := range ch[:4] {
		if b >= 0x80 {
			return c, errorf(ErrFormat, "%s: ctype byte %d of the chunk header is not ASCII", where, k)
		}
	}
	flags := binary.BigEndian.Uint32(ch[4:])
	uncompLen := binary.BigEndian.Uint64(ch[8:])
	compLen := binary.BigEndian.Uint64(ch[16:])
	crc := binary.BigEndian.Uint32(ch[24:])
	eccN := uint64(binary.BigEndian.Uint32(ch[28:]))
	// The chunk header is covered by no hash: every field the index
	// repeats must agree with it, or one flipped bit could change how the
	// chunk is read (its type, its compression, its length).
	if di.dup.ctype != nil && *di.dup.ctype != ctype {
		return c, errorf(ErrFormat, "%s: chunk header ctype (header byte 0) disagrees with the index's ctype", where)
	}
	for _, f := range []struct {
		n   string
		at  int
		hdr uint64
		idx *uint64
	}{{"flags", 4, uint64(flags), di.dup.flags}, {"header_len", -1, ChunkHeaderLen, di.dup.headerLen},
		{"uncomp_len", 8, uncompLen, di.dup.uncomp}, {"comp_len", 16, compLen, di.dup.comp},
		{"crc32c", 24, uint64(crc), di.dup.crc}, {"ecc_len", 28, eccN, di.dup.ecc}} {
		if f.idx != nil && *f.idx != f.hdr {
			if f.at < 0 {
				return c, errorf(ErrFormat, "%s: index header_len %d, chunk headers are %d bytes", where, *f.idx, ChunkHeaderLen)
			}
			return c, errorf(ErrFormat, "%s: chunk header %s %d (header byte %d) disagrees with the index's %d", where, f.n, f.hdr, f.at, *f.idx)
		}
	}
	for _, f := range []struct {
		n  string
		v  uint64
		at int
	}{{"uncomp_len", uncompLen, 8}, {"comp_len", compLen, 16}, {"ecc_len", eccN, 28}} {
		if f.v > MaxChunkSize {
			return c, errorf(ErrLimit, "%s: %s %d at header byte %d exceeds MAX_CHUNK_SIZE %d", where, f.n, f.v, f.at, uint64(MaxChunkSize))
		}
	}
	dataOff := di.offset + ChunkHeaderLen
	if !d.inFile(dataOff, compLen+eccN) {
		return c, errorf(ErrTruncated, "%s: payload at %d + comp_len %d + ecc_len %d exceeds file size %d", where, dataOff, compLen, eccN, d.size)
	}
	if di.end > 0 && dataOff+compLen+eccN > di.end {
		return c, errorf(ErrFormat, "%s: payload at %d + comp_len %d + ecc_len %d runs into the next chunk or the index at %d", where, dataOff, compLen, eccN, di.end)
	}
	stored, err := d.read(int64(dataOff), int64(compLen))
	if err != nil {
		return c, fmt.Errorf("%s: %w", where, err)
	}
	nsym, err := parseECCAlgo(di.algo)
	if err != nil {
		return c, errorf(ErrFormat, "%s: %v", where, err)
	}
	eccUsable := nsym > 0 && eccN > 0 && eccN == eccLen(compLen, nsym)

	sum := sha256.Sum256(stored)
	gotCRC := crc32.Checksum(stored, castagnoli)
	snapshot.ReleaseAt(d.r, int64(dataOff), int64(compLen))
	crcOK := gotCRC == crc
	_, shaErr := checkHash(di.sha, sum[:], where+" index sha256")
	if shaErr != nil && !errors.Is(shaErr, ErrChecksum) {
		return c, shaErr
	}
	switch {
	case crcOK && shaErr == nil:
		if nsym > 0 && eccN > 0 {
			ecc, err := d.read(int64(dataOff+compLen), int64(eccN))
			if err != nil {
				return c, fmt.Errorf("%s: %w", where, err)
			}
			if st := eccConsistency(stored, ecc, nsym, eccUsable); st != "" {
				c.eccNote = st
			}
		}
	case eccUsable:
		ecc, err := d.read(int64(dataOff+compLen), int64(eccN))
		if err != nil {
			return c, fmt.Errorf("%s: %w", where, err)
		}
		if err := d.budget.Take(int64(compLen), where+": ECC-corrected copy"); err != nil {
			return c, fmt.Errorf("%w: %w", ErrLimit, err)
		}
		fixed, n, err := eccCorrect(stored, ecc, nsym)
		if err != nil {
			return c, fmt.Errorf("%w: %s: crc32c/sha256 mismatch and ECC %s cannot correct it: %w", ErrChecksum, where, di.algo, err)
		}
		if got := crc32.Checksum(fixed, castagnoli); got != crc {
			return c, errorf(ErrChecksum, "%s: crc32c %08x after ECC correction, header says %08x", where, got, crc)
		}
		sum = sha256.Sum256(fixed)
		if _, err := checkHash(di.sha, sum[:], where+" index sha256 (after ECC)"); err != nil {
			return c, err
		}
		stored = fixed
		c.eccNote = fmt.Sprintf("corrected %d bytes", n)
	case !crcOK:
		return c, errorf(ErrChecksum, "%s: crc32c %08x, header says %08x", where, gotCRC, crc)
	default:
		return c, shaErr
	}

	// Payload.
	var payload []byte
	if flags == 1 {
		payload, err = d.budget.DecompressZstd(d.ctx, bytes.NewReader(stored), int64(uncompLen), true, where+" (uncomp_len)")
		if err != nil {
			if cerr := d.ctx.Err(); cerr != nil {
				return c, cerr
			}
			if errors.Is(err, formats.ErrLimit) {
				return c, fmt.Errorf("%w: %w", ErrLimit, err)
			}
			return c, fmt.Errorf("%w: %w", ErrFormat, err)
		}
	} else {
		if uncompLen != compLen {
			return c, errorf(ErrFormat, "%s: uncompressed chunk (flags %d) with uncomp_len %d != comp_len %d", where, flags, uncompLen, compLen)
		}
		payload = stored
	}

	c.ctype, c.flags, c.payload, c.sum = ctype, flags, payload, sum
	c.end = dataOff + compLen + eccN
	return c, nil
}

// eccConsistency compares stored ECC bytes with the parity of intact data
// and describes any mismatch ("" when consistent).
func eccConsistency(data, ecc []byte, nsym int, usable bool) string {
	if !usable {
		return fmt.Sprintf("ecc_len %d does not match rs(%d) of %d bytes; ECC ignored", len(ecc), nsym, len(data))
	}
	c, _ := rs.New(nsym)
	k := c.DataLen()
	par := make([]byte, nsym)
	var bad []string
	for b := 0; b*k < len(data); b++ {
		blk := data[b*k : min((b+1)*k, len(data))]
		_ = c.Parity(par, blk)
		if !bytes.Equal(par, ecc[b*nsym:(b+1)*nsym]) {
			bad = append(bad, strconv.Itoa(b))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return fmt.Sprintf("ECC parity inconsistent with intact data in blocks %s (data verified by crc32c and sha256; ECC not used)", strings.Join(bad, ","))
}

// eccCorrect returns a corrected copy of data using per-block parity.
func eccCorrect(data, ecc []byte, nsym int) ([]byte, int, error) {
	c, err := rs.New(nsym)
	if err != nil {
		return nil, 0, err
	}
	out := append([]byte(nil), data...)
	par := append([]byte(nil), ecc...)
	k := c.DataLen()
	total := 0
	for b := 0; b*k < len(out); b++ {
		n, err := c.Correct(out[b*k:min((b+1)*k, len(out))], par[b*nsym:(b+1)*nsym])
		if err != nil {
			return nil, 0, fmt.Errorf("block %d (payload bytes %d..%d): %w", b, b*k, min((b+1)*k, len(out)), err)
		}
		total += n
	}
	return out, total, nil
}

// assemble turns a payload and the tensors found in it into arrays and
// the chunk record: spliced tensor ranges are cut out of the payload array.
func assemble(payload []byte, tensors []tensorOut, chunk, kind string, nm *namer, budget *formats.Budget) (chunkRec, []*snapshot.Array, error) {
	rec := chunkRec{Kind: kind}
	// Order splices by offset; overlapping ranges become copies.
	idx := make([]int, len(tensors))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return tensors[idx[a]].off < tensors[idx[b]].off })
	var end int64
	for _, i := range idx {
		t := &tensors[i]
		if !t.spliced {
			continue
		}
		if t.off < end || t.n <= 0 || t.off+t.n > int64(len(payload)) {
			t.spliced = false
			continue
		}
		end = t.off + t.n
	}
	payloadName := nm.take(chunk)
	var arrays []*snapshot.Array
	skel := payload
	cut := int64(0)
	if end > 0 {
		if err := budget.Take(int64(len(payload)), fmt.Sprintf("chunk %q: payload without its tensors", chunk)); err != nil {
			return rec, nil, err
		}
		skel = make([]byte, 0, len(payload))
		var pos int64
		for _, i := range idx {
			t := &tensors[i]
			if !t.spliced {
				continue
			}
			skel = append(skel, payload[pos:t.off]...)
			pos = t.off + t.n
			cut += t.n
		}
		skel = append(skel, payload[pos:]...)
	}
	rec.Payload = payloadName
	arrays = append(arrays, &snapshot.Array{Name: payloadName, DType: snapshot.U8, Shape: []int64{int64(len(skel))}, Data: snapshot.Bytes(skel)})
	// Tensor arrays in payload order for splices, then copies in source order.
	names := make([]string, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		names[i] = nm.take(chunk + "/" + t.name)
		attrs := t.attrs
		if names[i] != chunk+"/"+t.name {
			if attrs == nil {
				attrs = map[string]string{}
			}
			attrs[AttrName] = t.name
		}
		arrays = append(arrays, &snapshot.Array{Name: names[i], DType: t.dtype, Shape: t.shape, Data: snapshot.Bytes(t.data), Attrs: attrs})
	}
	var removed int64
	for _, i := range idx {
		t := &tensors[i]
		if !t.spliced {
			continue
		}
		rec.Splices = append(rec.Splices, spliceRec{At: t.off - removed, Array: names[i], Swap: t.swap, Fortran: t.fortran, CRC: crc32.ChecksumIEEE(t.data), Sig: arraySig(t.dtype, t.shape)})
		removed += t.n
	}
	for i := range tensors {
		if !tensors[i].spliced {
			rec.Copies = append(rec.Copies, copyRec{Array: names[i], CRC: crc32.ChecksumIEEE(tensors[i].data), Sig: arraySig(tensors[i].dtype, tensors[i].shape)})
		}
	}
	if cut+int64(len(skel)) != int64(len(payload)) {
		return rec, nil, errors.New("internal error: splice bookkeeping")
	}
	return rec, arrays, nil
}

// elemCount is snapshot.NumElements with an upper bound.
func elemCount(shape []int64, limit int64) (int64, error) {
	n, err := snapshot.NumElements(shape)
	if err != nil {
		return 0, err
	}
	if n > limit {
		return 0, fmt.Errorf("%d elements exceed the %d available", n, limit)
	}
	return n, nil
}
