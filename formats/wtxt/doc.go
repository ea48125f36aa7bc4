// Package wtxt writes, reads and verifies WTXT 1.1, snapd's snapshot
// format, and its companions WSUM (streaming finalization) and DELTA v2
// (row-level diffs); package armor beside it seals encrypted files
// (WSEAL 1). The normative description is
// ../shared/spec/WTXT-1.1-profile.md; what snapd adds and decides where
// the profile is silent is in docs/FORMAT.md (sections cited as FORMAT §n).
//
// # Text
//
// A WTXT file is ASCII: bytes 0x20-0x7E and LF only, no CR, tab, trailing
// space or empty line; lines of at most 64 KiB. Fields are key=value
// separated by one space, in a fixed order; hex is lowercase; decimals
// have no sign and no leading zeros unless a width is given (DEC6: at
// least six digits, zero-padded). The file ends with "endwtxt" and one LF.
// The same input gives the same bytes (no map order, no clock when ts is
// given or SOURCE_DATE_EPOCH is set).
//
// # Header
//
//	WTXT 1
//	meta schema=<TOK> gen=<DEC6> ts=<YYYY-MM-DDTHH:MM:SSZ> build=<TOK> endian=LE host=<TOK> cuda=<TOK>
//	cap ext=crc32c,line_parity,arr_hmac,delta_v2,row_blocking[,tensor_ext]
//	root sha256_all=<hex64> merkle_prev=<hex64> merkle_this=<hex64> fastxor=<hex16>
//	sign ed25519=<base64, 88 chars> keyid=<hex16>                     (when signed)
//
// TOK is one or more of A-Z a-z 0-9 . _ - / : +. tensor_ext is listed if
// and only if an array needs it (f16, bf16, bool, names with . : / -,
// rank 0, a zero-size array); the verifier requires the five base items
// as a prefix (FORMAT §3). sha256_all is SHA-256 over every array's arr
// line (without LF) followed by its raw bytes; merkle_this is
// SHA-256(merkle_prev || sha256_all || ts || gen || build) over the raw
// 32-byte values and the meta text; fastxor XORs raw byte k into bits
// 8(k mod 8).. of a 64-bit word. The Ed25519 signature covers every byte
// before the sign line; keyid is the first 8 bytes of BLAKE3-256 of the
// public key (an OpenSSH ed25519 key).
//
// A streamed file (EncodeOptions.Stream) writes
//
//	root_pending sha256_all=<64 zeros> note="finalize with WSUM"
//
// instead of root and no sign line; its root values and signature are in
// the WSUM (below). ReadHeader reads the header; Verify checks all of it.
//
// # Arrays
//
// Arrays follow in ascending bytewise order of name:
//
//	arr name=<NAME> dtype=<DT> shape=<d0,d1,...> order=C bytes=<DEC> sha256=<hex64> hmac=<hex64> salt=<hex16>
//	idx rows_per_chunk=<DEC> row_size=<DEC> row_blocking=on
//	ch ix=<DEC6> off=<DEC12> len=<DEC> sha256=<hex64> crc32c=<hex8> b64=on width=76 lines=<DEC>
//	<base64> <p>
//	...
//	endch
//	... more ch blocks ...
//	endarr
//
// Raw bytes are little-endian, C order; bytes = product(shape) x element
// size. hmac = HMAC-SHA256(K, salt || raw) with salt the first 8 bytes of
// HMAC-SHA256(K, "wtxt-salt-v1" 0x00 gen 0x00 name); without a key both
// are zeros and the array is reported unauthenticated.
//
// The idx line is written for (and required on) every array of rank >= 1
// with bytes > 0: rows_per_chunk rows of row_size bytes per chunk, the
// last chunk the rest; the writer's one value is the largest power of two
// of rows within 64 KiB unless asked otherwise (FORMAT §3 says which value
// is written when the request exceeds the row count). Rank-0 arrays have
// one chunk and no idx line; a zero-size array has one chunk with len=0,
// crc32c=00000000 and lines=0. ix counts from 0, off is the sum of the
// earlier lens, the lens add up to bytes.
//
// Each chunk's raw bytes are base64-encoded on their own (standard
// alphabet, = padding) and cut into lines of 76 characters (57 raw bytes),
// the last holding the rest; lines = ceil(len/57). Each line is followed
// by a space and one hex digit p, the low 4 bits of the XOR of the line's
// characters (parity). crc32c (Castagnoli) and sha256 are over the
// chunk's raw bytes.
//
// # Attributes: __snapd_attrs__
//
// When a snapshot carries format attributes (snapshot.Snapshot.Attrs,
// snapshot.Array.Attrs) the writer adds one ordinary u8 array named
// __snapd_attrs__ holding canonical JSON ({"arrays":{...},"meta":{...},
// "snapshot":{...},"v":1}, keys sorted, no HTML escaping), sorted among the
// arrays by its name and covered by every hash like them. Decode removes it
// and restores the attributes, which makes X -> WTXT -> X lossless (FORMAT
// §1), and the generation metadata (snapshot.UserMeta, member "meta",
// FORMAT §9; ReadUserMeta reads only it), which no other codec writes.
//
// # Trailer
//
//	audit key=value ...          (optional, covered by nothing, always reported)
//	endwtxt
//
// # WSUM
//
// A streamed file's companion, one line and LF (ParseWSUM):
//
//	WSUM 1 sha256_all=<hex64> merkle_prev=<hex64> merkle_this=<hex64> sign=<base64>
//
// The signature covers the WTXT header bytes through the root_pending line
// followed by the WSUM line's bytes before " sign="; unsigned, the field is
// absent. Verify checks a WTXT and its WSUM jointly; DeferWSUM lists the
// checks left to it (FORMAT §3).
//
// # DELTA v2
//
// MakeDelta and ApplyDelta (FORMAT §4):
//
//	WTXT-DELTA 2 base_sha256_all=<hex64>
//	<the target's header lines from meta through root/root_pending and sign, verbatim>
//	arr <the target's arr line>          (every target array, in order)
//	idx ...                              (when the target has one)
//	<the ch blocks whose sha256 differs from the base chunk with the same ix;
//	 all of them for a new array or one whose dtype, shape or geometry changed>
//	endarr
//	<the target's audit line, if any>
//	enddelta
//
// Apply checks the base's computed sha256_all against base_sha256_all,
// copies absent chunks from the base and reproduces the target byte for
// byte. The seed's short form (arr name=R, no header) is accepted on apply.
// ReadDeltaStructure reads a delta by the same grammar (one deltaReader)
// without a base: its target header, arrays and carried chunks (snapd
// inspect), counting the base64 lines, not decoding them.
//
// # WSEAL
//
// An age-armored file OUT (package armor, interoperable with age -a) gets a
// plaintext seal OUT.wseal, one line (FORMAT §2):
//
//	WSEAL 1 kind=<wtxt|delta|wsum> bytes=<DEC> sha256=<hex64> gen=<DEC6> ts=<...> build=<TOK> sha256_all=<hex64> merkle_prev=<hex64> merkle_this=<hex64> keyid=<hex16> sign=<base64>
//
// bytes and sha256 describe the armored bytes; the signature covers the
// line before " keyid=", so the chain can be verified with public keys
// only.
//
// # Errors
//
// Every failure is an *Error naming the file, the 1-based line, the array,
// the chunk ix and the Check that failed; its message never quotes the
// file's content beyond names. It matches ErrInvalid and, through
// Check.Kind, formats.ErrCorrupt, ErrTruncated, ErrChecksum or (check
// "limit", a reader's memory cap) formats.ErrLimit.
//
// # Reading the structure, the chain values
//
// The structure above is parsed in this package only. ReadIndex returns an
// Index: the Header and every array and chunk with the line numbers and
// byte offsets of its lines ([BodyStart, TrailerStart) is the arrays,
// each [Start, End) one arr..endarr or ch..endch block), skipping the
// base64 by its length and capping its memory (IndexOptions), and refusing
// bytes after endwtxt, as Verify does, so the ranges tile the file; ReadChunk
// decodes one indexed chunk. The delta, gitops (review, split layout) and
// snapd diff build on it. The chain values of a generation are one Root
// (gen, ts and build as written; sha256_all, merkle_prev, merkle_this),
// whose text form is the WSEAL line's gen..merkle_this fields; Header,
// Result, WSUM and armor.Seal embed it.
//
// # Skeleton and segments
//
// The skeleton layout (skeleton.go, docs/FORMAT.md) keeps tensor bytes out
// of Git: Split and SplitIndexed turn a WTXT into a skeleton and raw
// segment blobs, Assemble puts them back together byte for byte.
// EncodeSkeleton produces the same skeleton and segments straight from a
// snapshot, as Encode then SplitIndexed would, without the WTXT text (no
// base64, no full-size file).
package wtxt
