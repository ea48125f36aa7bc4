package fold

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

func decodeErr(b []byte, opts formats.DecodeOptions) error {
	_, err := New().Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), opts)
	return err
}

// chunkHeaderAt returns the offset of the chunk header of the chunk
// named name (from the index).
func chunkHeaderAt(t *testing.T, b []byte, name string) int {
	t.Helper()
	_, root := rawChunks(t, b)
	for _, c := range root.get("chunks").arr {
		if n, _ := c.get("name").asString(); n == name {
			off, _ := c.get("offset").asInt64()
			return int(off)
		}
	}
	t.Fatalf("no chunk %q", name)
	return 0
}

// TestChunkHeaderAgreesWithIndex: The 32-byte chunk
// header is covered by no hash; every field the index repeats (ctype,
// flags, lengths, crc32c, ecc_len) is compared with it, so one flipped bit
// in it can no longer change how a chunk is read (before: an NPZ0 ctype
// flipped to NPZ1 silently turned four tensors into one opaque chunk).
func TestChunkHeaderAgreesWithIndex(t *testing.T) {
	for _, file := range []string{"basic_nocomp.fold", "ecc_rs32_head.mind", "zstd_tsav_npz.fold", "ecc_rs32_spec_era.mind"} {
		orig := readFixture(t, file)
		_, root := rawChunks(t, orig)
		for _, c := range root.get("chunks").arr {
			name, _ := c.get("name").asString()
			at := chunkHeaderAt(t, orig, name)
			// Every bit of the header.
			for byteOff := 0; byteOff < 32; byteOff++ {
				for bit := 0; bit < 8; bit++ {
					b := append([]byte(nil), orig...)
					b[at+byteOff] ^= 1 << bit
					err := decodeErr(b, formats.DecodeOptions{})
					if err == nil {
						t.Fatalf("%s chunk %q: header byte %d bit %d flipped, decode succeeded", file, name, byteOff, bit)
					}
				}
			}
			// The ctype flip names the check.
			b := append([]byte(nil), orig...)
			b[at+3] ^= 1
			err := decodeErr(b, formats.DecodeOptions{})
			if !errors.Is(err, ErrFormat) || !errors.Is(err, formats.ErrCorrupt) || !strings.Contains(err.Error(), "disagrees with the index") {
				t.Errorf("%s chunk %q ctype flip: %v", file, name, err)
			}
		}
	}
}

// TestChunksMustNotOverlap: an index whose chunks share bytes (or whose
// chunk runs into the next one) is refused.
func TestChunksMustNotOverlap(t *testing.T) {
	di := []descInfo{{name: "a", offset: 28}, {name: "b", offset: 28 + 10}}
	if err := checkLayout(di, 1000, 10); err == nil || !errors.Is(err, ErrFormat) {
		t.Errorf("overlapping headers: %v", err)
	}
	di = []descInfo{{name: "a", offset: 28}, {name: "b", offset: 100}}
	if err := checkLayout(di, 90, 20); err == nil {
		t.Errorf("chunk header inside the index: accepted")
	}
	di = []descInfo{{name: "a", offset: 28}, {name: "b", offset: 100}}
	if err := checkLayout(di, 200, 10); err != nil || di[0].end != 100 || di[1].end != 200 {
		t.Errorf("good layout: %v, ends %d %d", err, di[0].end, di[1].end)
	}
}

// torchViews builds a torch.save zip whose data.pkl rebuilds views
// stride-0 views of one float32 storage of elems elements, each view
// elems elements long: views × elems × 4 bytes if gathered.
func torchViews(t *testing.T, views, elems int) []byte {
	var p bytes.Buffer
	p.WriteString("\x80\x02}(")
	str := func(s string) {
		p.WriteByte('X')
		binary.Write(&p, binary.LittleEndian, uint32(len(s)))
		p.WriteString(s)
	}
	i32 := func(v int) {
		p.WriteByte('J')
		binary.Write(&p, binary.LittleEndian, int32(v))
	}
	for v := 0; v < views; v++ {
		str(fmt.Sprintf("v%d", v))
		p.WriteString("ctorch._utils\n_rebuild_tensor_v2\n(")
		p.WriteString("(")
		str("storage")
		p.WriteString("ctorch\nFloatStorage\n")
		str("0")
		str("cpu")
		i32(elems)
		p.WriteString("tQ")
		i32(0)
		p.WriteString("(")
		i32(elems)
		p.WriteString("t(")
		i32(0)
		p.WriteString("t\x89}tR")
	}
	p.WriteString("u.")
	return zipOf(t,
		member{"archive/data.pkl", zip.Store, p.Bytes()},
		member{"archive/byteorder", zip.Store, []byte("little")},
		member{"archive/data/0", zip.Store, make([]byte, 4*elems)})
}

