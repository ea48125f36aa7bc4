package aero

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"golang.org/x/sync/errgroup"
	"lukechampine.com/blake3"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// maxProblems bounds how many problems one decode reports in detail.
const maxProblems = 256

// streamBlock is the read size when hashing through a ReaderAt.
const streamBlock = 1 << 20

type header struct {
	tocOff, tocLen, stOff, stLen uint64
	uuid                         [16]byte
}

type tocEntry struct {
	index            int
	fourcc           [4]byte
	flags            uint32
	off, length      uint64
	ulen             uint64
	nameOff, nameLen uint32
	hash             [32]byte
	name             string
	bad              bool   // failed a structural check: its bytes are not used
	content          []byte // uncompressed bytes, when kept
}

func (e *tocEntry) label() string {
	return fmt.Sprintf("TOC entry %d %s %q", e.index, fourccString(e.fourcc), e.name)
}

func (e *tocEntry) compressed() bool { return e.flags&flagZstd != 0 }
func (e *tocEntry) is(f string) bool { return string(e.fourcc[:]) == f }

type tidxEntry struct {
	name                      string
	dtype                     uint64
	shape                     []uint64
	shardID, dataOff, dataLen uint64
	flags                     uint64
	hash                      string
	hasHash                   bool
	extra                     []mpair
	shard                     *tocEntry
}

type phshInfo struct {
	entry    *tocEntry
	pageSize uint64
	digests  [][32]byte
}

type decoder struct {
	ctx    context.Context
	r      io.ReaderAt
	mem    []byte // non-nil when r is memory-backed
	size   int64
	file   string
	budget *formats.Budget // decompressed bytes of this file

	hdr     header
	entries []*tocEntry

	ihsh, mjsn, mmsg, tidx *tocEntry
	shards                 map[string]*tocEntry // canonical shard name → WTSH
	phsh                   map[string]*phshInfo // shard name → its PHSH
	opaque                 map[int]bool         // TOC indexes kept as opaque chunks
	dropped                []string

	mmsgVal   mval
	tidxExtra []mpair
	tensors   []*tidxEntry

	mu    sync.Mutex
	probs []*Error
	more  int
}

func (d *decoder) problem(sentinel error, check string, e *tocEntry, tensor string, off int64, format string, a ...any) {
	p := &Error{Format: "aero", File: d.file, Check: check, Tensor: tensor, Offset: off, Detail: fmt.Sprintf(format, a...), Err: sentinel}
	if e != nil {
		p.Part = e.label()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.probs) >= maxProblems {
		d.more++
		return
	}
	d.probs = append(d.probs, p)
}

func (d *decoder) fatal(sentinel error, check string, off int64, format string, a ...any) error {
	return &Error{Format: "aero", File: d.file, Check: check, Offset: off, Detail: fmt.Sprintf(format, a...), Err: sentinel}
}

// Decode implements formats.Codec. It verifies everything the file carries
// (see doc.go) and returns no snapshot when any check fails: the error is
// an *Error for a file whose header or TOC cannot be parsed, otherwise a
// *CorruptError listing every problem found.
func (Codec) Decode(ctx context.Context, r io.ReaderAt, size int64, opts formats.DecodeOptions) (*snapshot.Snapshot, error) {
	d := &decoder{ctx: ctx, r: r, size: size, file: opts.Name, budget: opts.Budget(size)}
	if b, ok := snapshot.BytesOf(r); ok && int64(len(b)) >= size {
		d.mem = b[:size]
	}
	if err := d.readControl(); err != nil {
		return nil, err
	}
	d.checkEntries()
	if err := d.loadChunks(); err != nil {
		return nil, err
	}
	d.parseTIDX()
	d.resolveTensors()
	d.checkManifest()
	if err := d.checkCoverage(); err != nil {
		return nil, err
	}
	if err := d.verifyData(); err != nil {
		return nil, err
	}
	if len(d.probs) > 0 {
		sortProblems(d.probs)
		if d.more > 0 {
			d.probs = append(d.probs, &Error{Format: "aero", File: d.file, Check: "limit", Offset: -1,
				Detail: fmt.Sprintf("%d more problems not listed", d.more), Err: ErrCorrupt})
		}
		return nil, &CorruptError{File: d.file, Problems: d.probs}
	}
	return d.build()
}

// readAt returns n bytes at off (n already checked against the file size).
// A copy (r not memory-backed) is charged to the budget first.
func (d *decoder) readAt(off, n int64) ([]byte, error) {
	if d.mem != nil {
		return d.mem[off : off+n : off+n], nil
	}
	if err := d.take(n, off, "read %d bytes at offset %d into memory", n, off); err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	if err := snapshot.ReadFullAt(d.r, buf, off); err != nil {
		return nil, d.readErr(err, off, n)
	}
	return buf, nil
}

// take charges n bytes about to be materialised to the file's decode
// budget; the error is a fatal *Error wrapping ErrLimit that says what
// was to be materialised (format, args) and the budget.
func (d *decoder) take(n, off int64, format string, a ...any) error {
	rem := d.budget.Remaining()
	if err := d.budget.Take(n, ""); err != nil {
		return d.fatal(ErrLimit, "budget", off, "%s: %d bytes exceed the remaining decode budget of %d bytes (%d for this file; DecodeOptions.MaxDecoded)",
			fmt.Sprintf(format, a...), n, rem, d.budget.Limit())
	}
	return nil
}

