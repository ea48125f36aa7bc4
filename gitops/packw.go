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

// packMinObjects is the number of pending objects from which a Commit's
// new objects go into a pack; packMaxHeld bounds the bytes held in memory
// until then (a copy: callers reuse their buffers).
const (
	packMinObjects = 256
	packMaxHeld    = 8 << 20
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

	f       *os.File
	bw      *bufio.Writer
	cw      crcWriter     // over bw, reset per entry
	zw      *bufio.Writer // over cw
	off     int64
	entries []packEntry
}

type heldObject struct {
	t    plumbing.ObjectType
	h    plumbing.Hash
	data []byte
}

type packEntry struct {
	t    plumbing.ObjectType
	size int64
	h    plumbing.Hash
	off  int64
	crc  uint32
}

func newPackWriter(objects string) *packWriter {
	return &packWriter{objects: objects, pending: map[plumbing.Hash]bool{}}
}

// has reports whether h is pending in this writer.
func (p *packWriter) has(h plumbing.Hash) bool { return p.pending[h] }

// add stores an object of type t, hash h (the caller computed it), data;
// false when h was added before.
func (p *packWriter) add(t plumbing.ObjectType, h plumbing.Hash, data []byte) (bool, error) {
	if p.pending[h] {
		return false, nil
	}
	p.pending[h] = true
	if p.f == nil && len(p.held) < packMinObjects && p.heldBytes+int64(len(data)) <= packMaxHeld {
		p.held = append(p.held, heldObject{t, h, bytes.Clone(data)})
		p.heldBytes += int64(len(data))
		return true, nil
	}
	if p.f == nil {
		if err := p.start(); err != nil {
			return false, err
		}
		for _, o := range p.held {
			if err := p.entry(o.t, o.h, o.data); err != nil {
				return false, err
			}
		}
		p.held, p.heldBytes = nil, 0
	}
	return true, p.entry(t, h, data)
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
	cw := &p.cw
	cw.crc.Reset()
	cw.n = 0
	size := uint64(len(data))
	var hdr [16]byte
	c := byte(t)<<4 | byte(size&0x0f)
	size >>= 4
	n := 0
	for size != 0 {
		hdr[n] = c | 0x80
		n++
		c = byte(size & 0x7f)
		size >>= 7
	}
	hdr[n] = c
	n++
	if _, err := cw.Write(hdr[:n]); err != nil {
		return err
	}
	z, err := newStoredZlib(p.zw, int64(len(data)))
	if err == nil {
		_, err = z.Write(data)
	}
	if err == nil {
		err = z.Close()
	}
	if err != nil {
		return err
	}
	p.entries = append(p.entries, packEntry{t: t, size: int64(len(data)), h: h, off: p.off, crc: cw.crc.Sum32()})
	p.off += cw.n
	return nil
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