// TestTSAVViewAmplification: A small zstd TSAV chunk
// whose pickle rebuilds many stride-0 views of one storage cannot make
// the reader materialise views × size bytes: every gathered view is
// charged to the file's decode budget before it is allocated.
func TestTSAVViewAmplification(t *testing.T) {
	const elems = 256 << 10 // 1 MiB storage
	few := foldOf(t, chunkOf("torch_state", CTypeTSAV, 1, "none", torchViews(t, 2, elems)))
	s, err := New().Decode(context.Background(), snapshot.Bytes(few), int64(len(few)), formats.DecodeOptions{})
	if err != nil {
		t.Fatalf("two views: %v", err)
	}
	if a := s.Array("torch_state/v1"); a == nil || a.Data.Size() != 4*elems {
		t.Fatalf("two views: arrays %v", arrayNames(s))
	}
	many := foldOf(t, chunkOf("torch_state", CTypeTSAV, 1, "none", torchViews(t, 200, elems)))
	if len(many) > 16<<10 {
		t.Fatalf("amplification file is %d bytes", len(many))
	}
	// 200 views × 1 MiB = 200 MiB materialised, from a file of a few KB:
	// far beyond the 64 MiB budget given here.
	err = decodeErr(many, formats.DecodeOptions{MaxDecoded: 64 << 20})
	if !errors.Is(err, ErrLimit) || !errors.Is(err, formats.ErrLimit) || !strings.Contains(err.Error(), "strided view") {
		t.Fatalf("200 views: %v, want ErrLimit naming the view", err)
	}
}

