package aero

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// metaFile writes an AERO file of metadata only: a zstd MJSN chunk
// holding mjsn and, when mmsg is not empty, a zstd MMSG chunk holding the
// typed-JSON value mmsg. No IHSH, no tensors.
func metaFile(t testing.TB, mjsn, mmsg string) []byte {
	t.Helper()
	chunks := `[{"fourcc":"MJSN","name":"meta.json","flags":1}`
	attrs := map[string]string{"aero.uuid": strings.Repeat("0", 32), "aero.mjsn": mjsn}
	if mmsg != "" {
		chunks += `,{"fourcc":"MMSG","name":"manifest","flags":1}`
		attrs["aero.mmsg"] = mmsg
	}
	attrs["aero.chunks"] = chunks + "]"
	var buf bytes.Buffer
	if err := New().Encode(context.Background(), &buf, &snapshot.Snapshot{Attrs: attrs}, formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// decodeShared decodes b from bytes and from a plain reader with a
// shared budget of limit bytes, reading every array; it returns the
// error and the budget's peak (the same for both paths, checked).
func decodeShared(t *testing.T, b []byte, limit int64) (error, int64) {
	t.Helper()
	var firstErr error
	var peak int64
	for i, r := range []interface {
		ReadAt([]byte, int64) (int, error)
	}{snapshot.Bytes(b), bytes.NewReader(b)} {
		bud := formats.NewBudget(limit)
		_, err := New().Decode(context.Background(), r, int64(len(b)), formats.DecodeOptions{Name: "meta.aero", MaxDecoded: limit, SharedBudget: bud})
		if bud.Peak() > limit {
			t.Fatalf("peak %d exceeds the budget %d", bud.Peak(), limit)
		}
		if i == 0 {
			firstErr, peak = err, bud.Peak()
		} else if (err == nil) != (firstErr == nil) {
			t.Fatalf("bytes: %v; reader: %v", firstErr, err)
		}
	}
	return firstErr, peak
}

// TestMetadataWithinBudget: metadata that decompresses to just under the
// file's budget used to pass (only the zstd output was charged) and then
// be copied into attributes (meta.json text) or expanded into a msgpack
// tree and typed JSON many times its size: a 9 KB file reached 1 GB.
// Everything the metadata turns into is now charged to the same budget.
func TestMetadataWithinBudget(t *testing.T) {
	const limit = 256 << 10
	t.Run("meta.json", func(t *testing.T) {
		b := metaFile(t, `"`+strings.Repeat("a", limit-4<<10)+`"`, "")
		if len(b) > 4<<10 {
			t.Fatalf("file of %d bytes", len(b))
		}
		err, peak := decodeShared(t, b, limit)
		if !errors.Is(err, formats.ErrLimit) || !strings.Contains(err.Error(), `MJSN "meta.json"`) {
			t.Fatalf("%d bytes of meta.json within a budget of %d: %v", limit-4<<10, limit, err)
		}
		t.Logf("peak %d: %v", peak, err)
	})
	t.Run("manifest", func(t *testing.T) {
		// A msgpack array of n nils (one byte each): written directly,
		// with a zero TOC hash (also reported), since the typed JSON
		// the encoder would take is slow to parse.
		n := limit - 4<<10
		raw := binary.BigEndian.AppendUint32([]byte{0xdd}, uint32(n))
		raw = append(raw, bytes.Repeat([]byte{0xc0}, n)...)
		z, err := zstdCompress(raw)
		if err != nil {
			t.Fatal(err)
		}
		b := mkAero("MMSG", flagZstd, "manifest", z, uint64(len(raw)))
		if len(b) > 4<<10 {
			t.Fatalf("file of %d bytes", len(b))
		}
		err, _ = decodeShared(t, b, limit)
		if !errors.Is(err, formats.ErrLimit) || !strings.Contains(err.Error(), "decoded msgpack") {
			t.Fatalf("msgpack array of %d nils within a budget of %d: %v", n, limit, err)
		}
	})
	t.Run("fits", func(t *testing.T) {
		// The same kinds of metadata, small: decoded, with the charges
		// (zstd output, attribute copy, msgpack tree, typed JSON) in the
		// budget.
		b := metaFile(t, `"`+strings.Repeat("a", 1000)+`"`, "["+strings.Repeat("null,", 99)+"null]")
		err, peak := decodeShared(t, b, limit)
		if err != nil {
			t.Fatal(err)
		}
		if min := int64(2*1002 + 100 + 100*int(mvalCost) + 500); peak < min {
			t.Fatalf("peak %d, want at least %d (every copy charged)", peak, min)
		}
	})
}

// TestMetadataDefaultBudget: the audit's case with the default budget
// (256 MiB for a small file): a meta.json chunk declaring 255 MiB in a
// tiny file is refused before it is decompressed (it needs the zstd
// output and the attribute's copy, twice the declared size).
func TestMetadataDefaultBudget(t *testing.T) {
	b := hostileAERO(t)
	_, err := New().Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: "meta.aero"})
	if !errors.Is(err, formats.ErrLimit) || !strings.Contains(err.Error(), `MJSN "meta.json"`) {
		t.Fatalf("%v", err)
	}
}

// hostileAERO is a small AERO file whose zstd meta.json chunk declares
// 255 MiB (the TOC's ulen patched after writing a 1 KiB one).
func hostileAERO(t testing.TB) []byte {
	b := metaFile(t, `"`+strings.Repeat("a", 1024)+`"`, "")
	le := binary.LittleEndian
	ent := le.Uint64(b[12:]) + tocHeaderLen
	if string(b[ent:ent+4]) != "MJSN" {
		t.Fatalf("first TOC entry is not MJSN")
	}
	le.PutUint64(b[ent+24:], 255<<20)
	return b
}