// limitOr is the sentinel of a parse failure: ErrLimit when the budget
// refused it, else or.
func limitOr(err, or error) error {
	if errors.Is(err, formats.ErrLimit) {
		return ErrLimit
	}
	return or
}

func (d *decoder) readErr(err error, off, n int64) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return d.fatal(ErrTruncated, "read", off, "short read of %d bytes (file shorter than its declared size %d)", n, d.size)
	}
	return fmt.Errorf("aero: %s: read %d bytes at offset %d: %w", d.file, n, off, err)
}

// stream calls fn with consecutive pieces of [off, off+n).
func (d *decoder) stream(ctx context.Context, off, n int64, fn func([]byte)) error {
	var buf []byte
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := min(n, streamBlock)
		if d.mem != nil {
			fn(d.mem[off : off+k])
			snapshot.ReleaseAt(d.r, off, k)
		} else {
			if buf == nil {
				buf = make([]byte, min(n, streamBlock))
			}
			if err := snapshot.ReadFullAt(d.r, buf[:k], off); err != nil {
				return d.readErr(err, off, k)
			}
			fn(buf[:k])
		}
		off += k
		n -= k
	}
	return nil
}

func inFile(off, n uint64, size int64) bool {
	return off <= uint64(size) && n <= uint64(size)-off
}

func (d *decoder) readControl() error {
	if d.size < headerSize {
		if d.size >= 4 && d.readMagicOK() {
			return d.fatal(ErrTruncated, "header", 0, "file of %d bytes is shorter than the %d-byte header", d.size, headerSize)
		}
		return d.fatal(ErrNotAero, "header", 0, "file of %d bytes is too short for an AERO header", d.size)
	}
	h, err := d.readAt(0, headerSize)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	if [4]byte(h[:4]) != magic {
		return d.fatal(ErrNotAero, "header", 0, "the first 4 bytes are not the magic \"AERO\"")
	}
	if maj, mnr := le.Uint16(h[4:]), le.Uint16(h[6:]); maj != 0 || mnr != 1 {
		return d.fatal(ErrVersion, "header", 4, "version %d.%d is not 0.1", maj, mnr)
	}
	if hs := le.Uint32(h[8:]); hs != headerSize {
		return d.fatal(ErrVersion, "header", 8, "header_size %d is not %d", hs, headerSize)
	}
	if ff := le.Uint64(h[44:]); ff != 0 {
		return d.fatal(ErrVersion, "header", 44, "file_flags 0x%x is not 0", ff)
	}
	d.hdr = header{tocOff: le.Uint64(h[12:]), tocLen: le.Uint64(h[20:]), stOff: le.Uint64(h[28:]), stLen: le.Uint64(h[36:])}
	copy(d.hdr.uuid[:], h[52:68])
	hd := d.hdr
	if hd.tocLen < tocHeaderLen {
		return d.fatal(ErrCorrupt, "toc", 20, "toc_length %d is shorter than the %d-byte TOC header", hd.tocLen, tocHeaderLen)
	}
	if hd.tocOff < headerSize {
		return d.fatal(ErrCorrupt, "toc", 12, "toc_offset %d overlaps the header", hd.tocOff)
	}
	if !inFile(hd.tocOff, hd.tocLen, d.size) {
		return d.fatal(ErrTruncated, "toc", 12, "TOC [%d, +%d) exceeds file size %d", hd.tocOff, hd.tocLen, d.size)
	}
	th, err := d.readAt(int64(hd.tocOff), tocHeaderLen)
	if err != nil {
		return err
	}
	n := uint64(le.Uint32(th))
	if n > MaxEntryCount {
		return d.fatal(ErrLimit, "toc", int64(hd.tocOff), "entry_count %d exceeds MAX_ENTRY_COUNT %d", n, MaxEntryCount)
	}
	if need := tocHeaderLen + tocEntryLen*n; need != hd.tocLen {
		// The count and the length say the same thing twice; a TOC whose
		// entry_count disagrees with toc_length (e.g. flipped to 0) is not
		// read as fewer chunks.
		return d.fatal(ErrCorrupt, "toc", int64(hd.tocOff), "toc_length %d (header byte 20) disagrees with entry_count %d: 16 + 80 × %d = %d", hd.tocLen, n, n, need)
	}
	if hd.stLen > MaxStringTable {
		return d.fatal(ErrLimit, "string table", 36, "string_table_length %d exceeds MAX_STRING_TABLE %d", hd.stLen, MaxStringTable)
	}
	if !inFile(hd.stOff, hd.stLen, d.size) {
		return d.fatal(ErrTruncated, "string table", 28, "string table [%d, +%d) exceeds file size %d", hd.stOff, hd.stLen, d.size)
	}
	if hd.stLen > 0 && (hd.stOff < hd.tocOff+hd.tocLen && hd.tocOff < hd.stOff+hd.stLen || hd.stOff < headerSize) {
		return d.fatal(ErrCorrupt, "string table", 28, "string table [%d, %d) overlaps the header or TOC [%d, %d)", hd.stOff, hd.stOff+hd.stLen, hd.tocOff, hd.tocOff+hd.tocLen)
	}
	raw, err := d.readAt(int64(hd.tocOff)+tocHeaderLen, int64(tocEntryLen*n))
	if err != nil {
		return err
	}
	st, err := d.readAt(int64(hd.stOff), int64(hd.stLen))
	if err != nil {
		return err
	}
	if err := d.take(int64(n)*tocEntryCost, int64(hd.tocOff), "%d TOC entries", n); err != nil {
		return err
	}
	d.entries = make([]*tocEntry, n)
	for i := range d.entries {
		b := raw[i*tocEntryLen : (i+1)*tocEntryLen]
		e := &tocEntry{index: i, fourcc: [4]byte(b[0:4]), flags: le.Uint32(b[4:]), off: le.Uint64(b[8:]),
			length: le.Uint64(b[16:]), ulen: le.Uint64(b[24:]), nameOff: le.Uint32(b[32:]), nameLen: le.Uint32(b[36:])}
		copy(e.hash[:], b[48:80])
		if uint64(e.nameOff)+uint64(e.nameLen) <= hd.stLen {
			e.name = string(st[e.nameOff : e.nameOff+e.nameLen])
		} else {
			e.bad = true
			d.problem(ErrCorrupt, "name", e, "", d.entryOff(i)+32, "name [%d, +%d) lies outside the %d-byte string table", e.nameOff, e.nameLen, hd.stLen)
		}
		d.entries[i] = e
	}
	return nil
}