// TestZstdChunkBomb: A zstd chunk whose uncomp_len and
// frame claim 1.5 GiB (within MAX_CHUNK_SIZE) in a ~50 KB file is refused
// by the default decode budget before its buffer is allocated.
func TestZstdChunkBomb(t *testing.T) {
	const huge = 3 << 29
	bomb := testutil.ZstdBomb(huge, 0, false)
	b := foldOf(t, chunkOf("blob", "BLOB", 0, "none", []byte("x")))
	// Replace the stored payload by the bomb: rebuild the file by hand.
	at := chunkHeaderAt(t, b, "blob")
	hdr := append([]byte(nil), b[at:at+32]...)
	copy(hdr[4:], []byte{0, 0, 0, 1})
	binary.BigEndian.PutUint64(hdr[8:], huge)
	binary.BigEndian.PutUint64(hdr[16:], uint64(len(bomb)))
	binary.BigEndian.PutUint32(hdr[24:], crc32c(bomb))
	sum := sha256Hex(bomb)
	index := fmt.Sprintf(`{"format":"fold","version":"1.2.0","chunks":[{"name":"blob","offset":28,"sha256":"%s","ecc_algo":"none"}]}`, sum)
	f := append([]byte(nil), b[:28]...)
	f = append(f, hdr...)
	f = append(f, bomb...)
	binary.BigEndian.PutUint64(f[12:], uint64(len(f)))
	binary.BigEndian.PutUint64(f[20:], uint64(len(index)))
	f = append(f, index...)
	err := decodeErr(f, formats.DecodeOptions{})
	if !errors.Is(err, ErrLimit) || !errors.Is(err, formats.ErrLimit) || !strings.Contains(err.Error(), "decode budget") {
		t.Fatalf("bomb: %v, want ErrLimit", err)
	}
	// The same file decodes when the caller grants the budget (the bomb is
	// a valid file); not run here: it would materialise 1.5 GiB.
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestIndexAgreesWithChunks: the same class in FOLD. A
// chunk dropped from the index (its bytes still in the file), bytes after
// the index, or chunk_hashes naming a chunk the index lacks are refused.
func TestIndexAgreesWithChunks(t *testing.T) {
	for _, file := range []string{"basic_nocomp.fold", "zstd_tsav_npz.fold", "ecc_rs32_head.mind"} {
		orig := readFixture(t, file)
		n := len(root(t, orig).get("chunks").arr)
		for drop := 0; drop < n; drop++ {
			b := withIndex(t, orig, func(r *jvalue) {
				cs := r.get("chunks")
				cs.arr = append(append([]*jvalue(nil), cs.arr[:drop]...), cs.arr[drop+1:]...)
				if m := r.get("metadata"); m != nil {
					m.set("chunk_hashes", &jvalue{kind: jObject})
					m.set("manifest_hash", jstr(sha256Hex([]byte(canonicalJSON(m.without("manifest_hash"))))))
				}
			})
			err := decodeErr(b, formats.DecodeOptions{})
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "belong to no chunk") {
				t.Errorf("%s: chunk %d dropped from the index: %v", file, drop, err)
			}
		}
		if err := decodeErr(append(append([]byte(nil), orig...), 0), formats.DecodeOptions{}); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: a byte after the index: %v", file, err)
		}
		b := withIndex(t, orig, func(r *jvalue) {
			ch := r.get("metadata").get("chunk_hashes")
			ch.obj = append(ch.obj, jmember{"ghost", jstr(strings.Repeat("0", 64))})
			m := r.get("metadata")
			m.set("manifest_hash", jstr(sha256Hex([]byte(canonicalJSON(m.without("manifest_hash"))))))
		})
		if err := decodeErr(b, formats.DecodeOptions{}); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "chunk_hashes lists a chunk") {
			t.Errorf("%s: chunk_hashes names a missing chunk: %v", file, err)
		}
	}
}

func root(t *testing.T, b []byte) *jvalue {
	_, r := rawChunks(t, b)
	return r
}

// TestTSAVPickleBombs: the audit's 863-byte .fold made gopickle grow to
// 1.7 GB over 46 s and then fall back silently to an opaque chunk (865
// bytes: out of memory). Every object the pickle machine builds is now
// charged to the file's decode budget and its work is bounded by the
// pickle's length: such chunks fail with ErrLimit, naming the chunk.
func TestTSAVPickleBombs(t *testing.T) {
	for name, pkl := range map[string][]byte{
		"EMPTY_LIST flood": append(append([]byte{0x80, 2}, bytes.Repeat([]byte{']'}, 8<<20)...), '.'),
		"DUP flood":        append(append([]byte{0x80, 2, ']'}, bytes.Repeat([]byte{'2'}, 8<<20)...), '.'),
		"memo flood":       append(append([]byte{0x80, 2, ']'}, bytes.Repeat([]byte{0x94}, 4<<20)...), '.'),
	} {
		t.Run(name, func(t *testing.T) {
			pt := zipOf(t, member{"archive/data.pkl", zip.Store, pkl})
			file := foldOf(t, chunkOf("torch_state", CTypeTSAV, 1, "none", pt))
			if len(file) > 4<<10 {
				t.Fatalf("bomb file is %d bytes", len(file))
			}
			budget := formats.NewBudget(48 << 20)
			_, err := New().Decode(context.Background(), snapshot.Bytes(file), int64(len(file)), formats.DecodeOptions{SharedBudget: budget})
			if !errors.Is(err, ErrLimit) || !errors.Is(err, formats.ErrLimit) || !strings.Contains(err.Error(), "data.pkl: offset ") || !strings.Contains(err.Error(), "torch_state") {
				t.Fatalf("got %v, want ErrLimit naming the chunk and data.pkl", err)
			}
			if budget.Remaining() < 0 {
				t.Fatal("budget overdrawn")
			}
		})
	}
}
