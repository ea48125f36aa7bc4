package ztensor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// splitFile returns the blob region (everything before the manifest) and
// the manifest bytes of a well-formed file.
func splitFile(t testing.TB, b []byte) ([]byte, []byte) {
	t.Helper()
	n := binary.LittleEndian.Uint64(b[len(b)-8:])
	mOff := len(b) - 8 - int(n)
	return b[:mOff], b[mOff : len(b)-8]
}

// assemble builds a file from a blob region and manifest bytes.
func assemble(blobs, mb []byte) []byte {
	out := append(append([]byte{}, blobs...), mb...)
	return binary.LittleEndian.AppendUint64(out, uint64(len(mb)))
}

// rewrite parses the manifest of b, lets f change it and re-assembles.
func rewrite(t testing.TB, b []byte, f func(m *manifest)) []byte {
	t.Helper()
	blobs, mb := splitFile(t, b)
	m, err := parseManifest(mb)
	if err != nil {
		t.Fatal(err)
	}
	f(m)
	return assemble(blobs, m.marshal())
}

func wantErr(t *testing.T, b []byte, sentinel error, mentions ...string) {
	t.Helper()
	_, err := decodeBytes(b)
	if err == nil {
		t.Fatalf("decode succeeded, want %v", sentinel)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %q does not wrap %v", err, sentinel)
	}
	var ze *Error
	if !errors.As(err, &ze) {
		t.Errorf("error %q is not a *Error", err)
	}
	for _, s := range mentions {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

func TestTruncationAtEveryOffset(t *testing.T) {
	for _, f := range fixtures {
		b := readFixture(t, f.file)
		for n := 0; n < len(b); n++ {
			cut := append([]byte{}, b[:n]...)
			if _, err := decodeBytes(cut); err == nil {
				t.Errorf("%s truncated to %d bytes decoded without error", f.file, n)
			}
		}
	}
}

func TestFlippedDataDetected(t *testing.T) {
	cases := []struct {
		file   string
		off    int
		tensor string
		role   string
	}{
		{"dense_dtypes.zt", 192, "e.bf16", "data"},
		{"dense_dtypes.zt", 325, "m.u8", "data"},
		{"zstd_crc32c.zt", 64 + 20, "big.f32", "data"}, // compressed bytes: checked before decompression
		{"zstd_crc32c.zt", 321, "raw.u8", "data"},
		{"sparse_csr_coo.zt", 260, "coo.f32", "values"},
		{"sparse_csr_coo.zt", 320 + 95, "coo.f32", "coords"},
		{"sparse_csr_coo.zt", 512 + 3, "csr_zstd.i32", "indices"},
	}
	for _, c := range cases {
		b := readFixture(t, c.file)
		b[c.off] ^= 0x01
		wantErr(t, b, ErrChecksum, `tensor "`+c.tensor+`"`, `component "`+c.role+`"`, "crc32c")
	}
}

func TestFlippedDigestDetected(t *testing.T) {
	for _, c := range []struct{ file, digest, tensor string }{
		{"dense_dtypes.zt", "crc32c:0x1904796B", "e.bf16"},
		{"zstd_crc32c.zt", "crc32c:0xC1415A2F", "big.f32"},
		{"sparse_csr_coo.zt", "crc32c:0xDBF09A31", "coo.f32"},
	} {
		b := readFixture(t, c.file)
		i := bytes.Index(b, []byte(c.digest))
		if i < 0 {
			t.Fatalf("%s: digest %s not found", c.file, c.digest)
		}
		b[i+len(c.digest)-1] = swapHex(c.digest[len(c.digest)-1])
		// The error gives the computed value, never the manifest's text.
		wantErr(t, b, ErrChecksum, `tensor "`+c.tensor+`"`, c.digest[len("crc32c:"):], "digest differs")
	}
	// Lower-case hex in the manifest is accepted (the reference parses hex
	// case-insensitively).
	b := rewrite(t, readFixture(t, "dense_dtypes.zt"), func(m *manifest) {
		c := m.Tensors["e.bf16"].Components["data"]
		c.Digest = "crc32c:0x1904796b"
		m.Tensors["e.bf16"].Components["data"] = c
	})
	if _, err := decodeBytes(b); err != nil {
		t.Errorf("lower-case crc32c: %v", err)
	}
}

func swapHex(c byte) byte {
	if c == '0' {
		return '1'
	}
	return '0'
}

func sha256File(t *testing.T, encoding string) []byte {
	t.Helper()
	s := &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "w", DType: snapshot.I16, Shape: []int64{300},
		Data: snapshot.Bytes(bytes.Repeat([]byte{1, 2}, 300)), Attrs: map[string]string{"ztensor.digest": "sha256", "ztensor.encoding": encoding}}}}
	if encoding == "" {
		delete(s.Arrays[0].Attrs, "ztensor.encoding")
	}
	return encodeBytes(t, s)
}

