// Package ztensor reads and writes zTensor v1.0 files (".zt"), the format
// of pie-project/ztensor 1.0.x: a flat list of 64-byte-aligned binary
// components followed by a CBOR manifest that assembles them into logical
// tensors (dense, sparse CSR, sparse COO, or extension layouts).
//
// Use New() or the zero Codec; Codec's fields only override limits.
//
// Sources: the seed spec (shared/seeds/ztensor-1.0.md) and what the
// reference implementation really does (shared/spec/FORMATS-notes.md §1,
// §5). Where they differ this package follows the reference, and every
// deviation is listed under "Decisions" below.
//
// # Byte layout
//
//	offset          size           content
//	0               8              magic "ZTEN1000"
//	8 ...                          component blobs; before each blob, zero
//	                               padding up to the next multiple of 64;
//	                               a zero-length blob takes no bytes
//	M               manifest_size  CBOR manifest, directly after the last
//	                               blob (M is not aligned; M = 8 when there
//	                               are no blobs)
//	size-8          8              manifest_size, uint64 little-endian
//
//	+----------+---------+--------+---------+--------+-----+----------+------+
//	| ZTEN1000 | pad→64  | blob A | pad→64  | blob B | ... | manifest | size |
//	+----------+---------+--------+---------+--------+-----+----------+------+
//	0          8         64                                M      size-8   size
//
// The manifest (all maps definite-length, all keys text strings, all
// numbers unsigned integers in their shortest form, no tags):
//
//	{ "version": "1.0",
//	  "generator": "zTensor-Rust v0.1.0",
//	  "attributes": { text: text, ... },          // sorted by raw key bytes
//	  "tensors": {                                 // sorted by raw key bytes
//	    name: { "dtype": "float32", "shape": [2, 3], "format": "dense",
//	            "components": {                    // sorted by raw key bytes
//	              role: { "offset": u, "length": u,
//	                      "encoding": "zstd",     // only when compressed
//	                      "digest": "crc32c:0x1904796B" } } } } }
//
// Formats and their components (blob order in brackets):
//
//	dense       [data]                     product(shape) × dtype size bytes
//	sparse_csr  [values, indices, indptr]  values: nnz × dtype; indices:
//	                                       nnz u64 column indices; indptr:
//	                                       rows+1 u64 row pointers
//	sparse_coo  [values, coords]           coords: ndim × nnz u64,
//	                                       dimension-major (coordinate d of
//	                                       non-zero i at d·nnz + i)
//	other       any roles                  extension layouts, opaque bytes
//
// dtypes: float64 float32 float16 bfloat16 int64 int32 int16 int8 uint64
// uint32 uint16 uint8 bool, little-endian, C order. A shape [] is a scalar
// (one element).
//
// # What the reader accepts
//
// In this order: the magic (ZTEN0001 = v0.1 and 89 5A 54 32 0D 0A 1A 0A =
// v2 fail with ErrUnsupportedVersion, anything else with ErrNotZTensor);
// file size ≥ 16; the last 8 bytes — if they are "ZTEN1000" the file is
// zTensor 1.1 or later (those versions end with size + a second magic) and
// fails with ErrUnsupportedVersion; manifest_size ≤ size − 16 (equality is
// legal: the reference's empty file is 80 bytes with a 64-byte manifest)
// and ≤ Codec.MaxManifestSize (default 64 MiB, ErrLimit) — only then is it
// allocated; the manifest must be exactly one CBOR item.
//
// CBOR decoding uses fxamacker/cbor/v2 with: duplicate map keys rejected,
// case-sensitive keys, tags rejected, byte strings where text is expected
// rejected, invalid UTF-8 rejected, nesting ≤ 16; definite and indefinite
// lengths accepted; unknown keys ignored (as the reference does). The
// library checks well-formedness (every declared count backed by bytes)
// before decoding, so counts cannot force allocations beyond the manifest
// size. Required: root keys version, generator, attributes, tensors; tensor
// keys dtype, shape, format, components; component keys offset, length
// (a null value counts as missing). A root with "objects" but no "tensors"
// is a 1.1+ manifest: ErrUnsupportedVersion. version must be
// MAJOR[.MINOR[.PATCH]] with MAJOR 1 (seed §6.1: a higher minor is read as
// 1.0); otherwise ErrUnsupportedVersion. encoding: absent, "raw" or "zstd".
//
// Per tensor (ErrCorrupt unless noted): known dtype; every dimension
// ≤ 2^63−1 and product × element size without overflow; for dense, CSR and
// COO exactly the roles listed above; extension formats at least one
// component; CSR rank 2. Per component: offset a multiple of 64 (a hard
// error, as in the reference reader; the seed only says "warn"), and the
// range [offset, offset+length) inside the blob region [8, M) — stricter
// than the spec's offset+length ≤ size, computed without overflow; a raw
// dense component's length equals product(shape) × dtype size. All of this
// is checked before any component byte is read.
//
// Then, per component: the digest is verified over the stored bytes
// (ErrChecksum naming tensor, component and offset); zstd data is
// decompressed; the sparse counts are checked (values a whole number of
// elements, nnz ≤ product(shape); CSR indices = nnz and indptr = rows+1;
// COO coords = ndim × nnz). Index values themselves (sortedness, bounds)
// are not checked: the data are carried, not interpreted.
//
// Digests: "crc32c:0x" + 1–8 hex digits (CRC-32C Castagnoli) and "sha256:"
// + 64 hex digits, hex in either case. Both are verified — the reference
// verifies only crc32c and silently skips everything else. For a zstd
// component the sha256 may cover the stored or the decoded bytes (the seed
// does not say which); either match is accepted. Any other digest string
// (unknown algorithm, crc32c without "0x", bad hex) is ErrCorrupt: a digest
// this reader cannot verify is refused, not skipped.
//
// zstd: decoded with klauspost/compress's streaming decoder, which, unlike
// one-shot decoders, does not need Frame_Content_Size (the reference's
// frames lack it). Output is capped: a dense component must decode to
// exactly product(shape) × dtype size bytes, CSR/COO values to at most that,
// indices to at most product(shape) × 8, indptr to exactly (rows+1) × 8,
// coords to at most ndim × product(shape) × 8; extension components have no
// declared size. All are further capped by the file's one decode budget
// (formats.Budget: DecodeOptions.MaxDecoded, else Codec.MaxDecompressed,
// else formats.DefaultMaxDecoded of the file size — 256 × the size, at
// least 256 MiB, at most 16 GiB; ErrLimit wrapping formats.ErrLimit). An
// exact size is charged before anything is decoded, and a frame whose
// header declares more content than allowed is refused before decoding;
// otherwise decoding stops one byte past the cap, so a bomb costs at most
// its cap; the output buffer grows with the data actually produced, never
// by the declared size. A frame may declare a window (which the decoder
// allocates in full) of at most max(8 MiB, min(cap, 128 MiB)) — ErrLimit
// otherwise. Decompression happens during Decode; the arrays hold heap
// bytes.
//
// Raw components are returned as snapshot.Section of the reader: no copy
// when it is memory-backed (snapshot.Bytes, snapshot.Mapping).
//
// Errors are *Error values (file, tensor, component, offset, check) that
// wrap ErrNotZTensor, ErrUnsupportedVersion, ErrCorrupt, ErrChecksum,
// ErrLimit or the reader's I/O error. When ctx is cancelled the error
// satisfies errors.Is(err, ctx.Err()).
//
// # Mapping to snapshots
//
// Snapshot.Attrs (always set by Decode):
//
//	ztensor.version     manifest version, e.g. "1.0"
//	ztensor.generator   manifest generator
//	ztensor.attributes  the attributes map as canonical JSON ({} if empty)
//	ztensor.order       JSON list of tensor names in blob (writing) order
//
// A dense tensor is one array with the tensor's dtype and shape whose data
// are the decoded bytes. Every component of any other format is its own
// array, named "<tensor>.<role>":
//
//	sparse_csr  values [nnz] dtype; indices [nnz] u64; indptr [rows+1] u64
//	sparse_coo  values [nnz] dtype; coords [ndim, nnz] u64
//	other       each role: u8 [length]
//
// Array.Attrs:
//
//	ztensor.name      original tensor name (dense: only when the array name
//	                  differs from it; other formats: always)
//	ztensor.format    format, ztensor.role its role, ztensor.dtype the
//	                  tensor's zTensor dtype name, ztensor.shape the dense
//	                  shape as a JSON list — on non-dense component arrays
//	ztensor.encoding  "zstd" when the component was compressed
//	ztensor.digest    "crc32c" or "sha256" when the component had a digest
//
// Array names: a dense tensor whose name matches WTXT's
// ^[A-Za-z0-9_.:/-]{1,1024}$ (and is not __snapd_attrs__) keeps it. Then,
// in raw-byte order of tensor names, the others get the name with every
// other byte replaced by '_' (dense) or that + "." + role (components),
// truncated, "_" if empty; a name already taken gets the first free suffix
// "-2", "-3", .... The result depends on the manifest only.
//
// # What the writer writes
//
// Encode lays the file out exactly like the reference writer: magic, then
// for each tensor and each of its components (blob order above; extension
// formats in role order) zero padding to 64 and the bytes, then the
// manifest and its size. Tensors come in ztensor.order order (a listed
// name no array holds is ErrInvalidSnapshot), then the rest in snapshot
// order. The manifest is emitted by this package's own small CBOR encoder:
// fxamacker/cbor's encoder cannot reproduce the reference bytes — its map
// sort modes implement only RFC 7049 length-first and RFC 8949 encoded-key
// order (both put "m.u8" before "b.f16"; the reference sorts by raw key
// bytes), and its unsorted mode is documented as arbitrary order for struct
// fields and map keys, whereas the reference emits struct fields in
// declaration order. The emitter writes definite lengths, shortest
// integers and text strings only.
//
// Defaults when the snapshot does not say otherwise: version "1.0",
// generator "zTensor-Rust v0.1.0" (the reference writer's constants, so
// the manifest is byte-identical to the reference's), attributes {}, every
// array a dense raw tensor. zstd components are compressed with
// klauspost/compress at its default level (≈ zstd level 3, the
// reference's), single-threaded, through its streaming encoder, without a
// content checksum; the library adds Frame_Content_Size when a component
// fits in one block (the reference's frames never carry it; both kinds
// decode with the reference's streaming reader and with this one). Output
// is deterministic for a given library version but not byte-identical to
// the reference's zstd. Digests are recomputed over the stored bytes:
// crc32c as "crc32c:0x" + 8 upper-case hex digits (the reference's form),
// sha256 as "sha256:" + 64 lower-case hex digits.
//
// A file with only raw components round-trips byte for byte (decode →
// WTXT → encode); with zstd, every tensor's bytes, dtype, shape, layout,
// roles, encodings, digest algorithms, attributes, generator, version and
// order round-trip, while compressed bytes, their lengths/offsets and digest
// values follow the new compression.
//
// Lossless-ness: every snapshot dtype is a zTensor dtype. Snapshot or array
// attributes of other formats have no place in the file: Encode fails with
// formats.ErrLossy naming them, or drops them with opts.Lossy. Names that
// are not valid UTF-8 (CBOR text must be) are ErrLossy, or replaced with
// U+FFFD under opts.Lossy. Inconsistent ztensor.* attributes (unknown
// keys, missing components, counts that Decode would refuse, data size ≠
// shape × dtype) are ErrInvalidSnapshot, so Encode never writes a file that
// Decode refuses.
//
// # Decisions where the specs are silent or disagree
//
//   - Digests the reader cannot verify are errors (the reference ignores
//     them); sha256 coverage: stored or decoded bytes accepted, stored
//     written.
//   - Component ranges must lie between the magic and the manifest; padding
//     bytes are not checked for zero (the reference writer leaves the blob
//     of a replaced tensor unreferenced in the file, so gaps may hold data).
//   - CSR/COO counts are enforced (the reference checks only COO) and nnz
//     may not exceed the dense element count; CSR must have rank 2.
//   - A tensor with no components (possible only in an extension format)
//     cannot be represented as arrays and is refused.
//   - An explicit "raw" encoding is read as absent and written as absent;
//     non-canonical manifests (other key orders, indefinite lengths, unknown
//     keys) are read and re-written canonically, unknown keys dropped.
//   - The tensor order is recovered from the component offsets (first
//     offset, then last end, then name), which reproduces the writer's
//     order for every file the reference writes.
package ztensor
