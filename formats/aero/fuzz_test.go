package aero

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"testing"

	"lukechampine.com/blake3"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// FuzzDecode: Decode never panics; whatever decodes re-encodes, the result
// decodes to the same arrays, and encoding is canonical from then on
// (encode(decode(E)) == E for every E the writer produced).
func FuzzDecode(f *testing.F) {
	for _, b := range formatstest.Seeds(f, "testdata/*.aero", "testdata/reference_bugs/*.aero") {
		f.Add(b)
	}
	f.Fuzz(checkDecodeProperty)
}

// checkDecodeProperty: Decode never panics; what decodes re-encodes to a
// file that decodes to the same arrays, and re-encoding that is identical.
func checkDecodeProperty(t *testing.T, b []byte) {
	{
		ctx := context.Background()
		c := New()
		testutil.NoEcho(t, func(b []byte) error {
			_, err := c.Decode(ctx, snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{})
			return err
		}, b, 4)
		s, err := c.Decode(ctx, snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{})
		if err != nil {
			return
		}
		opts := formats.EncodeOptions{Lossy: s.Attrs["aero.dropped"] != ""}
		var e1 bytes.Buffer
		if err := c.Encode(ctx, &e1, wtxtSim(t, s), opts); err != nil {
			t.Fatalf("decoded file does not re-encode: %v", err)
		}
		s2, err := c.Decode(ctx, snapshot.Bytes(e1.Bytes()), int64(e1.Len()), formats.DecodeOptions{})
		if err != nil {
			t.Fatalf("re-encoded file does not decode: %v", err)
		}
		if len(s2.Arrays) != len(s.Arrays) {
			t.Fatalf("%d arrays, then %d", len(s.Arrays), len(s2.Arrays))
		}
		for i, a := range s.Arrays {
			a2 := s2.Arrays[i]
			if a.Name != a2.Name || a.DType != a2.DType || len(a.Shape) != len(a2.Shape) || !bytes.Equal(mustData(t, a), mustData(t, a2)) {
				t.Fatalf("array %d: %s %s %v became %s %s %v", i, a.Name, a.DType, a.Shape, a2.Name, a2.DType, a2.Shape)
			}
			for k, v := range a.Attrs {
				if k != "aero.shard" && k != "aero.offset" && k != "aero.hash_b3" && a2.Attrs[k] != v {
					t.Fatalf("array %s: attr %s %q became %q", a.Name, k, v, a2.Attrs[k])
				}
			}
		}
		for _, k := range []string{"aero.uuid", "aero.mjsn", "aero.tidx", "aero.order"} {
			if s.Attrs[k] != s2.Attrs[k] {
				t.Fatalf("attr %s %q became %q", k, s.Attrs[k], s2.Attrs[k])
			}
		}
		var e2 bytes.Buffer
		if err := c.Encode(ctx, &e2, wtxtSim(t, s2), opts); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(e1.Bytes(), e2.Bytes()) {
			t.Fatalf("encoding is not canonical: differs at byte %d", firstDiff(e1.Bytes(), e2.Bytes()))
		}
	}
}

// rehash rewrites the TOC BLAKE3 of every uncompressed chunk so that
// mutations get past the chunk checksums and reach the parsers and the
// encoder.
func rehash(b []byte) {
	if len(b) < headerSize {
		return
	}
	le := binary.LittleEndian
	tocOff := le.Uint64(b[12:])
	if tocOff > uint64(len(b)) || uint64(len(b))-tocOff < tocHeaderLen {
		return
	}
	n := uint64(le.Uint32(b[tocOff:]))
	for i := range n {
		eo := tocOff + tocHeaderLen + i*tocEntryLen
		if eo > uint64(len(b)) || uint64(len(b))-eo < tocEntryLen {
			return
		}
		e := b[eo : eo+tocEntryLen]
		off, length := le.Uint64(e[8:]), le.Uint64(e[16:])
		if le.Uint32(e[4:])&flagZstd != 0 || !inFile(off, length, int64(len(b))) {
			continue
		}
		sum := blake3.Sum256(b[off : off+length])
		copy(e[hashOff:], sum[:])
	}
}

// FuzzDecodeRehashed runs the FuzzDecode property on inputs whose chunk
// hashes are fixed up, seeded with the fixtures re-encoded without
// compression, IHSH and hash_b3 (so that mutated metadata stays readable).
func FuzzDecodeRehashed(f *testing.F) {
	for _, b := range formatstest.Seeds(f, "testdata/*.aero") {
		s, err := New().Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{})
		if err != nil {
			f.Fatal(err)
		}
		var descs []chunkDesc
		if err := json.Unmarshal([]byte(s.Attrs["aero.chunks"]), &descs); err != nil {
			f.Fatal(err)
		}
		plain := descs[:0]
		for _, d := range descs {
			if d.FourCC != "IHSH" && d.FourCC != "PHSH" {
				d.Flags &^= flagZstd
				plain = append(plain, d)
			}
		}
		js, _ := json.Marshal(plain)
		s.Attrs["aero.chunks"] = string(js)
		for _, a := range s.Arrays {
			delete(a.Attrs, "aero.hash_b3")
		}
		var buf bytes.Buffer
		if err := New().Encode(context.Background(), &buf, s, formats.EncodeOptions{}); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = bytes.Clone(b)
		rehash(b)
		checkDecodeProperty(t, b)
	})
}