func TestSHA256Verified(t *testing.T) {
	for _, enc := range []string{"", "zstd"} {
		b := sha256File(t, enc)
		if _, err := decodeBytes(b); err != nil {
			t.Fatalf("%q: %v", enc, err)
		}
		if !bytes.Contains(b, []byte(`sha256:`)) {
			t.Fatalf("no sha256 digest written")
		}
		flipped := append([]byte{}, b...)
		flipped[64+5] ^= 0x80
		wantErr(t, flipped, ErrChecksum, `tensor "w"`, "sha256")

		i := bytes.Index(b, []byte("sha256:")) + len("sha256:")
		bad := append([]byte{}, b...)
		bad[i] = swapHex(bad[i])
		wantErr(t, bad, ErrChecksum, `tensor "w"`, "sha256")

		upper := append([]byte{}, b...)
		copy(upper[i:], bytes.ToUpper(upper[i:i+64]))
		if _, err := decodeBytes(upper); err != nil {
			t.Errorf("upper-case sha256: %v", err)
		}
	}
	// A sha256 over the decoded bytes of a zstd component is accepted too.
	b := rewrite(t, sha256File(t, "zstd"), func(m *manifest) {
		c := m.Tensors["w"].Components["data"]
		sum := sha256.Sum256(bytes.Repeat([]byte{1, 2}, 300))
		c.Digest = "sha256:" + hex.EncodeToString(sum[:])
		m.Tensors["w"].Components["data"] = c
	})
	if _, err := decodeBytes(b); err != nil {
		t.Errorf("sha256 over decoded bytes: %v", err)
	}
}

func TestUnsupportedDigests(t *testing.T) {
	for _, d := range []string{"md5:0123", "crc32c:1904796B", "crc32c:0x", "crc32c:0x1904796B0", "crc32c:0x-1", "sha256:abc", "CRC32C:0x1904796B"} {
		b := rewrite(t, readFixture(t, "dense_dtypes.zt"), func(m *manifest) {
			c := m.Tensors["e.bf16"].Components["data"]
			c.Digest = d
			m.Tensors["e.bf16"].Components["data"] = c
		})
		wantErr(t, b, ErrCorrupt, `tensor "e.bf16"`, "digest")
	}
}

