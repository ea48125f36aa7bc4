package torch

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"sort"

	"github.com/snapd-ml/snapd/internal/jsonerr"
	"github.com/snapd-ml/snapd/snapshot"
)

// AttrSkeleton (snapshot) is what makes a plain zip checkpoint come back
// byte for byte although Encode's own layout differs from the writer's
// (torch names the archive after the file, memoizes its pickle, orders
// members its own way): the file's bytes without its storages, and
// where each storage went, canonical JSON
//
//	{"holes":[[file offset, "array name", CRC-32],...],"rest":"base64","size":N}
//
// holes ascending by offset. Encode uses it only when the snapshot's
// arrays are exactly the holes' arrays and each one's bytes still have
// the recorded CRC-32 (one extra read of every array); otherwise (an
// array edited, added or removed) it writes its own layout from
// torch.tree.
const AttrSkeleton = "torch.skeleton"

// MaxSkeleton bounds the bytes of a file AttrSkeleton keeps (the zip
// headers, data.pkl and the records besides the storages: a few hundred
// bytes per tensor); a file with more gets none.
const MaxSkeleton = 4 << 20

type skeletonDoc struct {
	Holes [][3]any `json:"holes"`
	Rest  string   `json:"rest"`
	Size  int64    `json:"size"`
}

// skeleton records AttrSkeleton for a zip checkpoint whose storages are
// each viewed whole, in C order, by exactly one array (no torch.storage
// attributes), stored little-endian and matching their members' CRC-32
// (one extra read of every array); it leaves s alone otherwise.
func (d *decoder) skeleton(s *snapshot.Snapshot, w *walker) error {
	if d.swap || d.ownWrite || len(s.Arrays) != len(w.tensors) {
		return nil
	}
	type hole struct {
		off, n int64
		name   string
		crc    uint32
	}
	holes := make([]hole, 0, len(s.Arrays))
	for i, a := range s.Arrays {
		rg, ok := d.regions[w.tensors[i].t.st.key]
		nb, err := a.NumBytes()
		if !ok || !rg.zip || a.Attrs != nil || err != nil || nb != rg.bytes || w.tensors[i].t.st.viewOff != 0 {
			return nil
		}
		// The skeleton promises what Encode checks before it replays it:
		// the array's bytes have the member's CRC-32. A file whose stored
		// data disagrees with its own zip header (damaged, or crafted)
		// gets no skeleton, so its re-encoding is Encode's own layout
		// every time.
		crc := crc32.NewIEEE()
		if _, err := io.Copy(crc, io.NewSectionReader(a.Data, 0, nb)); err != nil {
			return d.errf("", rg.off, ErrCorrupt, "read %s: %v", rg.where, err)
		}
		if crc.Sum32() != rg.crc {
			return nil
		}
		holes = append(holes, hole{rg.off, rg.bytes, a.Name, rg.crc})
	}
	sort.Slice(holes, func(i, j int) bool { return holes[i].off < holes[j].off })
	rest := d.size
	for i, h := range holes {
		if i > 0 && holes[i-1].off+holes[i-1].n > h.off {
			return nil // overlapping members: not a file torch writes
		}
		rest -= h.n
	}
	if rest > MaxSkeleton {
		return nil
	}
	if err := d.budget.Take(rest*2, "torch skeleton"); err != nil {
		return d.errf("", -1, ErrLimit, "%v", err)
	}
	buf := make([]byte, 0, rest)
	doc := skeletonDoc{Size: d.size, Holes: make([][3]any, len(holes))}
	pos := int64(0)
	for i, h := range holes {
		buf = buf[:len(buf)+int(h.off-pos)]
		if err := snapshot.ReadFullAt(d.r, buf[len(buf)-int(h.off-pos):], pos); err != nil {
			return d.errf("", pos, ErrCorrupt, "read: %v", err)
		}
		pos = h.off + h.n
		doc.Holes[i] = [3]any{h.off, h.name, h.crc}
	}
	buf = buf[:len(buf)+int(d.size-pos)]
	if err := snapshot.ReadFullAt(d.r, buf[len(buf)-int(d.size-pos):], pos); err != nil {
		return d.errf("", pos, ErrCorrupt, "read: %v", err)
	}
	doc.Rest = base64.StdEncoding.EncodeToString(buf)
	j, err := canonicalJSON(doc)
	if err != nil {
		return d.errf("", -1, ErrCorrupt, "skeleton: %v", err)
	}
	s.Attrs[AttrSkeleton] = string(j)
	return nil
}

