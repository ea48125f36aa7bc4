package gitops

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/adler32"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing"
)

// objectsDir returns the objects directory of the repository at dir (bare
// or with a work tree), or "" when there is none.
func objectsDir(dir string) string {
	for _, p := range []string{filepath.Join(dir, "objects"), filepath.Join(dir, ".git", "objects")} {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
	}
	return ""
}

// Loose objects are written as zlib streams of stored (uncompressed)
// deflate blocks. go-git writes level 6, about 4x the CPU of level 1 on
// base64 text, and level 1 still costs a deflate here and an inflate in
// pack-objects for ~25% of size on a local repository that git push
// repacks anyway (at pack.compression, packCompression); segments are raw
// floats that do not compress. The stream is written here rather than by
// compress/zlib at NoCompression, which allocates and clears a ~1 MB
// compressor per object: with tens of thousands of segment objects in a
// generation that was most of the commit's CPU (scripts/bench-git.sh,
// 1 GiB first generation, daemon CPU profile).

// storedZlib writes a zlib stream (RFC 1950) of total bytes as stored
// deflate blocks (RFC 1951 BTYPE 00) of at most 65535 bytes, the last
// one final, then the Adler-32 of the data.
type storedZlib struct {
	w       *bufio.Writer
	adler   hash.Hash32
	left    int64 // bytes not yet written
	inBlock int64 // bytes left in the current block
	empty   bool  // total was 0
}

const maxStoredBlock = 65535

func newStoredZlib(w *bufio.Writer, total int64) (*storedZlib, error) {
	if total < 0 {
		return nil, errors.New("negative size")
	}
	// CMF 0x78: deflate, 32 KiB window; FLG 0x01: level 0 (fastest),
	// no dictionary, (0x78<<8 | 0x01) % 31 == 0.
	if _, err := w.Write([]byte{0x78, 0x01}); err != nil {
		return nil, err
	}
	return &storedZlib{w: w, adler: adler32.New(), left: total, empty: total == 0}, nil
}

func (z *storedZlib) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if z.left == 0 {
			return written, fmt.Errorf("zlib stream: %d bytes more than its size", len(p))
		}
		if z.inBlock == 0 {
			n := min(z.left, maxStoredBlock)
			var hdr [5]byte
			if n == z.left {
				hdr[0] = 1 // BFINAL, BTYPE 00
			}
			binary.LittleEndian.PutUint16(hdr[1:], uint16(n))
			binary.LittleEndian.PutUint16(hdr[3:], ^uint16(n))
			if _, err := z.w.Write(hdr[:]); err != nil {
				return written, err
			}
			z.inBlock = n
		}
		k := min(int64(len(p)), z.inBlock)
		if _, err := z.w.Write(p[:k]); err != nil {
			return written, err
		}
		z.adler.Write(p[:k])
		z.inBlock -= k
		z.left -= k
		written += int(k)
		p = p[k:]
	}
	return written, nil
}

// Close ends the stream (an empty one is a single empty final block) and
// flushes; it fails when fewer bytes than announced were written.
func (z *storedZlib) Close() error {
	if z.left != 0 {
		return fmt.Errorf("zlib stream: %d bytes short of its size", z.left)
	}
	if z.empty {
		if _, err := z.w.Write([]byte{1, 0, 0, 0xff, 0xff}); err != nil {
			return err
		}
	}
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], z.adler.Sum32())
	if _, err := z.w.Write(sum[:]); err != nil {
		return err
	}
	return z.w.Flush()
}

// writeLooseBytes stores data as a loose object of type t whose hash the
// caller computed as h, without hashing it again.
func writeLooseBytes(objects string, t plumbing.ObjectType, data []byte, h plumbing.Hash) error {
	_, err := writeLooseAs(objects, t, int64(len(data)), bytes.NewReader(data), &h)
	return err
}

// writeLooseAs is writeLoose for an object of type t; with known set,
// what is read is not hashed and is stored as *known (the caller vouches
// for it).
func writeLooseAs(objects string, t plumbing.ObjectType, size int64, r io.Reader, known *plumbing.Hash) (plumbing.Hash, error) {
	st, err := stageLoose(objects, t, size, r, known)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return st.hash, st.place()
}

// stagedLoose is an object written to a temporary file in the objects
// directory: place renames it into its fan-out directory, discard
// removes it. One of the two must be called.
type stagedLoose struct {
	objects string
	tmp     string
	hash    plumbing.Hash
}

// stageLoose writes an object of type t and size bytes read from r to a
// temporary file in objects, hashing what it reads (unless known is set:
// then the object is named *known, the caller vouches for it).
func stageLoose(objects string, t plumbing.ObjectType, size int64, r io.Reader, known *plumbing.Hash) (*stagedLoose, error) {
	tmp, err := os.CreateTemp(objects, "tmp_obj_")
	if err != nil {
		return nil, err
	}
	st := &stagedLoose{objects: objects, tmp: tmp.Name()}
	var hasher plumbing.Hasher
	if known == nil {
		hasher = plumbing.NewHasher(t, size)
	}
	hdr := append(append(append(t.Bytes(), ' '), strconv.FormatInt(size, 10)...), 0)
	bw := bufio.NewWriterSize(tmp, int(min(int64(len(hdr))+size+size/maxStoredBlock*5+16, 64<<10)))
	zw, err := newStoredZlib(bw, int64(len(hdr))+size)
	if err == nil {
		_, err = zw.Write(hdr)
	}
	var n int64
	if err == nil {
		w := io.Writer(zw)
		if known == nil {
			w = io.MultiWriter(zw, hasher)
		}
		n, err = io.Copy(w, io.LimitReader(r, size))
	}
	if err == nil && n != size {
		err = fmt.Errorf("short read: %d of %d bytes", n, size)
	}
	if err == nil {
		err = zw.Close()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		st.discard()
		return nil, err
	}
	if known != nil {
		st.hash = *known
	} else {
		st.hash = hasher.Sum()
	}
	return st, nil
}

// place moves the staged object to its name in the objects directory.
func (st *stagedLoose) place() error {
	defer st.discard()
	hex := st.hash.String()
	dir := filepath.Join(st.objects, hex[:2])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(st.tmp, 0o444); err != nil {
		return err
	}
	if err := os.Rename(st.tmp, filepath.Join(dir, hex[2:])); err != nil {
		return err
	}
	st.tmp = ""
	return nil
}

// discard removes the staged object (a no-op once placed).
func (st *stagedLoose) discard() {
	if st.tmp != "" {
		os.Remove(st.tmp)
		st.tmp = ""
	}
}

// looseObject encodes an object (a tree, a commit) in memory and stores
// it as a loose object unless the repository has it: an unchanged tree
// (most segment fan-out directories of a generation) costs its encoding
// and one SHA-1, no write.
func (b *builder) looseObject(enc func(plumbing.EncodedObject) error) (plumbing.Hash, error) {
	o := &plumbing.MemoryObject{}
	if err := enc(o); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("gitops: encode object: %w", err)
	}
	h := o.Hash()
	if b.has(h) {
		return h, nil
	}
	if b.pack != nil {
		rd, err := o.Reader()
		if err != nil {
			return plumbing.ZeroHash, err
		}
		data, err := io.ReadAll(rd)
		rd.Close()
		if err == nil {
			_, err = b.pack.add(o.Type(), h, data, repr{})
		}
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("gitops: write object: %w", err)
		}
		return h, nil
	}
	rd, err := o.Reader()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	defer rd.Close()
	if _, err := writeLooseAs(b.objects, o.Type(), o.Size(), rd, &h); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("gitops: write object: %w", err)
	}
	return h, nil
}