func TestVersions(t *testing.T) {
	dense := readFixture(t, "dense_dtypes.zt")
	blobs, mb := splitFile(t, dense)

	// zTensor 1.1+: size followed by a second ZTEN1000.
	v11 := append(append(append([]byte{}, blobs...), mb...), 0, 0, 0, 0, 0, 0, 0, 0)
	binary.LittleEndian.PutUint64(v11[len(v11)-8:], uint64(len(mb)))
	v11 = append(v11, Magic...)
	wantErr(t, v11, ErrUnsupportedVersion, "1.1")

	// A 1.1-style manifest ("objects") in a v1.0 layout.
	var e cborEnc
	e.mapHead(3)
	e.text("version")
	e.text("1.1")
	e.text("attributes")
	e.mapHead(0)
	e.text("objects")
	e.mapHead(0)
	wantErr(t, assemble([]byte(Magic), e.b), ErrUnsupportedVersion, "objects")

	for _, v := range []string{"2.0", "0.1", "x", "", "1.0.0.0", "1.-1"} {
		b := rewrite(t, dense, func(m *manifest) { m.Version = v })
		wantErr(t, b, ErrUnsupportedVersion, "version")
	}
	for _, v := range []string{"1.0", "1.1", "1.7.3", "1"} {
		b := rewrite(t, dense, func(m *manifest) { m.Version = v })
		s, err := decodeBytes(b)
		if err != nil {
			t.Errorf("version %q: %v", v, err)
			continue
		}
		if s.Attrs[attrVersion] != v {
			t.Errorf("version %q kept as %q", v, s.Attrs[attrVersion])
		}
	}

	for _, c := range []struct {
		magic    string
		sentinel error
	}{{"ZTEN0001", ErrUnsupportedVersion}, {magicV2, ErrUnsupportedVersion}, {"GGUF\x03\x00\x00\x00", ErrNotZTensor}} {
		b := append([]byte(c.magic), dense[8:]...)
		wantErr(t, b, c.sentinel)
	}
}

func TestManifestSize(t *testing.T) {
	empty := readFixture(t, "empty.zt")
	// size - 16 is accepted (empty.zt), size - 15 is not.
	b := append([]byte{}, empty...)
	binary.LittleEndian.PutUint64(b[len(b)-8:], uint64(len(b)-15))
	wantErr(t, b, ErrCorrupt, "manifest size")
	binary.LittleEndian.PutUint64(b[len(b)-8:], ^uint64(0))
	wantErr(t, b, ErrCorrupt, "manifest size")

	dense := readFixture(t, "dense_dtypes.zt")
	_, err := Codec{MaxManifestSize: 100}.Decode(context.Background(), snapshot.Bytes(dense), int64(len(dense)), formats.DecodeOptions{})
	if !errors.Is(err, ErrLimit) {
		t.Errorf("manifest over limit: %v", err)
	}
	// Trailing bytes after the CBOR item.
	blobs, mb := splitFile(t, dense)
	wantErr(t, assemble(blobs, append(append([]byte{}, mb...), 0)), ErrCorrupt, "CBOR")
}

func TestComponentBounds(t *testing.T) {
	dense := readFixture(t, "dense_dtypes.zt")
	set := func(tensor string, f func(c *componentEntry)) []byte {
		return rewrite(t, dense, func(m *manifest) {
			c := m.Tensors[tensor].Components["data"]
			f(&c)
			m.Tensors[tensor].Components["data"] = c
		})
	}
	wantErr(t, set("w.f32", func(c *componentEntry) { c.Offset = 65 }), ErrCorrupt, `tensor "w.f32"`, "multiple of 64")
	wantErr(t, set("w.f32", func(c *componentEntry) { c.Offset = 448 }), ErrCorrupt, `tensor "w.f32"`, "exceeds")
	wantErr(t, set("w.f32", func(c *componentEntry) { c.Offset = 1 << 40 }), ErrCorrupt, "exceeds")
	wantErr(t, set("w.f32", func(c *componentEntry) { c.Offset = ^uint64(0) &^ 63 }), ErrCorrupt, "exceeds")
	wantErr(t, set("w.f32", func(c *componentEntry) { c.Length = ^uint64(0) }), ErrCorrupt, "exceeds")
	wantErr(t, set("w.f32", func(c *componentEntry) { c.Offset = 0 }), ErrCorrupt, "exceeds")
	wantErr(t, set("w.f32", func(c *componentEntry) { c.Length = 20 }), ErrCorrupt, `tensor "w.f32"`, "length 20 != 24")
	wantErr(t, set("w.f32", func(c *componentEntry) { c.Encoding = "lz4" }), ErrCorrupt, `tensor "w.f32"`, "lz4")

	wantErr(t, rewrite(t, dense, func(m *manifest) { m.Tensors["w.f32"].DType = "complex64" }), ErrCorrupt, "complex64")
	wantErr(t, rewrite(t, dense, func(m *manifest) { m.Tensors["w.f32"].Shape = []uint64{1 << 63, 2} }), ErrCorrupt, `tensor "w.f32"`)
	wantErr(t, rewrite(t, dense, func(m *manifest) { m.Tensors["w.f32"].Shape = []uint64{1 << 62, 1 << 62} }), ErrCorrupt, "overflow")
	wantErr(t, rewrite(t, dense, func(m *manifest) { m.Tensors["w.f32"].Format = "sparse_csr" }), ErrCorrupt, "values")
	wantErr(t, rewrite(t, dense, func(m *manifest) {
		m.Tensors["w.f32"].Components["extra"] = m.Tensors["w.f32"].Components["data"]
	}), ErrCorrupt, `"extra"`)
	wantErr(t, rewrite(t, dense, func(m *manifest) {
		m.Tensors["w.f32"].Format = "custom"
		m.Tensors["w.f32"].Components = map[string]componentEntry{}
	}), ErrCorrupt, "no components")
}

