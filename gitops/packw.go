package gitops

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
)

// A generation that adds many objects (a first generation, a dense
// change: thousands of segment pieces and their trees) writes them as one
// pack (objects/pack/pack-<sha1>.pack + .idx, version 2, undeltified
// entries in stored zlib) instead of one loose file each: a file create
// and rename per object were about half of Repo.Commit's CPU at 2%
// uniform change (BenchmarkGitCost profile), and git push then reads one
// file and reuses the entries (pack.compression 0) instead of opening
// every loose object. Fewer objects stay loose, so a long run of small
// generations does not pile up packs.
//
// Segment bytes (raw floats) go in as literal deltas: an OFS_DELTA entry
// whose instructions only insert the object's own bytes, 127 at a time
// (0.8% larger), against a small blob earlier in the same pack: a
// piece's own base blob (repr.base, added with repr.asBase; skel.go,
// segment), else the pack's default base (the root .gitattributes,
// setDeltaBase). git keeps a delta it finds in a pack ("reuse") when the
// base goes into the same pack, so neither the pushing git nor
// pack-objects on a server that serves a clone runs its delta search
// over these objects (a default server's search over a 1 GiB
// generation's pieces was a third of the clone's time), and a cloning
// index-pack hashes them in its threaded delta phase instead of its
// single-threaded first pass (gitops package doc, "Segments layout", for
// why a piece's base travels with it and .gitattributes does not). Any
// reader applies the delta; gitops reads blob contents through git
// cat-file (catfile.go), as go-git reads deltas slowly.

// packMinObjects is the number of pending objects from which a Commit's
// new objects go into a pack; packMaxHeld bounds the bytes held in memory
// until then (a copy: callers reuse their buffers).
const (
	packMinObjects = 256
	packMaxHeld    = 8 << 20
)

// Git's rules for the literal deltas: a delta shorter than deltaSizeMin
// bytes is refused by every reader (patch-delta.c: DELTA_SIZE_MIN, "the
// smallest possible delta size is 4 bytes"; fsck and index-pack then
// report "failed to apply delta"): an empty blob's delta is its two or
// three header bytes. Blobs shorter than literalMinSize go whole: git's
// pack-objects never searches deltas for them (should_attempt_deltas:
// objects under 50 bytes), so a literal delta saves nobody any work, and
// with it no empty or tiny blob can make a delta git refuses.
const (
	deltaSizeMin   = 4
	literalMinSize = 50
)

// packWriter collects a Commit's new blobs and trees: the first
// packMinObjects are held in memory (small objects, at most
// packMinObjects × MaxPartLimit bytes only in theory: segments and
// pieces are ≤ 64 KiB unless configured larger), then everything goes to
// a temporary pack file in objects/pack. finish writes the loose objects
// or completes the pack.
type packWriter struct {
	objects   string
	held      []heldObject
	heldBytes int64
	pending   map[plumbing.Hash]bool

	// base is the default base of literal entries (nil: none); baseOff
	// its offset once the pack starts. bases are the blobs added with
	// asBase that are in the pack, by hash.
	base    *heldObject
	baseOff int64
	bases   map[plumbing.Hash]baseEntry
	delta   []byte // reused buffer for one literal delta

	f       *os.File
	bw      *bufio.Writer
	cw      crcWriter     // over bw, reset per entry
	zw      *bufio.Writer // over cw
	off     int64
	entries []packEntry

	// check, when set, is called with the paths of the complete pack and
	// its index (temporary names) and the pack's checksum before they are
	// installed; an error aborts finish (Repo sets it from EnvCheckPacks:
	// git index-pack --strict).
	check func(pack, idx string, sum plumbing.Hash) error
}

type heldObject struct {
	t    plumbing.ObjectType
	h    plumbing.Hash
	data []byte
	r    repr
}

// repr says how add stores an object once it goes into a pack.
type repr struct {
	// literal asks for a literal delta (blobs only) against base, a blob
	// added with asBase earlier in this writer; when base is zero or was
	// not written by this writer (the repository had it), against the
	// pack's default base (setDeltaBase); with neither, whole.
	literal bool
	base    plumbing.Hash
	// asBase writes the blob whole and lets later literal deltas name it.
	asBase bool
}

// baseEntry is a blob of this pack that literal deltas may name.
type baseEntry struct {
	off, size int64
}

type packEntry struct {
	t    plumbing.ObjectType
	size int64
	h    plumbing.Hash
	off  int64
	crc  uint32
}

func newPackWriter(objects string) *packWriter {
	return &packWriter{objects: objects, pending: map[plumbing.Hash]bool{}, bases: map[plumbing.Hash]baseEntry{}}
}

// setDeltaBase makes the blob data (hash h) the base of the literal
// deltas (add with literal set): it is written first once the pack
// starts. The caller must enter it in the tree of the commit the pack
// is for, so every clone of that commit has it. Call before add.
func (p *packWriter) setDeltaBase(h plumbing.Hash, data []byte) {
	p.base = &heldObject{t: plumbing.BlobObject, h: h, data: bytes.Clone(data)}
}