func (d *decoder) readMagicOK() bool {
	var m [4]byte
	_, err := d.r.ReadAt(m[:], 0)
	return err == nil && m == magic
}

func (d *decoder) entryOff(i int) int64 {
	return int64(d.hdr.tocOff) + tocHeaderLen + int64(i)*tocEntryLen
}

// checkEntries runs the per-entry structural checks and assigns roles.
func (d *decoder) checkEntries() {
	ctrlEnd := max(d.hdr.tocOff+d.hdr.tocLen, d.hdr.stOff+d.hdr.stLen)
	for i, e := range d.entries {
		eo := d.entryOff(i)
		if !fourccValid(e.fourcc) {
			d.problem(ErrCorrupt, "fourcc", e, "", eo, "fourcc is not four printable ASCII characters")
		}
		if !e.bad {
			switch {
			case e.name == "":
				d.problem(ErrCorrupt, "name", e, "", eo+32, "empty chunk name")
			case !utf8.ValidString(e.name):
				d.problem(ErrCorrupt, "name", e, "", eo+32, "chunk name is not valid UTF-8")
			case strings.IndexByte(e.name, 0) >= 0:
				d.problem(ErrCorrupt, "name", e, "", eo+32, "chunk name contains NUL bytes")
			}
		}
		if !inFile(e.off, e.length, d.size) {
			e.bad = true
			d.problem(ErrTruncated, "bounds", e, "", eo+8, "chunk [%d, +%d) exceeds file size %d", e.off, e.length, d.size)
			continue
		}
		switch {
		case e.compressed() && e.is("WTSH"):
			e.bad = true
			d.problem(ErrCorrupt, "flags", e, "", eo+4, "WTSH chunk flagged COMPRESSED_ZSTD (weights are never compressed)")
		case e.compressed() && e.is("IHSH"):
			e.bad = true
			d.problem(ErrCorrupt, "flags", e, "", eo+4, "IHSH chunk flagged COMPRESSED_ZSTD (IHSH is never compressed)")
		case e.compressed() && e.ulen > MaxMetadataULen:
			e.bad = true
			d.problem(ErrLimit, "ulen", e, "", eo+24, "ulen %d exceeds MAX_METADATA_ULEN %d", e.ulen, MaxMetadataULen)
		case !e.compressed() && e.length != e.ulen:
			e.bad = true
			d.problem(ErrCorrupt, "ulen", e, "", eo+24, "uncompressed chunk has length %d but ulen %d", e.length, e.ulen)
		case !e.compressed() && !e.is("WTSH") && e.length > MaxMetadataULen:
			e.bad = true
			d.problem(ErrLimit, "ulen", e, "", eo+24, "ulen %d exceeds MAX_METADATA_ULEN %d", e.ulen, MaxMetadataULen)
		}
		if e.length > 0 && e.off < ctrlEnd {
			d.problem(ErrCorrupt, "overlap", e, "", int64(e.off), "chunk [%d, %d) overlaps the header, TOC or string table (which end at %d)", e.off, e.off+e.length, ctrlEnd)
		}
	}
	// Overlaps between chunks (empty chunks excluded).
	var ne []*tocEntry
	for _, e := range d.entries {
		if e.length > 0 && inFile(e.off, e.length, d.size) {
			ne = append(ne, e)
		}
	}
	sort.SliceStable(ne, func(i, j int) bool { return ne[i].off < ne[j].off })
	var last *tocEntry
	for _, e := range ne {
		if last != nil && e.off < last.off+last.length {
			d.problem(ErrCorrupt, "overlap", e, "", int64(e.off), "chunk [%d, %d) overlaps %s [%d, %d)",
				e.off, e.off+e.length, last.label(), last.off, last.off+last.length)
		}
		if last == nil || e.off+e.length > last.off+last.length {
			last = e
		}
	}
	// Roles: first IHSH/MJSN/MMSG/TIDX; WTSH by canonical shard name; PHSH
	// by shard name + ".phsh"; everything else is kept opaque.
	d.shards = map[string]*tocEntry{}
	d.phsh = map[string]*phshInfo{}
	d.opaque = map[int]bool{}
	firsts := map[string]**tocEntry{"IHSH": &d.ihsh, "MJSN": &d.mjsn, "MMSG": &d.mmsg, "TIDX": &d.tidx}
	for _, e := range d.entries {
		if p, ok := firsts[string(e.fourcc[:])]; ok && *p == nil {
			*p = e
			continue
		}
		if e.is("WTSH") {
			if _, ok := parseShardName(e.name); ok {
				if prev, dup := d.shards[e.name]; dup {
					d.problem(ErrCorrupt, "name", e, "", d.entryOff(e.index)+32, "duplicate shard name (also %s)", prev.label())
					continue
				}
				d.shards[e.name] = e
				continue
			}
		}
		d.opaque[e.index] = true
	}
	for _, e := range d.entries {
		if !e.is("PHSH") {
			continue
		}
		sh, ok := strings.CutSuffix(e.name, ".phsh")
		if _, isShard := d.shards[sh]; ok && isShard && d.phsh[sh] == nil {
			d.phsh[sh] = &phshInfo{entry: e}
			delete(d.opaque, e.index)
		}
	}
}

