// Package stb reads and writes STB 0.1, the SVG-Tensor Binary format of the
// KHΛNARY runtime (`.stb`), as its reference implementation writes it
// (cannaseedus-bot/KHANARY 9cbf84b; reader fixed in KHANARY-V1 5f70280).
// The seed spec and the reference disagree in places; this package follows
// the reference and the project's FORMATS-notes section 4.
//
// # Layout (all integers little-endian, all offsets absolute)
//
//	0                32               32+32N        data_offset = align64(32+32N)
//	+----------------+----------------+-------------+------------------------------+
//	| header (32)    | table (N × 32) | zero bytes  | tensor bytes, back to back   |
//	+----------------+----------------+-------------+------------------------------+
//
//	header: 0 "STB0" | 4 version u8 = 1 | 5 flags u8 = 0 | 6 tensor_count N u16 |
//	        8 reserved0 u32 = 0 | 12 reserved1 u32 = 0 | 16 data_offset u64 |
//	        24 file_size u64
//	entry:  0 tensor_id u8 | 1 dtype u8 | 2 rank u8 | 3 layout u8 |
//	        4 offset u64 (absolute) | 12 size_bytes u64 | 20 dims[0..2] u32 × 3
//
//	dtype:  0 float32, 1 float16, 2 int8, 3 int32
//	layout: 0 ROW_MAJOR, 1 COL_MAJOR, 2 CHANNELS_LAST (3..255 reserved)
//
// # What Decode accepts
//
// Everything the reference writer produces: tensor offsets that are not
// 64-aligned (only data_offset is), rank 0 (one element), rank > 3 with
// only the first three dims stored, zero-size tensors whose offset equals
// file_size, any layout value, non-consecutive and repeated tensor_ids,
// tensor_count 0 (a 64-byte file). It refuses, with an *Error naming the
// entry, the offset and the check: a file shorter than 32 bytes, wrong
// magic, version ≠ 1 or flags ≠ 0 (ErrUnsupported, as both reference
// readers do), header file_size ≠ the real size, a table beyond the file,
// data_offset inside the table, beyond the file or not a multiple of 64,
// an unknown dtype (ErrUnsupported), offset < data_offset, offset +
// size_bytes > file_size, and for rank ≤ 3 size_bytes ≠ product(dims[0:rank])
// × element size or a non-zero dim beyond the rank. The table is read only
// after its size (at most 65535 × 32 bytes) is checked against the file
// size. The table and the data must agree (ErrCorrupt otherwise): every
// byte of [data_offset, file_size) belongs to some tensor, and the bytes
// between the table and data_offset are zero (the reference writes zeros
// there; a tensor_count lowered by a flipped bit leaves entries or data
// uncovered). Reserved header fields are ignored; Encode writes zeros.
//
// # Mapping to a snapshot
//
//   - Names: STB has none. A tensor becomes the array "t<id>" (decimal
//     tensor_id: t0, t7, ...). A repeated id — the reference writer does not
//     prevent it; its readers keep the last entry — gets "t<id>.<k>" for its
//     k-th repeat in table order, with Attrs["stb.id"] = id.
//   - dtypes: float32 → f32, float16 → f16, int8 → i8, int32 → i32.
//   - Table order: Snapshot.Attrs["stb.order"] = JSON list of the array
//     names in table order, written only when the order is not ascending
//     tensor_id (ties by name), which is the order Encode uses without it.
//   - Layout: Attrs["stb.layout"] = "COL_MAJOR", "CHANNELS_LAST" or the
//     decimal value 3..255; absent for 0 (ROW_MAJOR).
//   - Shape: dims[0:rank] for rank ≤ 3 ([] for rank 0). For rank > 3 the
//     file keeps only dims[0..2]; the array gets 4 dims [d0, d1, d2, q] with
//     q = size_bytes / (d0·d1·d2·element size), and Attrs["stb.rank"] = the
//     rank byte. For rank 4, q is the true fourth dim and the shape is exact.
//     For rank ≥ 5, q is the product of the dims the file lost, and
//     Attrs["stb.trailing"] = "product" says so (the bytes are still exactly
//     C order for [d0, d1, d2, q], since merging trailing dims does not move
//     any element). When d0·d1·d2 = 0 the missing dims cannot be recovered
//     at all: q is set to 0 and Attrs["stb.trailing"] = "unknown".
//   - Data: a snapshot.Section of the input (zero-copy when memory-backed),
//     exactly the stored bytes.
//
// # Layout labels and element order
//
// The reference writer stores every array's bytes in C (row-major) order of
// the dims it writes, whatever the layout label says (the label is the
// caller's annotation; e.g. multi_dtype.stb id 7 is labelled COL_MAJOR and
// holds [[1,-2],[2147483647,-2147483648]] in row-major order). This codec
// therefore converts nothing: the WTXT array's bytes are the stored bytes,
// and they really are C order for the array's shape, as the WTXT data model
// requires. The label is carried in stb.layout only, so STB → WTXT → STB
// restores it unchanged. A file written by some other producer that did put
// column-major bytes behind a COL_MAJOR label would come out as the
// transpose read in C order — STB gives a reader no way to tell the two
// apart, and the reference never writes such files.
//
// # What Encode writes
//
// The reference writer's layout: header (flags, reserved 0, file_size the
// real length), the table in table order (stb.order, else ascending id then
// name), zero bytes up to data_offset = align64(32 + 32N), then each
// tensor's bytes with no padding, offsets absolute. A file decoded from the
// reference writer re-encodes byte for byte (tested on all fixtures).
// tensor_id comes from stb.id, else from a name t<id>; rank from stb.rank
// (shape must then have 4 dims), else the shape's length; dims are the
// first three dims, zero-padded (the reference's truncation for rank > 3).
//
// Without EncodeOptions.Lossy, Encode fails with an error wrapping
// formats.ErrLossy that names the array whenever the file could not give
// the snapshot back: a dtype other than f32/f16/i8/i32 (STB has no bf16,
// f64, bool, u8, ...), an array name that a decoder would not reproduce
// (anything but t<id>, or t<id>.<k> for repeats), a shape of rank ≥ 5 (or
// rank 4 with a zero among the first three dims) whose lost dims would come
// back different, or attributes of another format. With Lossy, arrays of
// unsupported dtypes are dropped, arrays without an id get the smallest
// free ids in snapshot order, dims are truncated like the reference does,
// and foreign attributes are ignored. Malformed stb.* attributes, unknown
// stb.* keys, dims above 2^32-1, more than 65535 tensors, or no free id
// fail with ErrInvalidSnapshot in either mode.
package stb
