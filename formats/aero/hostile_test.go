package aero

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
	"lukechampine.com/blake3"
)

// TestTOCCountDisagreement: A TOC entry_count flipped to
// 0 (or any other value) used to decode as an empty snapshot; the count,
// toc_length and the chunks the file holds must agree.
func TestTOCCountDisagreement(t *testing.T) {
	for _, f := range []string{"test_vector.aero", "dtypes.aero", "lowlevel_hashb3_2shards.aero", "multishard_ihsh_phsh.aero"} {
		orig := readFixture(t, f)
		le := binary.LittleEndian
		tocOff := le.Uint64(orig[12:])
		n := le.Uint32(orig[tocOff:])
		for _, c := range []uint32{0, 1, n - 1, n + 1} {
			b := append([]byte(nil), orig...)
			le.PutUint32(b[tocOff:], c)
			s, err := decodeBytes(t, b)
			if s != nil || !errors.Is(err, ErrCorrupt) || !errors.Is(err, formats.ErrCorrupt) {
				t.Fatalf("%s: entry_count %d -> %d: snapshot %v, error %v", f, n, c, s != nil, err)
			}
			// Also with toc_length rewritten to match the forged count:
			// the chunks the TOC no longer lists are data nobody covers.
			if c < n {
				le.PutUint64(b[20:], 16+80*uint64(c))
				s, err = decodeBytes(t, b)
				if s != nil || !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s: entry_count %d -> %d with matching toc_length: snapshot %v, error %v", f, n, c, s != nil, err)
				}
				if !strings.Contains(err.Error(), "coverage") && !strings.Contains(err.Error(), "ihsh") {
					t.Errorf("%s: count %d: %v does not name the uncovered bytes", f, c, err)
				}
			}
		}
	}
}

// TestTrailingData: bytes after the last chunk belong to nothing.
func TestTrailingData(t *testing.T) {
	b := append(readFixture(t, "test_vector.aero"), "trailing"...)
	_, err := decodeBytes(t, b)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "belong to no TOC entry") {
		t.Fatalf("trailing bytes: %v", err)
	}
}

// TestManifestDisagreesWithTOC: MMSG's shard tensor_count and size_bytes
// and its chunk list must agree with TIDX and the TOC. The forged MMSG is
// written by the encoder's compression hook and its TOC hash fixed, so
// only the disagreement is wrong.
func TestManifestDisagreesWithTOC(t *testing.T) {
	orig := readFixture(t, "lowlevel_hashb3_2shards.aero")
	s, err := decodeBytes(t, orig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to, msg string }{
		{"\xactensor_count\x03", "\xactensor_count\x02", "tensor_count disagrees"},
		{"\xaasize_bytes\x26", "\xaasize_bytes\x27", "size_bytes disagrees"},
		{"\xa6fourcc\xa4TIDX", "\xa6fourcc\xa4MJSN", "fourcc disagrees"},
		{"\xa9toc_index\x04\xa8shard_id\x01", "\xa9toc_index\x09\xa8shard_id\x01", "toc_index is not the index"},
	} {
		var forged []byte
		compress := func(raw []byte) ([]byte, error) {
			if bytes.Contains(raw, []byte("tensor_count")) {
				raw = bytes.Replace(raw, []byte(c.from), []byte(c.to), 1)
				forged = raw
			}
			return zstdCompress(raw)
		}
		b := encodeWith(t, s, encConfig{compress: compress, shardCap: DefaultShardCap})
		if forged == nil || !bytes.Contains(forged, []byte(c.to)) {
			t.Fatalf("MMSG has no %q", c.from)
		}
		for i, e := range rawTOC(t, b) {
			if e.fourcc == "MMSG" {
				sum := blake3.Sum256(forged)
				at := binary.LittleEndian.Uint64(b[12:]) + 16 + 80*uint64(i) + hashOff
				copy(b[at:], sum[:])
			}
		}
		_, err := decodeBytes(t, b)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want %q", c.to, err, c.msg)
		}
		if strings.Contains(err.Error(), "blake3") {
			t.Errorf("%q: the forged MMSG's hash was not fixed: %v", c.to, err)
		}
	}
}

// mkAero builds a minimal AERO file with one chunk (TOC entry 0) of the
// given fourcc, flags, name, stored bytes and ulen.
func mkAero(fourcc string, flags uint32, name string, stored []byte, ulen uint64) []byte {
	le := binary.LittleEndian
	st := []byte(name + "\x00")
	for len(st)%8 != 0 {
		st = append(st, 0)
	}
	tocOff, tocLen := uint64(96), uint64(16+80)
	stOff := tocOff + tocLen
	payOff := (stOff + uint64(len(st)) + 15) &^ 15
	b := make([]byte, payOff)
	copy(b, "AERO")
	le.PutUint16(b[6:], 1)
	le.PutUint32(b[8:], 96)
	le.PutUint64(b[12:], tocOff)
	le.PutUint64(b[20:], tocLen)
	le.PutUint64(b[28:], stOff)
	le.PutUint64(b[36:], uint64(len(st)))
	le.PutUint32(b[tocOff:], 1)
	e := b[tocOff+16:]
	copy(e, fourcc)
	le.PutUint32(e[4:], flags)
	le.PutUint64(e[8:], payOff)
	le.PutUint64(e[16:], uint64(len(stored)))
	le.PutUint64(e[24:], ulen)
	le.PutUint32(e[32:], 0)
	le.PutUint32(e[36:], uint32(len(name)))
	copy(b[stOff:], st)
	return append(b, stored...)
}

// TestMetadataZstdBomb: A zstd MJSN chunk declaring (and
// really inflating to) 1.5 GiB in a ~50 KB file is refused by the decode
// budget before its buffer is allocated; an opaque chunk that is only
// hashed (streamed) is charged too.
func TestMetadataZstdBomb(t *testing.T) {
	const huge = 3 << 29
	for _, fourcc := range []string{"MJSN", "XTRA"} {
		f := mkAero(fourcc, flagZstd, "meta.json", testutil.ZstdBomb(huge, ' ', false), huge)
		if len(f) > 64<<10 {
			t.Fatalf("bomb file is %d bytes", len(f))
		}
		_, err := decodeBytes(t, f)
		if !errors.Is(err, ErrLimit) || !errors.Is(err, formats.ErrLimit) || !strings.Contains(err.Error(), "decode budget") {
			t.Fatalf("%s bomb: %v, want ErrLimit", fourcc, err)
		}
	}
	// Within the budget (the zstd output and the copy the aero.mjsn
	// attribute will hold: 2 MiB and the TOC) the same structure is
	// decoded (and then fails on its zero TOC hash, not on memory).
	f := mkAero("MJSN", flagZstd, "meta.json", testutil.ZstdBomb(1<<20, ' ', false), 1<<20)
	_, err := New().Decode(context.Background(), snapshot.Bytes(f), int64(len(f)), formats.DecodeOptions{MaxDecoded: 2<<20 + 4096})
	if !errors.Is(err, ErrChecksum) || errors.Is(err, formats.ErrLimit) {
		t.Fatalf("1 MiB MJSN within a 2 MiB budget: %v", err)
	}
	_, err = New().Decode(context.Background(), snapshot.Bytes(f), int64(len(f)), formats.DecodeOptions{MaxDecoded: 1 << 19})
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("1 MiB MJSN within a 512 KiB budget: %v", err)
	}
}

func zstdCompress(raw []byte) ([]byte, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	return enc.EncodeAll(raw, nil), nil
}