func TestSparseStructure(t *testing.T) {
	sp := readFixture(t, "sparse_csr_coo.zt")
	wantErr(t, rewrite(t, sp, func(m *manifest) { m.Tensors["coo.f32"].Shape = []uint64{3, 20} }), ErrCorrupt, `tensor "coo.f32"`, "coords")
	wantErr(t, rewrite(t, sp, func(m *manifest) {
		c := m.Tensors["csr.f32"].Components["indptr"]
		c.Length = 32
		m.Tensors["csr.f32"].Components["indptr"] = c
	}), ErrCorrupt, `tensor "csr.f32"`, "indptr")
	wantErr(t, rewrite(t, sp, func(m *manifest) { m.Tensors["csr.f32"].Shape = []uint64{20} }), ErrCorrupt, "rank 2")
	wantErr(t, rewrite(t, sp, func(m *manifest) { m.Tensors["csr.f32"].Shape = []uint64{4, 1} }), ErrCorrupt, "non-zeros")
	wantErr(t, rewrite(t, sp, func(m *manifest) { m.Tensors["csr.f32"].DType = "float64" }), ErrCorrupt, "whole number")
	// zstd indptr decoding to a wrong length.
	wantErr(t, rewrite(t, sp, func(m *manifest) { m.Tensors["csr_zstd.i32"].Shape = []uint64{2, 3} }), ErrCorrupt, `tensor "csr_zstd.i32"`)
}

// TestExtensionFormat: a tensor of an unknown format becomes one u8 array
// per component and survives a round trip.
func TestExtensionFormat(t *testing.T) {
	b := rewrite(t, readFixture(t, "dense_dtypes.zt"), func(m *manifest) {
		m.Tensors["w.f32"].Format = "quantized_4bit"
		m.Tensors["w.f32"].Components["scale"] = m.Tensors["b.f16"].Components["data"]
	})
	s1, err := decodeBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	a := s1.Array("w.f32.scale")
	if a == nil || a.DType != snapshot.U8 || a.Shape[0] != 8 || a.Attrs["ztensor.format"] != "quantized_4bit" || a.Attrs["ztensor.role"] != "scale" {
		t.Fatalf("extension component: %+v", a)
	}
	s2, err := decodeBytes(encodeBytes(t, formatstest.SimulateWTXT(t, s1)))
	if err != nil {
		t.Fatal(err)
	}
	formatstest.Equal(t, s2, s1)
}