// unzstd decompresses a chunk through the file's decode budget: exactly
// e.ulen bytes, charged before the buffer is allocated
// (formats.Budget.DecompressZstd).
func (d *decoder) unzstd(e *tocEntry, src []byte) ([]byte, error) {
	return d.budget.DecompressZstd(d.ctx, bytes.NewReader(src), int64(e.ulen), true, e.label())
}

// unzstdTo streams a chunk's decompressed bytes into w (exactly e.ulen),
// charging the budget for them.
func (d *decoder) unzstdTo(w io.Writer, e *tocEntry, src []byte) error {
	_, err := d.budget.DecompressZstdTo(d.ctx, w, bytes.NewReader(src), int64(e.ulen), true, e.label())
	return err
}

// zstdProblem records a decompression failure: ErrLimit when the budget
// or a window limit refused it, ErrCorrupt otherwise.
func (d *decoder) zstdProblem(e *tocEntry, err error) error {
	if cerr := d.ctx.Err(); cerr != nil {
		return cerr
	}
	e.bad = true
	sentinel := ErrCorrupt
	if errors.Is(err, formats.ErrLimit) {
		sentinel = ErrLimit
	}
	d.problem(sentinel, "zstd", e, "", int64(e.off), "%v", err)
	return nil
}

func (d *decoder) checkHash(e *tocEntry, sum [32]byte) {
	if sum != e.hash {
		d.problem(ErrChecksum, "blake3", e, "", d.entryOff(e.index)+hashOff, "BLAKE3 of the %d uncompressed bytes is %x, TOC says %x", e.ulen, sum, e.hash)
	}
}

// loadChunks reads, decompresses and hashes every chunk except WTSH
// (verified in verifyData) and parses IHSH, MJSN, MMSG and PHSH.
func (d *decoder) loadChunks() error {
	opaqueBudget := int64(MaxOpaqueBytes)
	for _, e := range d.entries {
		if err := d.ctx.Err(); err != nil {
			return err
		}
		if e.bad || (e.is("WTSH") && !d.opaque[e.index]) {
			continue
		}
		if d.opaque[e.index] && int64(e.ulen) > opaqueBudget {
			// Too large to keep: verify its hash, record the drop.
			d.dropped = append(d.dropped, fmt.Sprintf("%s %q (%d bytes)", fourccString(e.fourcc), e.name, e.ulen))
			h := blake3.New(32, nil)
			if !e.compressed() {
				if err := d.stream(d.ctx, int64(e.off), int64(e.length), func(b []byte) { h.Write(b) }); err != nil {
					return err
				}
			} else {
				stored, err := d.readAt(int64(e.off), int64(e.length))
				if err != nil {
					return err
				}
				if err := d.unzstdTo(h, e, stored); err != nil {
					if err := d.zstdProblem(e, err); err != nil {
						return err
					}
					continue
				}
			}
			d.checkHash(e, [32]byte(h.Sum(nil)))
			continue
		}
		if e == d.mjsn {
			// Snapshot.Attrs["aero.mjsn"] will be a copy of the text.
			if err := d.take(int64(e.ulen), int64(e.off), "%s: meta.json attribute", e.label()); err != nil {
				var fe *Error
				errors.As(err, &fe)
				e.bad = true
				d.problem(ErrLimit, "budget", e, "", int64(e.off), "%s", fe.Detail)
				continue
			}
		}
		c, err := d.readAt(int64(e.off), int64(e.length))
		if err != nil {
			return err // I/O error, budget, or a reader shorter than size
		}
		if e.compressed() {
			if c, err = d.unzstd(e, c); err != nil {
				if err := d.zstdProblem(e, err); err != nil {
					return err
				}
				continue
			}
		}
		d.checkHash(e, blake3.Sum256(c))
		if d.opaque[e.index] {
			if int64(e.ulen) <= opaqueBudget {
				opaqueBudget -= int64(e.ulen)
				e.content = c
			}
			continue
		}
		e.content = c
	}
	if d.ihsh != nil && !d.ihsh.bad {
		if err := d.verifyIHSH(); err != nil {
			return err
		}
	}
	if e := d.mjsn; e != nil && !e.bad {
		if !utf8.Valid(e.content) || !json.Valid(e.content) {
			d.problem(ErrCorrupt, "mjsn", e, "", int64(e.off), "meta.json is not valid UTF-8 JSON")
		}
	}
	if e := d.mmsg; e != nil && !e.bad {
		v, err := decodeOneCharged(e.content, d.budget, e.label())
		if err != nil {
			d.problem(limitOr(err, ErrCorrupt), "mmsg", e, "", int64(e.off), "%v", err)
		}
		d.mmsgVal = v
	}
	for sh, p := range d.phsh {
		if !p.entry.bad {
			d.parsePHSH(sh, p)
		}
	}
	return nil
}

