// Package numpy reads and writes NumPy's .npy files (codec "numpy") and
// .npz archives (codec "npz") without Python, without pickle and without
// evaluating anything.
//
// # .npy
//
//	offset  size  field
//	0       6     magic "\x93NUMPY"
//	6       1     major version: 1, 2 or 3
//	7       1     minor version: 0
//	8       2|4   HEADER_LEN, little-endian: uint16 in 1.0, uint32 in 2.0/3.0
//	10|12   HEADER_LEN  header: a Python dict literal, ASCII (1.0/2.0 are
//	              latin-1, 3.0 UTF-8; snapd accepts ASCII only, which is all
//	              NumPy writes for the dtypes it holds), padded with spaces
//	              and ended by '\n' so that 10|12 + HEADER_LEN is a multiple
//	              of 64 (NumPy pads 1..64 spaces)
//	...     ...   the array data: product(shape) × itemsize bytes, C or
//	              Fortran order, byte order as in descr; nothing after it
//
// The header dict NumPy >= 1.24 writes is, for a (2, 3) '<f4' array:
//
//	{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }␣␣…␣\n
//
// keys sorted, each item followed by ", ", and 21 − len(str(growth axis))
// spaces (growth axis: shape[0], or shape[-1] in Fortran order; none for
// 0-d) before the alignment padding. Decode parses the dict with a strict
// grammar (see parseHeader): exactly the keys descr, fortran_order and
// shape; descr a quoted "<kind><size>" with byte order '<', '>' or '|'
// (only 1-byte types may use '|'); shape a tuple of at most MaxDims
// non-negative int64 values (in 1.0/2.0 headers a Python 2 'L' suffix is
// accepted, as NumPy does); fortran_order True or False. Headers longer
// than MaxHeaderSize are refused.
//
// Element types: f8 f4 f2, i8 i4 i2 i1, u8 u4 u2 u1, b1, c8 c16 — in
// either byte order — map to snapshot f64 f32 f16, i64 i32 i16 i8, u64
// u32 u16 u8, bool, c64 c128 (a complex element is two floats, real then
// imaginary, each byte-swapped on its own when big-endian; a big-endian
// complex array in Fortran order is refused with ErrUnsupported). Object
// arrays ('|O', pickled Python objects), structured dtypes (a list
// descr), strings, complex256, datetime and anything else are refused
// with ErrUnsupported; nothing is ever unpickled. Encode refuses bf16 and
// the fp8 dtypes (NumPy has none) with a formats.DTypeError naming the
// array, or drops them under EncodeOptions.Lossy and reports each. A shape whose byte size
// overflows int64 is refused (ErrLimit); data shorter or longer than the
// shape needs is ErrCorrupt.
//
// Data of a C-order little-endian array (or 1-byte, or with at most one
// dimension longer than 1) is served zero-copy from the input (a section
// of the mapped file). Big-endian data is byte-swapped per read from the
// mapped bytes. Fortran-order data is transposed (tiled, cache-friendly)
// into blocks of whole rows of at most 4 MiB, kept in one LRU cache of 8
// blocks per Decode (32 MiB however many arrays), so memory does not grow
// with the array or the snapshot. Only when the input is not memory
// backed are such arrays' bytes read into memory, within Codec.Budget.
// Mapped pages are released after each pass (snapshot.Releaser); a
// transposing pass necessarily touches the whole array's pages.
//
// # .npz
//
// A zip archive (as np.savez / np.savez_compressed write it with Python's
// zipfile) whose members are .npy streams named KEY.npy; each member is an
// array named KEY. Keys that are not portable WTXT names are mapped to
// KEY-with-illegal-bytes-as-'_' + "-" + 16 hex digits of SHA-256(KEY), the
// original kept in numpy.name. The reader finds the end of central
// directory record (with no bytes after it; zip64 end records honoured),
// reads every central directory entry, and checks each member's local
// header against it: signature, name, method, CRC-32 and both sizes
// (including the zip64 extra field NumPy always writes), and that no two
// members share bytes and none runs into the central directory. Stored
// members are CRC-checked and then served zero-copy as sections of the
// file. Deflated members are streamed, never held whole: the declared
// size must fit what the compressed size can expand to (1032:1) and is
// charged to the file's decode budget (formats.Budget, shared by all
// members: DecodeOptions.MaxDecoded, default formats.DefaultMaxDecoded of
// the file size) before anything is inflated, then
// Decode inflates the member once into a CRC-32 (stopping one byte past
// the declared size; size and CRC must match) — a zip bomb is an ErrLimit
// or ErrCorrupt naming the member, never an allocation. The array then
// reads through a few decompression cursors that continue where earlier
// reads stopped (see inflateSource); only Fortran-order or big-endian
// arrays inside deflated members are inflated into memory, within
// Codec.Budget.
// Encrypted members, other compression methods, members not named *.npy
// and multi-disk archives are refused.
//
// # Attributes
//
// Only what differs from np.save / np.savez's defaults is recorded, so a
// file NumPy wrote with defaults decodes to arrays with no attributes:
//
//	numpy.version        (array)    "2.0" or "3.0"
//	numpy.fortran_order  (array)    "true"
//	numpy.byte_order     (array)    "big" (multi-byte dtypes only)
//	numpy.header         (array)    the header text verbatim, when it is not
//	                                what NumPy >= 1.24 writes for the same
//	                                version, descr, order and shape (older
//	                                NumPy, other writers)
//	numpy.name           (array)    the original .npz key (non-portable keys)
//	numpy.zip.method     (array)    "deflate" for deflated members
//	numpy.zip.mtime      (array)    the member's MS-DOS date and time,
//	                                "YYYY-MM-DD hh:mm:ss" as stored, when not
//	                                1980-01-01 00:00:00 (Python's default,
//	                                which np.savez uses)
//	numpy.npz.order      (snapshot) member order as a JSON array of names,
//	                                when not ascending bytewise
//
// # Writing
//
// Encode writes a .npy for a snapshot of exactly one array (its name is
// not stored; Decode names the array DefaultArrayName "arr_0"), and an
// .npz for any number. Without attributes it writes what np.save does:
// version 1.0, C order, little-endian, the 1.24 header (growth-axis spaces,
// 64-byte alignment). Attributes select version, order, byte order and the
// verbatim header; an attribute that does not fit the array (a header for
// another shape, big-endian bytes for u8, an unknown numpy.* key) is
// ErrInvalidSnapshot. The .npz layout is Python zipfile's as np.savez
// uses it: per member a local header (version 20, flags 0 or 0x800 for a
// non-ASCII name, MS-DOS time from numpy.zip.mtime else 1980-01-01 00:00,
// CRC-32 and sizes) with a zip64 extra field (id 1, 16 bytes: size and
// compressed size), the data, then the central directory (made by Unix
// 2.0, external attributes 0600 << 16, no extra) and the end record.
// Fortran order is written from the C-order source in tiles when it is
// memory backed (a mapped file), else from a copy within Codec.Budget,
// else in passes that each read the source sequentially and fill a
// budget-sized share of the output (a range of last-dimension indices).
//
// Members come in numpy.npz.order, else sorted by name; stored unless
// numpy.zip.method says deflate (Go's compress/flate at the default level,
// which numpy loads but whose bytes differ from zlib's). So every file
// NumPy writes with np.save, np.lib.format.write_array or np.savez comes
// back byte for byte through WTXT, and a savez_compressed archive comes
// back with the same arrays, attributes and member layout. Sizes and
// offsets over 2 GiB − 1 (Python's ZIP64_LIMIT) go where Python puts
// them: 0xFFFFFFFF in the headers with the values in the zip64 extra
// field (version 4.5), and zip64 end record + locator when the central
// directory's offset or size is over the limit or there are more than
// 65,535 members (tested by lowering the limit in both Python and Go).
// Arrays NumPy has no dtype for (bf16) fail with
// formats.ErrLossy, or are dropped with EncodeOptions.Lossy.
package numpy