// zstdFrame compresses p into one frame without a content size, like the
// reference writer.
func zstdFrame(t *testing.T, p []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Write(p); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// oneTensor builds a file with one dense u8 tensor of the given shape
// whose single component holds blob with the given encoding.
func oneTensor(blob []byte, shape []uint64, encoding string) []byte {
	blobs := make([]byte, 64)
	copy(blobs, Magic)
	blobs = append(blobs, blob...)
	m := &manifest{Version: "1.0", Generator: "test", Attributes: map[string]string{}, Tensors: map[string]*tensorEntry{
		"t": {DType: "uint8", Shape: shape, Format: "dense", Components: map[string]componentEntry{
			"data": {Offset: 64, Length: uint64(len(blob)), Encoding: encoding}}}}}
	return assemble(blobs, m.marshal())
}

func TestZstdLimits(t *testing.T) {
	// Bomb: 8 MiB of zeros compress to a few hundred bytes but the tensor
	// declares 16 bytes.
	bomb := zstdFrame(t, make([]byte, 8<<20))
	if len(bomb) > 4096 {
		t.Fatalf("bomb is %d bytes", len(bomb))
	}
	wantErr(t, oneTensor(bomb, []uint64{16}, "zstd"), ErrCorrupt, `tensor "t"`, "more than the 16 bytes")
	// Too short.
	wantErr(t, oneTensor(zstdFrame(t, make([]byte, 10)), []uint64{16}, "zstd"), ErrCorrupt, "10 bytes")
	// Exact size decodes.
	if _, err := decodeBytes(oneTensor(zstdFrame(t, make([]byte, 16)), []uint64{16}, "zstd")); err != nil {
		t.Errorf("exact: %v", err)
	}
	// Garbage is an error.
	wantErr(t, oneTensor([]byte("not zstd at all"), []uint64{16}, "zstd"), ErrCorrupt, "zstd")
	// A frame declaring a 1 GiB window for a 16-byte tensor is refused
	// before anything is allocated: magic, FHD 0 (no content size), window
	// descriptor 0xA0 (2^30), then one raw last block of 16 bytes.
	frame := append([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0xA0}, 0x81, 0x00, 0x00)
	frame = append(frame, make([]byte, 16)...)
	wantErr(t, oneTensor(frame, []uint64{16}, "zstd"), ErrLimit, "zstd")
	// The same frame with a 1 KiB window decodes.
	frame[5] = 0x00
	if _, err := decodeBytes(oneTensor(frame, []uint64{16}, "zstd")); err != nil {
		t.Errorf("hand-made raw-block frame: %v", err)
	}
	// Total decompression budget.
	zf := readFixture(t, "zstd_crc32c.zt")
	_, err := Codec{MaxDecompressed: 1000}.Decode(context.Background(), snapshot.Bytes(zf), int64(len(zf)), formats.DecodeOptions{})
	if !errors.Is(err, ErrLimit) {
		t.Errorf("budget: %v", err)
	}
}

func TestMalformedCBOR(t *testing.T) {
	build := func(f func(e *cborEnc)) []byte {
		var e cborEnc
		f(&e)
		return assemble([]byte(Magic), e.b)
	}
	root := func(e *cborEnc, tensors func(e *cborEnc)) {
		e.mapHead(4)
		e.text("version")
		e.text("1.0")
		e.text("generator")
		e.text("g")
		e.text("attributes")
		e.mapHead(0)
		e.text("tensors")
		tensors(e)
	}
	// Missing root key.
	wantErr(t, build(func(e *cborEnc) { e.mapHead(1); e.text("version"); e.text("1.0") }), ErrCorrupt, "generator")
	// Root is not a map.
	wantErr(t, build(func(e *cborEnc) { e.arrayHead(0) }), ErrCorrupt, "CBOR")
	// Duplicate tensor names.
	wantErr(t, build(func(e *cborEnc) {
		root(e, func(e *cborEnc) {
			e.mapHead(2)
			for i := 0; i < 2; i++ {
				e.text("a")
				e.mapHead(0)
			}
		})
	}), ErrCorrupt)
	// Tensor missing "components".
	wantErr(t, build(func(e *cborEnc) {
		root(e, func(e *cborEnc) {
			e.mapHead(1)
			e.text("a")
			e.mapHead(3)
			e.text("dtype")
			e.text("uint8")
			e.text("shape")
			e.arrayHead(0)
			e.text("format")
			e.text("dense")
		})
	}), ErrCorrupt, `tensor "a"`, "components")
	// Negative dimension.
	wantErr(t, build(func(e *cborEnc) {
		root(e, func(e *cborEnc) {
			e.mapHead(1)
			e.text("a")
			e.mapHead(4)
			e.text("dtype")
			e.text("uint8")
			e.text("shape")
			e.arrayHead(1)
			e.b = append(e.b, 0x20) // -1
			e.text("format")
			e.text("dense")
			e.text("components")
			e.mapHead(0)
		})
	}), ErrCorrupt, `tensor "a"`)
	// Byte string where text is required, and a tag.
	wantErr(t, build(func(e *cborEnc) {
		e.mapHead(1)
		e.b = append(e.b, 0x47)
		e.b = append(e.b, "version"...)
	}), ErrCorrupt)
	wantErr(t, build(func(e *cborEnc) { e.b = append(e.b, 0xd9, 0xd9, 0xf7, 0xa0) }), ErrCorrupt)
	// Deeply nested input.
	wantErr(t, build(func(e *cborEnc) {
		for i := 0; i < 100; i++ {
			e.arrayHead(1)
		}
		e.uint(0)
	}), ErrCorrupt)
	// A map header claiming 2^32 pairs in a tiny manifest.
	wantErr(t, build(func(e *cborEnc) { e.b = append(e.b, 0xba, 0xff, 0xff, 0xff, 0xff) }), ErrCorrupt)
}

func TestEncodeRejects(t *testing.T) {
	vals := func(attrs map[string]string) *snapshot.Array {
		return &snapshot.Array{Name: "v", DType: snapshot.F32, Shape: []int64{1}, Data: snapshot.Bytes(f32le(1)), Attrs: attrs}
	}
	sp := func(role string) map[string]string {
		return map[string]string{"ztensor.name": "c", "ztensor.format": "sparse_csr", "ztensor.role": role, "ztensor.dtype": "float32", "ztensor.shape": "[2,2]"}
	}
	cases := map[string]*snapshot.Snapshot{
		"short data":         {Arrays: []*snapshot.Array{{Name: "a", DType: snapshot.F32, Shape: []int64{2}, Data: snapshot.Bytes{1}}}},
		"missing indptr":     {Arrays: []*snapshot.Array{vals(sp("values")), {Name: "i", DType: snapshot.U64, Shape: []int64{1}, Data: snapshot.Bytes(u64le(0)), Attrs: sp("indices")}}},
		"unknown order name": {Attrs: map[string]string{"ztensor.order": `["nope"]`}, Arrays: []*snapshot.Array{vals(nil)}},
		"bad version":        {Attrs: map[string]string{"ztensor.version": "3.0"}},
		"unknown ztensor":    {Attrs: map[string]string{"ztensor.colour": "red"}},
		"bad encoding":       {Arrays: []*snapshot.Array{vals(map[string]string{"ztensor.encoding": "gzip"})}},
		"dense with shape":   {Arrays: []*snapshot.Array{vals(map[string]string{"ztensor.shape": "[1]"})}},
		"duplicate tensor":   {Arrays: []*snapshot.Array{vals(nil), {Name: "w", DType: snapshot.U8, Shape: []int64{}, Data: snapshot.Bytes{1}, Attrs: map[string]string{"ztensor.name": "v"}}}},
	}
	for name, s := range cases {
		err := Codec{}.Encode(context.Background(), io.Discard, s, formats.EncodeOptions{})
		if !errors.Is(err, ErrInvalidSnapshot) {
			t.Errorf("%s: %v, want ErrInvalidSnapshot", name, err)
		}
	}
}

func TestContextCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := readFixture(t, "dense_dtypes.zt")
	if _, err := (Codec{}).Decode(ctx, snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("decode: %v", err)
	}
	s, err := decodeBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := (Codec{}).Encode(ctx, io.Discard, s, formats.EncodeOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("encode: %v", err)
	}
}

