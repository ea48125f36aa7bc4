// Package aero reads and writes AERO 0.1 (.aero) model containers, the
// format of bhuvanprakash/Aero, byte-compatible with its reference writers
// (commits f1d395d and 630e8a4) and readers. Sources: the seed
// (shared/seeds/aero-0.1.md) and what the references really do
// (shared/spec/FORMATS-notes.md §3, §5).
//
// # Byte layout (all integers little-endian)
//
//	offset 0     ┌───────────────────────────────────────────────────────────┐
//	             │ header, 96 B                                              │
//	             │   0 "AERO"  4 u16 major=0  6 u16 minor=1  8 u32 hsize=96  │
//	             │  12 u64 toc_offset  20 u64 toc_length (16 + 80·N)         │
//	             │  28 u64 string_table_offset  36 u64 string_table_length   │
//	             │  44 u64 file_flags=0  52 [16] uuid  68 [28] reserved      │
//	toc_offset   ├───────────────────────────────────────────────────────────┤
//	             │ TOC header 16 B: u32 entry_count N, u32 0, u64 0          │
//	             │ N × entry 80 B:                                           │
//	             │   0 fourcc  4 u32 flags  8 u64 offset  16 u64 length      │
//	             │  24 u64 ulen  32 u32 name_off  36 u32 name_len  40 u64 0  │
//	             │  48 [32] BLAKE3-256 of the uncompressed payload           │
//	align8       ├───────────────────────────────────────────────────────────┤
//	             │ string table: name\0 name\0 … zero-padded to 8            │
//	align16      ├───────────────────────────────────────────────────────────┤  payloads_start
//	             │ payloads in TOC order, each at align16(end of previous    │
//	             │ [or of its reservation]); gaps zero; file ends at the     │
//	             │ end of the last payload                                   │
//	             └───────────────────────────────────────────────────────────┘
//
//	flags: 0x1 COMPRESSED_ZSTD  0x2 MMAP_CRITICAL  0x4 IS_INDEX  0x8 IS_OPTIONAL
//
//	fourcc flags name                   payload
//	IHSH   0x8   control.integrity      msgpack {algo:"blake3-256", covered_ranges:[[0,payloads_start]],
//	                                    digest:bin32} + zeros to 256 B; digest = BLAKE3 of [0,payloads_start)
//	                                    with every TOC hash field zeroed; TOC entry 0
//	MJSN   0x0   meta.json              canonical JSON (sorted keys, ASCII escapes); quant_descriptors live here
//	MMSG   0x1   manifest               msgpack {format:{name,version}, model:{name,architecture},
//	                                    chunks:[{role,fourcc,toc_index[,shard_id]}],
//	                                    shards:[{shard_id,toc_index,size_bytes,tensor_count,mmap_critical}]}
//	TIDX   0x5   tensors                msgpack {tensors:[{name,dtype,shape,shard_id,data_off,data_len,flags,
//	                                    <extras: quant_id, quant_params…>, [hash_b3: 64 lower-case hex]}]}
//	WTSH   0x2   weights.shard<N>       raw tensor bytes packed back to back, no alignment, never compressed
//	PHSH   0x8   weights.shard<N>.phsh  msgpack {shard_name, page_size, digests:[bin32 per page]};
//	                                    the model writer reserves 80+len(name)+32·pages bytes for it
//
//	dtype u16: 0 f16 1 f32 2 bf16 3 f64 4 i8 5 u8 6 i16 7 u16 8 i32 9 u32
//	           10 i64 11 u64 12 bool 0x8000 packed (quantized codec blocks)
//
// msgpack is written like msgpack-python with use_bin_type=True: smallest
// integer forms, the unsigned family for every non-negative value, str8 for
// 32–255-byte text, bin for bytes, float64, map keys in the order above. The
// vmihailenco/msgpack/v5 low-level Encoder (EncodeUint/EncodeInt/
// EncodeString/EncodeBytes/EncodeArrayLen/EncodeMapLen) produces exactly
// these bytes; key order comes from our own ordered value type (mval), never
// from Go maps. Reading uses the same library's low-level Decoder, with every
// declared length checked against the remaining bytes first.
//
// # Reader
//
// Fatal (an *Error, nothing else is read): size < 96, magic, version ≠ 0.1,
// header_size ≠ 96, file_flags ≠ 0, TOC outside the file or before byte 96,
// toc_length ≠ 16 + 80·N, N > MAX_ENTRY_COUNT (1,000,000), string table >
// MAX_STRING_TABLE (512 MiB) or outside the file or overlapping header/TOC.
// These limits are checked before anything sized by them is allocated.
//
// Then every problem is collected (a *CorruptError listing each *Error with
// the check, TOC entry, tensor and file offset; errors.Is works with
// ErrCorrupt, ErrChecksum, ErrTruncated, ErrLimit) and no snapshot is
// returned if there is any:
//   - per TOC entry: fourcc printable ASCII; name inside the string table,
//     non-empty, UTF-8, no NUL; payload inside the file; uncompressed ⇒
//     length == ulen; ulen ≤ MAX_METADATA_ULEN (2 GiB) for every chunk but
//     WTSH; WTSH and IHSH never compressed; non-empty payloads must not
//     overlap each other or the header/TOC/string table;
//   - zstd: exactly ulen bytes required (frames without a content size are
//     accepted; a declared content size is checked before decoding; window
//     ≤ max(8 MiB, min(ulen, 128 MiB))); ulen is charged to the file's one
//     decode budget (formats.Budget: DecodeOptions.MaxDecoded, default
//     formats.DefaultMaxDecoded of the file size) before the output buffer
//     is allocated, also for opaque chunks that are only hashed (ErrLimit);
//   - cross-checks: toc_length must equal 16 + 80·entry_count; every byte
//     of the file belongs to the header, the TOC, the string table or a
//     chunk, except zero padding between them, and the file ends where the
//     last of them ends (a forged entry_count leaves data uncovered); the
//     MMSG manifest's chunks[].toc_index/fourcc and shards[].toc_index/
//     shard_id/size_bytes/tensor_count must agree with the TOC and TIDX;
//   - BLAKE3 of every chunk's uncompressed bytes against the TOC (including
//     empty chunks, whose hash is BLAKE3("") = af1349b9…);
//   - IHSH (first IHSH entry): algo, 32-byte digest, covered_ranges[0] =
//     [0, end ≤ size), digest over [0,end) with all TOC hash fields zeroed;
//   - PHSH (the PHSH named <shard>.phsh): shard_name, page_size > 0,
//     ceil(len/page_size) 32-byte digests, each page verified in the same
//     pass as the shard's BLAKE3;
//   - TIDX (first TIDX entry): exactly one msgpack object, root map with a
//     "tensors" array; entries need name (UTF-8), dtype (≤ 0xFFFF), shape
//     (rank ≤ 32), shard_id, data_off, data_len; flags optional; duplicate keys
//     or tensor names, names > 4096 bytes rejected; the shard is the WTSH named
//     exactly "weights.shard"+decimal(shard_id) (MMSG is not consulted);
//     data_off + data_len ≤ shard length; hash_b3, when present and
//     non-empty, must equal the hex BLAKE3 of the tensor bytes;
//   - MJSN must be UTF-8 JSON; MMSG must be one msgpack object (ext types
//     are refused everywhere);
//   - WTSH shards present but no TIDX is reported (weights nobody can find).
//
// Stricter than the references (which check none of these): overlap, fourcc
// and name checks, zero-length hash check, WTSH without TIDX. Reserved
// bytes are not checked (like the references). A file of the buggy
// reference writers (FORMATS-notes §3.10) is therefore always rejected with
// the exact reasons; nothing is recovered from orphaned payloads.
//
// Tensors become snapshot arrays in TIDX order. Uncompressed data is a
// snapshot.Section of the input (zero copy when it is memory-backed).
// dtypes 0–12 whose data_len equals shape × element size map to the
// snapshot dtype; anything else (0x8000 packed/quantized, unknown codes,
// inconsistent lengths) is carried as u8 [data_len] with the original code
// and shape in Attrs. Hashing runs shards and tensors in parallel
// (GOMAXPROCS); files with hash_b3 read tensor bytes twice (shard hash and
// tensor hash).
//
// # Attributes (what a lossless round trip carries)
//
// Snapshot.Attrs:
//
//	aero.uuid    32 hex digits
//	aero.order   JSON list of array names in TIDX order
//	aero.chunks  JSON list, one object per TOC entry in order: fourcc, name,
//	             flags; WTSH "size"; PHSH "page_size"; "reserve" when the next
//	             payload starts later than alignment requires (PHSH slack);
//	             "data" (base64 of the uncompressed bytes) for chunks the
//	             reader does not interpret (unknown fourccs, second
//	             IHSH/MJSN/MMSG/TIDX, WTSH not named weights.shard<N>, PHSH
//	             without its shard), up to 16 MiB in total; beyond that they
//	             are listed in aero.dropped and Encode fails with
//	             formats.ErrLossy unless EncodeOptions.Lossy
//	aero.mjsn    the MJSN text as stored
//	aero.mmsg    the MMSG object as typed JSON (below)
//	aero.tidx    typed JSON map of TIDX root keys other than "tensors"
//
// Array.Attrs: aero.shard, aero.offset (shard_id, data_off); aero.name (the
// original name when it is not a valid WTXT name: disallowed bytes become
// '_', cut to 1000 bytes, plus "-h" and 8 hex digits of its BLAKE3, plus
// "-<n>" on collision); aero.dtype and aero.shape (JSON) when carried as u8;
// aero.flags when non-zero; aero.extra (typed JSON map of extra TIDX keys in
// order, e.g. {"quant_id":0,"quant_params":{"ggml_type":2}}); aero.hash_b3
// (the stored value) when the entry had one.
//
// Typed JSON keeps msgpack types: integers as JSON integers, floats always
// with '.' or an exponent ({"$float":"NaN"|"+Inf"|"-Inf"} for non-finite),
// {"$bin":"<base64>"} for bin, {"$map":[[k,v],…]} for maps whose keys are
// not unique strings or start with '$'; objects keep msgpack key order.
//
// # Writer
//
// A snapshot carrying aero.chunks is written with that chunk list, flags,
// uuid, MJSN text, MMSG and TIDX extras, tensor order, shard ids and offsets
// and PHSH page sizes and reservations (a reservation more than 16 MiB
// beyond the payload is ignored). Re-derived on every write: all
// BLAKE3 values (TOC, hash_b3 — written when aero.hash_b3 was present, ""
// kept as "" —, IHSH digest, PHSH digests), TIDX name/dtype/shape/shard_id/
// data_off/data_len/flags (canonical key order, extras after flags, hash_b3
// last), the MMSG "chunks" and "shards" values (recomputed from the chunks
// written, at their original key positions), zstd frames (klauspost level
// ≈6, content size, no checksum; bytes differ from libzstd's), header and
// offsets (toc at 96, toc_length exactly 16+80·N, payloads at align16).
// Non-canonical msgpack (e.g. d3 for small numbers, float32) is
// normalised. Not preserved: shard bytes no tensor covers and gaps (written
// as zeros), trailing bytes after the last chunk, non-canonical placement
// (a first payload later than payloads_start, payloads out of TOC order).
// If the recorded layout cannot be honoured (a tensor without layout, a
// missing shard, overlapping tensors, more than 16 MiB of zero filler in a
// shard) shards are re-assigned like the model
// writer: greedily in tensor order with a 2 GiB cap, the WTSH(+PHSH) chunks
// appended after the other chunks, PHSH reserving 80+len(name)+32·pages.
// Shards are read twice (hash pass, write pass), never held in memory.
//
// Attributes outside the "aero." namespace (other formats') have no place
// in an AERO file: Encode fails with formats.ErrLossy naming the array and
// key, unless EncodeOptions.Lossy (then they are dropped).
//
// A snapshot without AERO attrs gets the model writer's defaults: IHSH,
// MJSN {"architecture":"unknown","model_name":"snapd"}, MMSG with the same
// model, TIDX with hash_b3 for every tensor, greedy 2 GiB shards, no PHSH,
// and a uuid derived from the chunk hashes (deterministic output instead of
// the reference's random uuid). Unlike reference bug §3.10.2, tensor hashes
// are known before the layout is fixed.
//
// Tests reproduce every valid fixture byte for byte from its decoded
// snapshot after a WTXT-like trip (given the fixture's own zstd frames).
package aero