// encodeSkeleton writes s as the file AttrSkeleton recorded, when it
// applies (see AttrSkeleton); false when it does not. A malformed
// attribute is an error.
func encodeSkeleton(ctx context.Context, w io.Writer, s *snapshot.Snapshot) (bool, error) {
	doc, ok := s.Attrs[AttrSkeleton]
	if !ok {
		return false, nil
	}
	var sk skeletonDoc
	dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sk); err != nil {
		return false, encErr("%s: %v", AttrSkeleton, jsonerr.Describe(err))
	}
	rest, err := base64.StdEncoding.DecodeString(sk.Rest)
	if err != nil || int64(len(rest)) > sk.Size || sk.Size < 0 {
		return false, encErr("%s: rest is not base64 of at most size bytes", AttrSkeleton)
	}
	byName := map[string]*snapshot.Array{}
	for _, a := range s.Arrays {
		byName[a.Name] = a
	}
	if len(sk.Holes) != len(s.Arrays) {
		return false, nil
	}
	type hole struct {
		off int64
		a   *snapshot.Array
	}
	holes := make([]hole, len(sk.Holes))
	pos, filled := int64(0), int64(0)
	for i, h := range sk.Holes {
		off, err1 := h[0].(json.Number).Int64()
		name, ok2 := h[1].(string)
		crcN, err3 := h[2].(json.Number).Int64()
		if err1 != nil || !ok2 || err3 != nil || off < pos || crcN < 0 || crcN > 0xffffffff {
			return false, encErr("%s: hole %d: malformed or out of order", AttrSkeleton, i)
		}
		a := byName[name]
		if a == nil {
			return false, nil
		}
		delete(byName, name) // each array fills one hole
		n := a.Data.Size()
		if n > sk.Size-off {
			return false, nil
		}
		crc := crc32.NewIEEE()
		if _, err := io.Copy(crc, io.NewSectionReader(a.Data, 0, n)); err != nil {
			return false, fmt.Errorf("torch: array %q: %w", a.Name, err)
		}
		if crc.Sum32() != uint32(crcN) {
			return false, nil
		}
		holes[i] = hole{off, a}
		filled += n
		pos = off + n
	}
	if filled+int64(len(rest)) != sk.Size {
		return false, nil
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	pos, used := int64(0), int64(0)
	for _, h := range holes {
		gap := h.off - pos
		if _, err := bw.Write(rest[used : used+gap]); err != nil {
			return false, err
		}
		used += gap
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if _, err := io.Copy(bw, io.NewSectionReader(h.a.Data, 0, h.a.Data.Size())); err != nil {
			return false, fmt.Errorf("torch: array %q: %w", h.a.Name, err)
		}
		pos = h.off + h.a.Data.Size()
	}
	if _, err := bw.Write(rest[used:]); err != nil {
		return false, err
	}
	return true, bw.Flush()
}

// ownSerializationID is the serialization id Encode writes for the
// members before id (see countWriter): a file whose id matches was
// written by Encode, which reproduces it from torch.tree.
func ownSerializationID(files []*zip.File, id *zip.File) string {
	names, crcs := fnv.New64a(), fnv.New64a()
	var b [4]byte
	for _, f := range files {
		if f == id {
			break
		}
		names.Write([]byte(f.Name + "\x00"))
		binary.BigEndian.PutUint32(b[:], f.CRC32)
		crcs.Write(b[:])
	}
	return fmt.Sprintf("%020d%020d", names.Sum64(), crcs.Sum64())
}