func (d *decoder) verifyIHSH() error {
	e := d.ihsh
	m := newBudgetMDec(e.content, d.budget, e.label())
	v, err := m.value(0) // trailing zero padding is ignored
	if err == nil {
		err = m.flush()
	}
	if err != nil {
		d.problem(limitOr(err, ErrCorrupt), "ihsh", e, "", int64(e.off), "payload: %v", err)
		return nil
	}
	algo, _ := v.get("algo")
	ranges, _ := v.get("covered_ranges")
	digest, _ := v.get("digest")
	if !algo.isStr("blake3-256") {
		d.problem(ErrCorrupt, "ihsh", e, "", int64(e.off), "algo is not \"blake3-256\"")
		return nil
	}
	if digest.kind != kBin || len(digest.bin) != 32 {
		d.problem(ErrCorrupt, "ihsh", e, "", int64(e.off), "digest is not a 32-byte bin")
		return nil
	}
	if ranges.kind != kArray || len(ranges.arr) == 0 || ranges.arr[0].kind != kArray || len(ranges.arr[0].arr) != 2 ||
		ranges.arr[0].arr[0].kind != kUint || ranges.arr[0].arr[1].kind != kUint {
		d.problem(ErrCorrupt, "ihsh", e, "", int64(e.off), "covered_ranges is not [[start, end], ...]")
		return nil
	}
	start, end := ranges.arr[0].arr[0].u, ranges.arr[0].arr[1].u
	if start != 0 || end > uint64(d.size) {
		d.problem(ErrCorrupt, "ihsh", e, "", int64(e.off), "covered range [%d, %d) is not [0, end ≤ file size %d)", start, end, d.size)
		return nil
	}
	sum, err := d.controlDigest(int64(end))
	if err != nil {
		return err
	}
	if sum != [32]byte(digest.bin) {
		d.problem(ErrChecksum, "ihsh", e, "", 0, "control-plane digest of [0, %d) (TOC hash fields zeroed) is %x, IHSH says %x", end, sum, digest.bin)
	}
	return nil
}

// controlDigest is BLAKE3 of file bytes [0, end) with the hash field of
// every TOC entry replaced by zeros.
func (d *decoder) controlDigest(end int64) ([32]byte, error) {
	h := blake3.New(32, nil)
	var pos int64
	tmp := make([]byte, 0, streamBlock)
	err := d.stream(d.ctx, 0, end, func(b []byte) {
		tmp = append(tmp[:0], b...)
		for i := range d.entries {
			fa := d.entryOff(i) + hashOff
			lo, hi := max(fa, pos), min(fa+32, pos+int64(len(b)))
			if lo < hi {
				clear(tmp[lo-pos : hi-pos])
			}
		}
		h.Write(tmp)
		pos += int64(len(b))
	})
	return [32]byte(h.Sum(nil)), err
}

func (d *decoder) parsePHSH(shard string, p *phshInfo) {
	e := p.entry
	v, err := decodeOneCharged(e.content, d.budget, e.label())
	if err != nil {
		d.problem(limitOr(err, ErrCorrupt), "phsh", e, "", int64(e.off), "%v", err)
		e.bad = true
		return
	}
	name, _ := v.get("shard_name")
	ps, _ := v.get("page_size")
	dg, _ := v.get("digests")
	switch {
	case v.kind != kMap:
		d.problem(ErrCorrupt, "phsh", e, "", int64(e.off), "payload is not a map")
	case !name.isStr(shard):
		d.problem(ErrCorrupt, "phsh", e, "", int64(e.off), "shard_name is not %q", shard)
	case ps.kind != kUint || ps.u == 0:
		d.problem(ErrCorrupt, "phsh", e, "", int64(e.off), "page_size is not a positive integer")
	case dg.kind != kArray || len(dg.arr) == 0:
		d.problem(ErrCorrupt, "phsh", e, "", int64(e.off), "digests is not a non-empty array")
	default:
		p.pageSize = ps.u
		for i, x := range dg.arr {
			if x.kind != kBin || len(x.bin) != 32 {
				d.problem(ErrCorrupt, "phsh", e, "", int64(e.off), "digest %d is not a 32-byte bin", i)
				e.bad = true
				return
			}
			p.digests = append(p.digests, [32]byte(x.bin))
		}
		return
	}
	e.bad = true
}