// has reports whether h is pending in this writer.
func (p *packWriter) has(h plumbing.Hash) bool { return p.pending[h] }

// add stores an object of type t, hash h (the caller computed it), data;
// false when h was added before. r says how it goes into a pack (loose
// objects are always whole).
func (p *packWriter) add(t plumbing.ObjectType, h plumbing.Hash, data []byte, r repr) (bool, error) {
	if p.pending[h] {
		return false, nil
	}
	p.pending[h] = true
	if p.f == nil && len(p.held) < packMinObjects && p.heldBytes+int64(len(data)) <= packMaxHeld {
		p.held = append(p.held, heldObject{t, h, bytes.Clone(data), r})
		p.heldBytes += int64(len(data))
		return true, nil
	}
	if p.f == nil {
		if err := p.start(); err != nil {
			return false, err
		}
		for _, o := range p.held {
			if p.base != nil && o.h == p.base.h {
				continue // written by start
			}
			if err := p.put(o); err != nil {
				return false, err
			}
		}
		p.held, p.heldBytes = nil, 0
	}
	return true, p.put(heldObject{t, h, data, r})
}

// put appends o as a literal delta when asked for and possible (a blob
// of at least literalMinSize bytes), else whole.
func (p *packWriter) put(o heldObject) error {
	if o.r.literal && o.t == plumbing.BlobObject && len(o.data) >= literalMinSize {
		if b, ok := p.bases[o.r.base]; ok && !o.r.base.IsZero() {
			// A base serves one piece (it is named after it; a piece added
			// twice is written once): forget it, so the map stays small.
			delete(p.bases, o.r.base)
			return p.literalEntry(o.h, o.data, b)
		}
		if p.base != nil {
			return p.literalEntry(o.h, o.data, baseEntry{p.baseOff, int64(len(p.base.data))})
		}
	}
	if o.r.asBase && o.t == plumbing.BlobObject {
		p.bases[o.h] = baseEntry{p.off, int64(len(o.data))}
	}
	return p.entry(o.t, o.h, o.data)
}

// start creates the temporary pack with a header whose object count
// finish fills in.
func (p *packWriter) start() error {
	dir := filepath.Join(p.objects, "pack")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "tmp_pack_")
	if err != nil {
		return err
	}
	p.f, p.bw = f, bufio.NewWriterSize(f, 256<<10)
	p.cw = crcWriter{w: p.bw, crc: crc32.NewIEEE()}
	p.zw = bufio.NewWriterSize(&p.cw, 64<<10)
	hdr := []byte{'P', 'A', 'C', 'K', 0, 0, 0, 2, 0, 0, 0, 0}
	if _, err := p.bw.Write(hdr); err != nil {
		return err
	}
	p.off = int64(len(hdr))
	if p.base != nil {
		p.baseOff = p.off
		p.pending[p.base.h] = true
		return p.entry(p.base.t, p.base.h, p.base.data)
	}
	return nil
}

// crcWriter counts and CRC32s what it writes.
type crcWriter struct {
	w   io.Writer
	crc hash.Hash32
	n   int64
}

func (c *crcWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.crc.Write(b[:n])
	c.n += int64(n)
	return n, err
}

// entry appends one undeltified object: the type-and-size header, then
// the content as a stored zlib stream.
func (p *packWriter) entry(t plumbing.ObjectType, h plumbing.Hash, data []byte) error {
	return p.write(t, h, data, typeSizeHeader(nil, t, uint64(len(data))), data)
}

// write appends one entry: hdr (the type-and-size header and, for a
// delta, its base), then z as a stored zlib stream; h and size name the
// object in the index.
func (p *packWriter) write(t plumbing.ObjectType, h plumbing.Hash, data, hdr, z []byte) error {
	cw := &p.cw
	cw.crc.Reset()
	cw.n = 0
	if _, err := cw.Write(hdr); err != nil {
		return err
	}
	zw, err := newStoredZlib(p.zw, int64(len(z)))
	if err == nil {
		_, err = zw.Write(z)
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return err
	}
	p.entries = append(p.entries, packEntry{t: t, size: int64(len(data)), h: h, off: p.off, crc: cw.crc.Sum32()})
	p.off += cw.n
	return nil
}

// literalEntry appends blob data (hash h) as an OFS_DELTA against the
// blob at base whose instructions insert data, at most 127 bytes each.
func (p *packWriter) literalEntry(h plumbing.Hash, data []byte, base baseEntry) error {
	d := binary.AppendUvarint(p.delta[:0], uint64(base.size))
	d = binary.AppendUvarint(d, uint64(len(data)))
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 0x7f)
		d = append(append(d, byte(n)), rest[:n]...)
		rest = rest[n:]
	}
	p.delta = d
	if len(d) < deltaSizeMin {
		// Unreachable while put sends only blobs of literalMinSize and
		// more here; git would refuse the delta, so never write one.
		return p.entry(plumbing.BlobObject, h, data)
	}
	return p.write(plumbing.BlobObject, h, data, ofsDeltaHeader(len(d), p.off-base.off), d)
}