// TestDecompressionBombs: A ~100 KB file whose zstd
// component inflates to 3 GiB is refused by the per-file decode budget
// (formats.Budget) before its output buffer is allocated, whether the
// frame declares its size or not; the error wraps formats.ErrLimit.
func TestDecompressionBombs(t *testing.T) {
	const huge = 3 << 30
	for _, declare := range []bool{false, true} {
		bomb := testutil.ZstdBomb(huge, 0, declare)
		f := oneTensor(bomb, []uint64{huge}, "zstd")
		if len(f) > 128<<10 {
			t.Fatalf("bomb file is %d bytes", len(f))
		}
		_, err := decodeBytes(f)
		if !errors.Is(err, ErrLimit) || !errors.Is(err, formats.ErrLimit) {
			t.Fatalf("declare=%v: %v, want ErrLimit", declare, err)
		}
		if !strings.Contains(err.Error(), "decode budget") || !strings.Contains(err.Error(), `tensor "t"`) {
			t.Errorf("declare=%v: error %q does not name the budget and the tensor", declare, err)
		}
	}
	// A shape that allows the bytes (extension format: no declared size)
	// still cannot decode past the budget; the budget is per file, set by
	// DecodeOptions.MaxDecoded.
	blobs := make([]byte, 64)
	copy(blobs, Magic)
	bomb := testutil.ZstdBomb(64<<20, 7, false)
	blobs = append(blobs, bomb...)
	m := &manifest{Version: "1.0", Generator: "test", Attributes: map[string]string{}, Tensors: map[string]*tensorEntry{
		"x": {DType: "uint8", Shape: []uint64{4}, Format: "x-custom", Components: map[string]componentEntry{
			"blob": {Offset: 64, Length: uint64(len(bomb)), Encoding: "zstd"}}}}}
	f := assemble(blobs, m.marshal())
	_, err := Codec{}.Decode(context.Background(), snapshot.Bytes(f), int64(len(f)), formats.DecodeOptions{MaxDecoded: 1 << 20})
	if !errors.Is(err, formats.ErrLimit) {
		t.Fatalf("extension component: %v, want ErrLimit", err)
	}
	if _, err := (Codec{}).Decode(context.Background(), snapshot.Bytes(f), int64(len(f)), formats.DecodeOptions{MaxDecoded: 65 << 20}); err != nil {
		t.Fatalf("the same file within a 65 MiB budget: %v", err)
	}
}

// TestTensorCountDisagreement: the same class in
// zTensor. The manifest is CBOR, which states every count; a tensors map
// whose count is lowered leaves bytes the decoder refuses (extraneous
// data or a type error), so no tensor disappears silently.
func TestTensorCountDisagreement(t *testing.T) {
	for _, name := range []string{"dense_dtypes.zt", "sparse_csr_coo.zt", "zstd_crc32c.zt"} {
		b := readFixture(t, name)
		blobs, mb := splitFile(t, b)
		i := bytes.Index(mb, []byte("tensors"))
		if i < 0 || mb[i+7]&0xe0 != 0xa0 || mb[i+7]&0x1f == 0 || mb[i+7]&0x1f > 23 {
			t.Fatalf("%s: no small tensors map header", name)
		}
		forged := append([]byte(nil), mb...)
		forged[i+7]--
		if s, err := decodeBytes(assemble(blobs, forged)); err == nil {
			t.Errorf("%s: tensors count lowered: decoded %d arrays", name, len(s.Arrays))
		} else if !errors.Is(err, formats.ErrCorrupt) {
			t.Errorf("%s: %v does not wrap formats.ErrCorrupt", name, err)
		}
	}
}