func (d *decoder) parseTIDX() {
	e := d.tidx
	if e == nil && len(d.shards) > 0 {
		// Weights nobody can find: a damaged or mislabelled TIDX entry.
		d.problem(ErrCorrupt, "tidx", nil, "", -1, "file has %d WTSH shard(s) but no TIDX chunk", len(d.shards))
	}
	if e == nil || e.bad {
		return
	}
	fail := func(err error) { d.problem(limitOr(err, ErrCorrupt), "tidx", e, "", int64(e.off), "%v", err) }
	m := newBudgetMDec(e.content, d.budget, e.label())
	n, err := m.mapLen()
	if err != nil {
		fail(err)
		return
	}
	seenTensors := false
	for range n {
		k, err := m.value(1)
		if err != nil {
			fail(err)
			return
		}
		if !k.isStr("tensors") {
			v, err := m.value(1)
			if err != nil {
				fail(err)
				return
			}
			d.tidxExtra = append(d.tidxExtra, mpair{k, v})
			continue
		}
		if seenTensors {
			fail(m.errf("duplicate key \"tensors\""))
			return
		}
		seenTensors = true
		cnt, err := m.arrayLen()
		if err != nil {
			fail(err)
			return
		}
		for i := range cnt {
			t, err := parseTIDXEntry(m)
			if err != nil {
				fail(fmt.Errorf("tensors[%d]: %w", i, err))
				return
			}
			d.tensors = append(d.tensors, t)
		}
	}
	if m.r.Len() != 0 {
		fail(m.errf("%d bytes of extra data after the index", m.r.Len()))
		return
	}
	if !seenTensors {
		fail(errors.New("root map has no \"tensors\" key"))
		return
	}
	// Each tensor becomes an Array with its attribute map (build).
	if err := m.charge(int64(len(d.tensors)) * arrayCost); err != nil {
		fail(err)
		return
	}
	if err := m.flush(); err != nil {
		fail(err)
	}
}

func parseTIDXEntry(m *mdec) (*tidxEntry, error) {
	n, err := m.mapLen()
	if err != nil {
		return nil, err
	}
	t := &tidxEntry{}
	seen := map[string]bool{}
	for range n {
		k, err := m.value(1)
		if err != nil {
			return nil, err
		}
		if k.kind == kStr {
			if seen[k.s] {
				return nil, m.errf("duplicate key (%d bytes)", len(k.s))
			}
			seen[k.s] = true
		}
		var u *uint64
		switch {
		case k.isStr("name"):
			if t.name, err = m.str(); err != nil {
				return nil, err
			}
			continue
		case k.isStr("hash_b3"):
			if t.hash, err = m.str(); err != nil {
				return nil, err
			}
			t.hasHash = true
			continue
		case k.isStr("shape"):
			r, err := m.arrayLen()
			if err != nil {
				return nil, err
			}
			if r > MaxRank {
				return nil, m.errf("rank %d exceeds %d", r, MaxRank)
			}
			t.shape = make([]uint64, r)
			for i := range t.shape {
				if t.shape[i], err = m.uint(); err != nil {
					return nil, err
				}
			}
			continue
		case k.isStr("dtype"):
			u = &t.dtype
		case k.isStr("shard_id"):
			u = &t.shardID
		case k.isStr("data_off"):
			u = &t.dataOff
		case k.isStr("data_len"):
			u = &t.dataLen
		case k.isStr("flags"):
			u = &t.flags
		}
		if u != nil {
			if *u, err = m.uint(); err != nil {
				return nil, err
			}
			continue
		}
		v, err := m.value(1)
		if err != nil {
			return nil, err
		}
		t.extra = append(t.extra, mpair{k, v})
	}
	for _, k := range []string{"name", "dtype", "shape", "shard_id", "data_off", "data_len"} {
		if !seen[k] {
			return nil, m.errf("entry %q has no %q", t.name, k)
		}
	}
	if t.dtype > 0xFFFF {
		return nil, m.errf("entry %q: dtype %d does not fit u16", t.name, t.dtype)
	}
	return t, nil
}

func (d *decoder) resolveTensors() {
	seen := make(map[string]bool, len(d.tensors))
	for _, t := range d.tensors {
		if seen[t.name] {
			d.problem(ErrCorrupt, "tidx", d.tidx, t.name, -1, "duplicate tensor name")
		}
		seen[t.name] = true
		if len(t.name) > MaxNameLen {
			d.problem(ErrLimit, "tidx", d.tidx, t.name[:64]+"…", -1, "name of %d bytes exceeds %d", len(t.name), MaxNameLen)
		}
		name := shardName(t.shardID)
		sh := d.shards[name]
		if sh == nil || sh.bad {
			d.problem(ErrCorrupt, "shard", d.tidx, t.name, -1, "shard_id %d: no valid WTSH chunk named %q", t.shardID, name)
			continue
		}
		if t.dataOff > sh.length || t.dataLen > sh.length-t.dataOff {
			d.problem(ErrCorrupt, "bounds", sh, t.name, int64(sh.off), "data_off %d + data_len %d exceeds shard length %d", t.dataOff, t.dataLen, sh.length)
			continue
		}
		t.shard = sh
	}
}