// ofsDeltaHeader is the header of an OFS_DELTA entry of n delta bytes
// whose base starts rel bytes before it: the type and size, then rel,
// big-endian base 128 with an implicit +1 on every continuation byte
// (git's offset encoding).
func ofsDeltaHeader(n int, rel int64) []byte {
	hdr := typeSizeHeader(nil, plumbing.OFSDeltaObject, uint64(n))
	u := uint64(rel)
	var ofs [10]byte
	i := len(ofs) - 1
	ofs[i] = byte(u & 0x7f)
	for u >>= 7; u != 0; u >>= 7 {
		u--
		i--
		ofs[i] = 0x80 | byte(u&0x7f)
	}
	return append(hdr, ofs[i:]...)
}

// typeSizeHeader appends a pack entry's header to b: type t and size in
// the first byte's low 4 bits and continuation bytes of 7.
func typeSizeHeader(b []byte, t plumbing.ObjectType, size uint64) []byte {
	c := byte(t)<<4 | byte(size&0x0f)
	for size >>= 4; size != 0; size >>= 7 {
		b = append(b, c|0x80)
		c = byte(size & 0x7f)
	}
	return append(b, c)
}

// finish stores what add collected: as loose objects when there are few,
// else it completes the pack (object count, trailing SHA-1 over the
// whole file, the .idx) and renames index and pack into place (see
// below for the order). It returns whether a
// pack was added (the caller's object store must then re-read its pack
// list).
func (p *packWriter) finish() (bool, error) {
	for _, o := range p.held {
		if err := writeLooseBytes(p.objects, o.t, o.data, o.h); err != nil {
			return false, err
		}
	}
	p.held, p.heldBytes = nil, 0
	if p.f == nil {
		return false, nil
	}
	tmp := p.f.Name()
	err := p.bw.Flush()
	var count [4]byte
	binary.BigEndian.PutUint32(count[:], uint32(len(p.entries)))
	if err == nil && len(p.entries) > 1<<31 {
		err = errors.New("too many objects for one pack")
	}
	if err == nil {
		_, err = p.f.WriteAt(count[:], 8)
	}
	// The trailer: SHA-1 of everything before it (a checksum, not an
	// object name).
	sum := sha1.New()
	if err == nil {
		_, err = io.Copy(sum, io.NewSectionReader(p.f, 0, p.off))
	}
	var packHash plumbing.Hash
	copy(packHash[:], sum.Sum(nil))
	if err == nil {
		_, err = p.f.WriteAt(packHash[:], p.off)
	}
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	p.f = nil
	if err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("gitops: write pack: %w", err)
	}
	iw := new(idxfile.Writer)
	iw.OnHeader(uint32(len(p.entries)))
	for _, e := range p.entries {
		iw.OnInflatedObjectContent(e.h, e.off, e.crc, nil)
	}
	if err := iw.OnFooter(packHash); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("gitops: pack index: %w", err)
	}
	idx, err := iw.Index()
	if err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("gitops: pack index: %w", err)
	}
	dir := filepath.Dir(tmp)
	base := filepath.Join(dir, "pack-"+packHash.String())
	itmp, err := os.CreateTemp(dir, "tmp_idx_")
	if err == nil {
		_, err = idxfile.NewEncoder(itmp).Encode(idx)
		if cerr := itmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(itmp.Name())
		}
	}
	if err == nil && p.check != nil {
		if err = p.check(tmp, itmp.Name(), packHash); err != nil {
			err = fmt.Errorf("check pack-%s: %w", packHash, err)
		}
	}
	if err == nil {
		for _, x := range []string{tmp, itmp.Name()} {
			if err = os.Chmod(x, 0o444); err != nil {
				break
			}
		}
	}
	if err == nil {
		// The index first: git ignores an index without its pack, and
		// go-git lists packs by their .pack file, so neither sees a pack
		// without an index, even after a crash between the renames.
		if err = os.Rename(itmp.Name(), base+".idx"); err == nil {
			if err = os.Rename(tmp, base+".pack"); err != nil {
				os.Remove(base + ".idx")
			}
		}
	}
	if err != nil {
		os.Remove(tmp)
		if itmp != nil {
			os.Remove(itmp.Name())
		}
		return false, fmt.Errorf("gitops: install pack: %w", err)
	}
	return true, nil
}

// abort removes a temporary pack (a failed Commit); held objects are
// dropped.
func (p *packWriter) abort() {
	p.held, p.heldBytes = nil, 0
	if p.f != nil {
		p.f.Close()
		os.Remove(p.f.Name())
		p.f = nil
	}
}
