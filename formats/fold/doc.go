// Package fold reads and writes FOLD 1.2 containers (.fold and .mind), the
// checkpoint format of Mindfolds-labs/pyfolds, byte-compatible with both
// reference commits described in spec/FORMATS-notes.md section 2 (the
// "seed-era" 130b9df and the "later" e45e9eb writer/reader).
//
// # Byte layout
//
// All integers are big-endian; there is no alignment or padding anywhere.
//
//	offset 0   +--------------------------------------------------+
//	           | magic "FOLDv1\0\0" (8) | header_len u32 = 28       |
//	           | index_off u64          | index_len u64             |
//	offset 28  +--------------------------------------------------+
//	           | chunk 0: header (32) | stored bytes | ECC bytes    |
//	           | chunk 1: ...                                      |
//	index_off  +--------------------------------------------------+
//	           | index JSON (index_len bytes, UTF-8)              |
//	EOF        +--------------------------------------------------+
//
//	chunk header (32 bytes)
//	  0  ctype      4 ASCII bytes ("JSON", "NPZ0", "TSAV", "STEN", ...)
//	  4  flags      u32  1 = zstd, anything else = stored as is
//	  8  uncomp_len u64  payload length before compression
//	 16  comp_len   u64  stored length
//	 24  crc32c     u32  CRC-32C (Castagnoli) of the stored bytes
//	 28  ecc_len    u32  ECC bytes following the stored bytes
//
// The index is {"format":"fold","version":"1.2.0","created_at_unix":F,
// "metadata":{...,"chunk_hashes":{name:hash},"manifest_hash":hash},
// "chunks":[{"name","ctype","flags","offset","header_len","comp_len",
// "uncomp_len","crc32c","sha256","ecc_algo","ecc_len"}, ...]}, written
// with Python json.dumps rules (insertion order, compact, raw UTF-8,
// Python float repr; see json.go). manifest_hash is SHA-256 of the
// canonical JSON of metadata without manifest_hash (keys sorted, ASCII
// only, Python float repr). Hash strings are 64 lower-case hex digits
// (seed era) or "sha256:"+hex (later commit); "hmac-sha256:"+hex appears
// when the later writer had PYFOLDS_INTEGRITY_KEY set.
//
// ECC "rs(N)" (N = 16, 32, 64 for protection low/med/high): the stored
// bytes are split into blocks of 255-N bytes (the last may be shorter);
// the ECC bytes are the N Reed–Solomon parity bytes of each block,
// concatenated (package rs: GF(2^8), 0x11d, α=2, first root 0, i.e. the
// reedsolo codec). ecc_len = N·ceil(comp_len/(255-N)).
//
// # What the reader accepts and checks
//
//   - magic, header_len == 28, index_off >= 28, index_len <= MaxIndexSize
//     (100 MiB), index inside the file; the index must be UTF-8 JSON (NaN
//     and ±Infinity accepted as Python does) holding an object with a
//     chunks list; "format", when present, must be "fold". The chunks
//     must fill [28, index_off) back to back (in offset order) and the
//     file must end with the index, as both reference writers lay files
//     out: a chunk dropped from the index, or bytes added, is refused.
//     metadata.chunk_hashes may only name chunks the index lists.
//   - every chunk: header inside the file; uncomp_len, comp_len, ecc_len
//     <= MaxChunkSize (2 GiB, the later reference's limit) and stored+ECC
//     bytes inside the file, all checked before anything is allocated.
//     ctype, flags, lengths and crc come from the chunk header; name,
//     offset, sha256 and ecc_algo from the index (as the references do).
//     The header is covered by no hash, so every field the index repeats
//     (ctype, flags, header_len, comp_len, uncomp_len, crc32c, ecc_len)
//     must equal the header's (ErrFormat otherwise: one flipped header bit
//     must not change how a chunk is read). Chunks must not overlap the
//     file header, the index or each other, and a chunk's stored+ECC bytes
//     must end before the next chunk (or the index) starts.
//   - one decode budget per file (formats.Budget, DecodeOptions.MaxDecoded;
//     default formats.DefaultMaxDecoded of the file size): zstd output,
//     inflated zip members, ECC-corrected copies, byte-swapped, transposed
//     and gathered (strided-view) tensors and payload skeletons are charged
//     before they are allocated; ErrLimit (wrapping formats.ErrLimit) when
//     it is exhausted.
//   - integrity, in this order: crc32c and the index sha256 of the stored
//     bytes. Only when one of them fails and the chunk has usable rs(N)
//     ECC is the payload corrected block by block (syndromes,
//     Berlekamp–Massey, Chien, Forney; up to N/2 byte errors per block),
//     and then both checks must pass. Checking first and correcting only on
//     failure is a deliberate difference from both reference readers: it
//     reads the seed-era files whose multi-block ECC bytes are not parity
//     (ecc_rs32_spec_era.mind) and can never "correct" intact data with
//     bad ECC. When the data is intact the ECC is still compared with the
//     data and any inconsistent block is reported as a diagnostic
//     (DecodeOptions.Diagnostic), as are corrections; diagnostics are never
//     stored in the snapshot, so X -> WTXT -> X -> WTXT is a fixed point.
//   - metadata.chunk_hashes[name] (when present) is checked against the
//     last chunk of that name (the writer keeps the last); manifest_hash
//     (when present) is recomputed. Mismatches are errors (ErrChecksum),
//     as in the later reference. Both hash string forms are accepted
//     (hex case-insensitive); hmac-sha256 values cannot be checked without
//     the key and are accepted unverified. Encrypted chunks
//     ("encrypted":true) fail with ErrUnsupported.
//   - flags == 1: zstd, decompressed with the output capped at uncomp_len
//     and a window limit of MaxZstdWindow; the result must be exactly
//     uncomp_len bytes (frames without a content size are accepted).
//     Otherwise uncomp_len must equal comp_len.
//
// # Snapshot produced by Decode
//
// FOLD has no native tensors; tensors are found inside chunk payloads:
//
//   - NPZ0 (numpy .npz zip, members STORED or DEFLATED): each *.npy member
//     becomes "<chunk>/<member without .npy>". descr <f2 <f4 <f8 <i1..<i8
//     <u1..<u8 |b1 (also > big-endian and = taken as little-endian) map to
//     snapshot dtypes; big-endian data is byte-swapped and Fortran-order
//     data transposed to C order. .npy members using a zip method other
//     than STORED/DEFLATED, and members not named *.npy, stay opaque in the
//     payload array. Every other descr (complex, strings,
//     objects, datetimes, structured) is NOT an error: the member's data
//     bytes become a u8 array with fold.npy.descr and fold.npy.shape
//     attributes. Malformed .npy headers or short data are errors.
//   - STEN (safetensors bytes): each tensor becomes "<chunk>/<name>";
//     header <= 64 MiB, <= 1,000,000 tensors, offsets and sizes checked.
//     Dtypes without a snapshot counterpart (F8_*, C64, ...) become u8
//     with fold.sten.dtype / fold.sten.shape attributes.
//   - TSAV (torch.save zip): data.pkl is unpickled by formats/pickle, the
//     bounded allowlist machine (every object it builds charged to the
//     file's decode budget, work linear in the pickle's length, the
//     context checked), with globals outside its short torch allowlist
//     kept as placeholders; tensors (_rebuild_tensor_v2, Parameters,
//     _rebuild_from_type_v2) found by walking dicts, OrderedDicts, lists,
//     tuples and placeholder objects become "<chunk>/<dotted.key.path>"
//     ("tensor" for a bare tensor), reading the storages
//     <prefix>/data/<key> (strided views are gathered; a "big" byteorder
//     member is honoured). Storage types without a snapshot dtype, strided
//     views larger than the chunk, and payloads that are not a readable
//     torch zip or pickle are not errors: they stay opaque inside the
//     payload array and the chunk's record carries a note. A readable
//     archive with broken storages (missing member, zip CRC mismatch, a
//     view outside its storage) is an error, and so is a pickle that
//     exceeds the decode budget or its step bound (ErrLimit).
//   - every chunk also yields the u8 array "<chunk>": its uncompressed
//     payload with the byte ranges of the tensors that are stored verbatim
//     (STORED zip members, safetensors data) cut out. JSON and unknown
//     chunk types are just this array, byte for byte.
//
// Names are mapped to [A-Za-z0-9_.:/-] (others become '_') and made unique
// with ".1", ".2" suffixes; a tensor whose name changed keeps the original
// in its fold.name attribute. Uncompressed, uncorrected tensor bytes alias
// the input when it is memory-backed (zero copy).
//
// Snapshot attributes (all needed by Encode, carried by WTXT):
//
//	fold.index      the index with "chunks":[] and chunk_hashes/manifest_hash
//	                blanked (key order and created_at_unix kept)
//	fold.chunks     JSON list, one record per chunk: desc (the index
//	                descriptor with derived fields zeroed, key order kept),
//	                ctype and flags from the chunk header, kind
//	                (raw/npz/sten/tsav), payload (array name), splices
//	                ({at, array, swap, fortran, crc, sig}: where each tensor's
//	                bytes go back into the payload), copies ({array, crc,
//	                sig}: tensors decoded from bytes the payload keeps),
//	                note
//	fold.hash_form  "hex" or "sha256" (the string form Encode writes)
//
// # What Encode writes
//
// For a snapshot decoded from FOLD, each chunk is rebuilt: the payload
// array with the spliced tensors put back (byte-swapped / re-transposed
// as recorded) gives the original uncompressed payload byte for byte.
// Preserved byte for byte: every uncompressed payload (JSON documents,
// the npz/torch zip archives including pickles and non-tensor objects,
// safetensors headers), chunk order, names, ctypes, header flags, index
// descriptor keys and values other than the derived ones, ecc_algo, the
// whole index root and metadata (caller keys, protection,
// security_level, security_features, created_at_unix, extra root keys
// such as merkle_root, which is not recomputed) and the hash string form.
// Re-derived: zstd-compressed bytes (klauspost/compress level 3, one
// single-segment frame with content size, no checksum: different bytes
// from Python's zstd, same content), and from them comp_len, crc32c,
// sha256, offsets, ECC bytes (always the correct per-block parity, so
// seed-era files come out fixed), chunk_hashes (in chunk order; a
// repeated name keeps its first position and the last hash, like a
// Python dict), manifest_hash and the header. hmac-sha256 strings cannot
// be recomputed without the key and are written as sha256: strings. An
// uncompressed FOLD file with correct ECC re-encodes to identical bytes.
//
// Because the containers around the tensors are kept verbatim, tensors
// must come back unchanged: a spliced or copied array whose CRC-32, dtype
// or shape differs from the decoded one fails with ErrModified rather
// than producing a zip whose CRCs or headers lie.
//
// Arrays that no chunk record claims (every array of a snapshot from
// another format) are written as one new STEN chunk named "torch_state"
// ("snapd_arrays_N" if that name is taken) (uncompressed, no ECC; its tensor names are the array names or their
// fold.name), all snapshot dtypes included. A fresh file's index is
// {"format":"fold","version":"1.2.0","created_at_unix":0.0,
// "metadata":{"protection":"off","chunk_hashes":{...},"manifest_hash":...},
// "chunks":[...]} with bare-hex hashes (readable by the seed-era reader;
// STEN needs the later reader). Attributes of other formats (keys not
// starting with "fold.") have no place in FOLD: Encode fails with
// formats.ErrLossy unless EncodeOptions.Lossy, which drops them.
package fold