// verifyData hashes WTSH shards (whole-chunk BLAKE3 plus PHSH pages in the
// same pass) and tensors with hash_b3, in parallel.
func (d *decoder) verifyData() error {
	g, ctx := errgroup.WithContext(d.ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for _, e := range d.entries {
		if e.bad || !e.is("WTSH") || d.opaque[e.index] {
			continue
		}
		p := d.phsh[e.name]
		if p != nil && p.entry.bad {
			p = nil
		}
		if p != nil {
			want := (e.length + p.pageSize - 1) / p.pageSize
			if uint64(len(p.digests)) != want {
				d.problem(ErrCorrupt, "phsh", p.entry, "", int64(p.entry.off), "%d digests for a %d-byte shard with page_size %d (need %d)", len(p.digests), e.length, p.pageSize, want)
				p = nil
			}
		}
		g.Go(func() error { return d.verifyShard(ctx, e, p) })
	}
	for _, t := range d.tensors {
		if t.shard == nil || !t.hasHash || t.hash == "" {
			continue
		}
		g.Go(func() error {
			h := blake3.New(32, nil)
			if err := d.stream(ctx, int64(t.shard.off+t.dataOff), int64(t.dataLen), func(b []byte) { h.Write(b) }); err != nil {
				return err
			}
			if got := hex.EncodeToString(h.Sum(nil)); got != t.hash {
				d.problem(ErrChecksum, "hash_b3", t.shard, t.name, int64(t.shard.off+t.dataOff),
					"BLAKE3 of the %d tensor bytes is %s, TIDX hash_b3 differs", t.dataLen, got)
			}
			return nil
		})
	}
	return g.Wait()
}

func (d *decoder) verifyShard(ctx context.Context, e *tocEntry, p *phshInfo) error {
	h := blake3.New(32, nil)
	var ph *blake3.Hasher
	var page, inPage uint64
	var bad []int
	finish := func() {
		if [32]byte(ph.Sum(nil)) != p.digests[page] {
			bad = append(bad, int(page))
		}
		ph.Reset()
		page++
		inPage = 0
	}
	if p != nil {
		ph = blake3.New(32, nil)
	}
	err := d.stream(ctx, int64(e.off), int64(e.length), func(b []byte) {
		h.Write(b)
		for p != nil && len(b) > 0 {
			k := min(uint64(len(b)), p.pageSize-inPage)
			ph.Write(b[:k])
			inPage += k
			b = b[k:]
			if inPage == p.pageSize {
				finish()
			}
		}
	})
	if err != nil {
		return err
	}
	if p != nil && inPage > 0 {
		finish()
	}
	d.checkHash(e, [32]byte(h.Sum(nil)))
	if len(bad) > 0 {
		list := make([]string, 0, 8)
		for _, i := range bad[:min(len(bad), 8)] {
			lo := uint64(i) * p.pageSize
			list = append(list, fmt.Sprintf("%d [%d, %d)", i, lo, min(lo+p.pageSize, e.length)))
		}
		more := ""
		if len(bad) > 8 {
			more = fmt.Sprintf(" and %d more", len(bad)-8)
		}
		d.problem(ErrChecksum, "phsh", p.entry, "", int64(e.off), "%d of %d page digests of shard %q mismatch: page %s%s",
			len(bad), len(p.digests), e.name, strings.Join(list, ", page "), more)
	}
	return nil
}

// build turns a verified file into a snapshot.
func (d *decoder) build() (*snapshot.Snapshot, error) {
	s := &snapshot.Snapshot{Attrs: map[string]string{"aero.uuid": hex.EncodeToString(d.hdr.uuid[:])}}
	// Chunk descriptions: their JSON is charged before it is built, at
	// most descCost + 6 bytes per name byte (JSON escapes) plus the
	// base64 of kept opaque chunks; what it really takes is given back.
	bound := int64(len(d.entries)) * descCost
	for i, e := range d.entries {
		bound += 6 * int64(len(e.name))
		if d.opaque[i] {
			bound += 2 * int64(base64.StdEncoding.EncodedLen(len(e.content)))
		}
	}
	if err := d.take(bound, -1, "aero.chunks attribute of %d chunks", len(d.entries)); err != nil {
		return nil, err
	}
	descs := make([]chunkDesc, len(d.entries))
	for i, e := range d.entries {
		cd := chunkDesc{FourCC: string(e.fourcc[:]), Name: e.name, Flags: e.flags}
		switch {
		case d.opaque[i]:
			if e.content == nil && e.ulen > 0 {
				cd.Data = new(string) // dropped (recorded in aero.dropped): empty placeholder
			} else {
				s := base64.StdEncoding.EncodeToString(e.content)
				cd.Data = &s
			}
		case e.is("WTSH"):
			n := int64(e.length)
			cd.Size = &n
		case e.is("PHSH"):
			sh, _ := strings.CutSuffix(e.name, ".phsh")
			cd.PageSize = int64(d.phsh[sh].pageSize)
		}
		descs[i] = cd
	}
	// Reserved space after a chunk (e.g. PHSH slack): only when payloads
	// are in TOC order and the next chunk starts later than alignment needs.
	for i := 0; i+1 < len(d.entries); i++ {
		a, b := d.entries[i], d.entries[i+1]
		if b.off >= a.off+a.length && b.off > uint64(align(int64(a.off+a.length), 16)) {
			descs[i].Reserve = int64(b.off - a.off)
		}
	}
	js, err := json.Marshal(descs)
	if err != nil {
		return nil, err
	}
	s.Attrs["aero.chunks"] = string(js)
	d.budget.Give(bound - int64(len(js)))
	if len(d.dropped) > 0 {
		s.Attrs["aero.dropped"] = strings.Join(d.dropped, "; ")
	}
	if d.mjsn != nil {
		s.Attrs["aero.mjsn"] = string(d.mjsn.content) // charged in loadChunks
	}
	typed := func(v mval, what string) (string, error) {
		js, err := typedJSONCharged(v, d.budget, what)
		if err != nil {
			return "", d.fatal(ErrLimit, "budget", -1, "%v", err)
		}
		return js, nil
	}
	if d.mmsg != nil {
		if s.Attrs["aero.mmsg"], err = typed(d.mmsgVal, d.mmsg.label()); err != nil {
			return nil, err
		}
	}
	if len(d.tidxExtra) > 0 {
		if s.Attrs["aero.tidx"], err = typed(mMap(d.tidxExtra...), d.tidx.label()); err != nil {
			return nil, err
		}
	}
	// Arrays.
	used := make(map[string]bool, len(d.tensors))
	for _, t := range d.tensors {
		if validArrayName(t.name) {
			used[t.name] = true
		}
	}
	order := make([]string, 0, len(d.tensors))
	for _, t := range d.tensors {
		a := &snapshot.Array{Name: t.name, Attrs: map[string]string{
			"aero.shard":  strconv.FormatUint(t.shardID, 10),
			"aero.offset": strconv.FormatUint(t.dataOff, 10),
		}}
		if !validArrayName(t.name) {
			a.Name = sanitizeName(t.name, used)
			a.Attrs["aero.name"] = t.name
		}
		if dt, shape, ok := nativeLayout(t); ok {
			a.DType, a.Shape = dt, shape
		} else {
			a.DType, a.Shape = snapshot.U8, []int64{int64(t.dataLen)}
			a.Attrs["aero.dtype"] = strconv.FormatUint(t.dtype, 10)
			a.Attrs["aero.shape"] = uintsJSON(t.shape)
		}
		if t.flags != 0 {
			a.Attrs["aero.flags"] = strconv.FormatUint(t.flags, 10)
		}
		if len(t.extra) > 0 {
			if a.Attrs["aero.extra"], err = typed(mMap(t.extra...), fmt.Sprintf("tensor %q", t.name)); err != nil {
				return nil, err
			}
		}
		if t.hasHash {
			a.Attrs["aero.hash_b3"] = t.hash
		}
		a.Data = snapshot.Section(d.r, int64(t.shard.off+t.dataOff), int64(t.dataLen))
		s.Arrays = append(s.Arrays, a)
		order = append(order, a.Name)
	}
	if len(order) > 0 {
		js, _ := json.Marshal(order)
		s.Attrs["aero.order"] = string(js)
	}
	return s, nil
}

// nativeLayout maps a TIDX entry to a snapshot dtype and shape when its
// dtype is 0–12 and data_len equals shape × element size.
func nativeLayout(t *tidxEntry) (snapshot.DType, []int64, bool) {
	if t.dtype >= uint64(len(aeroToSnap)) {
		return 0, nil, false
	}
	dt := aeroToSnap[t.dtype]
	shape := make([]int64, len(t.shape))
	for i, v := range t.shape {
		if v > 1<<62 {
			return 0, nil, false
		}
		shape[i] = int64(v)
	}
	n, err := snapshot.NumElements(shape)
	if err != nil || n > (1<<62)/int64(dt.Size()) || uint64(n)*uint64(dt.Size()) != t.dataLen {
		return 0, nil, false
	}
	return dt, shape, true
}

func uintsJSON(v []uint64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.FormatUint(x, 10)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// validArrayName reports whether name is usable as a WTXT array name.
func validArrayName(name string) bool {
	if len(name) == 0 || len(name) > 1024 || name == snapshot.AttrsArrayName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.:/-", c) >= 0) {
			return false
		}
	}
	return true
}

