// Package safetensors reads and writes the safetensors format
// (huggingface/safetensors, `.safetensors`).
//
// # Layout
//
//	offset 0      8 bytes   N, u64 little-endian: header length
//	offset 8      N bytes   header: UTF-8 JSON object, may end in white space
//	offset 8+N    ...       data region: tensor bytes, little-endian, C order
//
//	header = {"__metadata__": {"key": "value", ...},          (optional)
//	          "<tensor name>": {"dtype": "F32",
//	                            "shape": [d0, d1, ...],        ([] = scalar)
//	                            "data_offsets": [begin, end]}, (relative to 8+N)
//	          ...}
//
// # What Decode accepts
//
//   - N <= MaxHeaderSize (100,000,000, the reference implementation's
//     limit) and N <= file size - 8, both checked before the header is
//     read; with a memory-backed reader the header is not even copied.
//   - The header must be valid UTF-8, start with '{' (newer reference
//     versions require it; older ones would skip leading white space, which
//     no writer produces) and hold exactly one JSON object followed only by
//     JSON white space (the reference pads with spaces). Duplicate keys at any level are refused, as are
//     unknown fields in a tensor entry and missing ones; __metadata__ must
//     map strings to strings (null is taken as absent).
//   - dtypes F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL map to
//     the snapshot dtypes of the same meaning, F8_E4M3 F8_E5M2 F8_E8M0 to
//     f8e4m3 f8e5m2 f8e8m0 and C64 to c64 (arrays of their real shape).
//     F6_E2M3 F6_E3M2 F4 (no snapshot counterpart) are carried as U8
//     arrays of shape [nbytes], with Attrs safetensors.dtype (the original
//     dtype) and safetensors.shape (the original shape, JSON); sub-byte
//     dtypes must fill whole bytes, as the reference requires. Any other
//     dtype is an error wrapping ErrUnsupported. Encode refuses c128
//     (safetensors has no complex128) with a formats.DTypeError naming
//     the array, or drops it under Lossy and reports the loss; snapshots
//     that carry fp8 or C64 as U8 with these attributes (written before
//     the dtypes existed) still encode.
//   - Offsets are checked as strictly as the reference (Rust) reader does:
//     end - begin == product(shape) × element size; sorted by begin, the
//     tensors tile the data region exactly — each begins where the
//     previous one ended (no gap, no overlap; zero-size tensors sit at any
//     tensor boundary) and the last ends at the end of the file.
//   - Tensor data is a snapshot.Section of the reader: zero-copy when the
//     reader is memory-backed.
//
// All format errors are *Error values naming the file, the tensor, the file
// offset and the failed check, wrapping ErrCorrupt, ErrLimit or
// ErrUnsupported.
//
// # Names
//
// A tensor name that is a legal WTXT array name (`[A-Za-z0-9_.:/-]{1,1024}`,
// not "__snapd_attrs__") is kept. Any other name (empty, spaces, non-ASCII,
// too long, reserved) becomes its bytes with every illegal byte replaced by
// '_' (cut to 959 bytes), '-' and the first 8 hex digits of SHA-256 of the
// original name — 16 or 64 digits if the shorter form collides with another
// name of the file. The result depends only on the name (and, in the
// collision case, on the file's names), so a tensor keeps its array name
// across generations. The original is kept in Attrs["safetensors.name"].
//
// # Attributes
//
//	snapshot  safetensors.metadata  __metadata__ as canonical JSON: keys sorted
//	                                bytewise, compact, strings escaped like
//	                                serde_json (only '"', '\', controls). Absent
//	                                when the file has no __metadata__; "{}" when
//	                                it has an empty one.
//	array     safetensors.name      original tensor name (only when sanitized)
//	array     safetensors.dtype     original dtype (only for dtypes carried as U8)
//	array     safetensors.shape     original shape as JSON (with safetensors.dtype)
//
// # What Encode writes
//
// The canonical file, which the reference readers (Python/Rust safetensors)
// accept; TestVectors shows it equals the conformance vectors byte for byte
// and TestReferenceSerialization that it equals the expected bytes of the
// reference implementation's own serialization tests:
//
//   - header JSON, compact: __metadata__ first (when the attribute is
//     present), then the tensors sorted bytewise by their safetensors name
//     (safetensors.name, else the array name), each as
//     {"dtype":...,"shape":[...],"data_offsets":[b,e]};
//   - the header padded with spaces to a multiple of 8 bytes, as the
//     reference writer does, so the data region starts 8-aligned;
//   - the tensor bytes back to back in the same order, no padding.
//
// Encode does not restore the source's tensor order or header padding: the
// order of tensors in a safetensors file carries no meaning, and the
// reference writer itself reorders (by dtype, then name). A
// decode → encode of any file therefore yields the same tensors, dtypes,
// shapes, bytes and metadata, in canonical layout; a canonical file is
// reproduced byte for byte.
//
// Attributes of other formats (keys not starting with "safetensors.") have
// no place in a safetensors file: Encode fails with an error wrapping
// formats.ErrLossy that names the array (or the snapshot) and the key, and
// with EncodeOptions.Lossy it drops them. Inconsistent safetensors.*
// attributes, an unknown safetensors.* key, a name that is not UTF-8 or is
// "__metadata__", two arrays mapping to one name, or a header above
// MaxHeaderSize fail with ErrInvalidSnapshot.
package safetensors