// sanitizeName derives a deterministic valid name: disallowed bytes become
// '_', the result is cut to 1000 bytes and suffixed with "-h" and the first
// 8 hex digits of the BLAKE3 of the original; a collision adds "-<n>".
func sanitizeName(name string, used map[string]bool) string {
	var b strings.Builder
	for i := 0; i < len(name) && b.Len() < 1000; i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.:/-", c) >= 0 {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	sum := blake3.Sum256([]byte(name))
	base := b.String() + "-h" + hex.EncodeToString(sum[:4])
	out := base
	for n := 2; used[out]; n++ {
		out = base + "-" + strconv.Itoa(n)
	}
	used[out] = true
	return out
}

// Costs charged to the decode budget for structures a decode builds.
const (
	// tocEntryCost: one parsed TOC entry (tocEntry and its pointer).
	tocEntryCost = int64(unsafe.Sizeof(tocEntry{})) + 8
	// arrayCost: one tensor's snapshot.Array, its attribute map and the
	// short attribute values (names and typed JSON are charged apart).
	arrayCost = 1024
	// descCost: the JSON of one chunk description without its name
	// and data.
	descCost = 160
)

// chunkDesc describes one TOC entry in Attrs["aero.chunks"].
type chunkDesc struct {
	FourCC   string  `json:"fourcc"`
	Name     string  `json:"name"`
	Flags    uint32  `json:"flags"`
	Size     *int64  `json:"size,omitempty"`      // WTSH: shard length
	PageSize int64   `json:"page_size,omitempty"` // PHSH: page size
	Reserve  int64   `json:"reserve,omitempty"`   // bytes reserved from the chunk start (≥ its length)
	Data     *string `json:"data,omitempty"`      // uninterpreted chunk: base64 of its uncompressed bytes
}
