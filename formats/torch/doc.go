// Package torch reads and writes PyTorch checkpoints (`torch.save`,
// `.pt`/`.pth`, also `pytorch_model.bin`) without running any of their
// code.
//
// # Zip layout (torch >= 1.6; the default)
//
//	zip archive, every member under one directory <a>/ (the file's stem in
//	torch 1.x, "archive" in 2.x), stored (method 0) and, as torch writes it,
//	with data starting on a 64-byte boundary (extra field "FB" of 'Z' bytes)
//
//	<a>/data.pkl                 pickle (protocol 2) of the saved object;
//	                             tensors appear as
//	                             torch._utils._rebuild_tensor_v2(
//	                               PERSID ('storage', torch.<T>Storage, key,
//	                                       location, numel),
//	                               storage_offset, size, stride,
//	                               requires_grad, OrderedDict()[, metadata])
//	<a>/byteorder                "little" or "big"          (torch >= 2.0)
//	<a>/data/<key>               a storage: numel elements, raw, C order
//	<a>/version                  "3\n" (also <a>/.data/version)
//	<a>/.format_version, <a>/.data/serialization_id         (torch >= 2.x,
//	                             ignored)
//
// # Legacy layout (torch < 1.6, `_use_new_zipfile_serialization=False`)
//
//	pickle  MAGIC_NUMBER 0x1950a86a20f9469cfc6c   (protocol 2: 80 02 8a 0a ...)
//	pickle  PROTOCOL_VERSION 1001
//	pickle  sys_info {'protocol_version', 'little_endian', 'type_sizes'}
//	pickle  the object; persistent ids ('storage', torch.<T>Storage, key,
//	        location, numel, view_metadata) where view_metadata is None or
//	        (view_key, element offset, view numel) of the root storage
//	pickle  the storage keys, a list, in the order of the records below
//	per key: u64 element count (the file's byte order), then its bytes
//
// The pre-1.0 tar layout is not read.
//
// # Sniffing and extensions
//
// Sniff accepts a zip whose first local header names "<a>/data.pkl" (a
// name longer than the sniffed head is accepted and checked by Decode) or
// a pickle of the legacy magic number. Extensions are .pt and .pth only:
// `.bin` is used by too many formats to claim, so a torch `.bin` is
// recognised by its magic bytes (snapd reads by magic first) and written
// as torch only with --to torch.
//
// # The unpickler
//
// data.pkl (and each legacy pickle) runs on formats/pickle, snapd's one
// bounded pickle machine: it builds only None, bool, int (arbitrary size),
// float, str, bytes, list, tuple, dict, set, collections.OrderedDict
// (with the attribute dict BUILD gives it, e.g. a state_dict's
// _metadata), storages and tensors; every object it builds is charged to
// the decode budget (DecodeOptions.MaxDecoded), its work is bounded by
// 16 steps per byte of the pickle, tuples nest at most 1000 deep, and
// ctx is checked every 4096 opcodes. Globals are an allowlist — the part
// of torch 2.6's weights_only loader that describes dense tensors and
// plain data:
//
//	collections.OrderedDict   torch._utils._rebuild_tensor{,_v2,_v3}
//	torch._utils._rebuild_parameter{,_with_state} (empty state)
//	torch.nn.parameter.Parameter   torch._tensor._rebuild_from_type_v2
//	(torch.Tensor or Parameter, no state)   torch.Tensor   torch.Size
//	torch.device   _codecs.encode (latin1)   builtins.{set,frozenset,
//	bytearray,complex}   torch.<dtype> (float8_e4m3fn, uint16, ...)
//	torch.{Double,Float,Half,BFloat16,Long,Int,Short,Char,Byte,Bool,
//	ComplexFloat,ComplexDouble}Storage   torch.UntypedStorage (bytes)
//
// Any other global is never looked up or called. With
// DecodeOptions.Strict the file is refused: the error names the global
// (module.name) and its key path ("scheduler.anneal_func"; the opcode's
// offset only when no key path is knowable). Otherwise (the default) the
// pickle runs in formats/pickle's placeholder mode and, if the object
// holds any placeholder (also weights_only globals for sparse, quantized
// and meta tensors), the file is carried verbatim — see "Pickles snapd
// does not interpret". Opcodes that build arbitrary objects (INST, OBJ, EXT*,
// out-of-band buffers) are refused. Bounds of the result walk: containers
// nested ≤ 1000, 2^20 values (shared references count each time, so a
// small pickle cannot expand exponentially), no cycles; memo ≤ 2^20
// entries, MARK nesting ≤ 1000, data.pkl ≤ Codec.MaxPickle (64 MiB).
// Every length is checked against the bytes left before anything is
// allocated.
//
// # Tensors
//
// dtypes f64 f32 f16 bf16 i64 i32 i16 i8 u8 bool (typed storages with
// _rebuild_tensor[_v2]), c64 c128 (ComplexFloat/ComplexDoubleStorage),
// and through _rebuild_tensor_v3 (an untyped storage, its numel in bytes,
// and a dtype global) f8e4m3 f8e5m2 f8e8m0 (torch.float8_e4m3fn,
// float8_e5m2, float8_e8m0fnu) u16 u32 u64 and any of the above; other
// torch dtypes (float8_*fnuz, complex32, quantized, bits) are
// unsupported. A storage viewed as two dtypes is unsupported. A "big"
// byteorder record (or legacy sys_info little_endian False) makes every
// element byte-swapped as it is read (complex: each part). Each tensor becomes one
// array named by its key path: dict keys (ints in decimal) and list/tuple
// indices joined by '.', e.g. "optimizer.state.0.exp_avg"; a root tensor is
// "tensor"; bytes a WTXT name cannot hold become '_', and a name taken
// twice gets "_2", "_3", ... Every view is checked before use: offset,
// size and stride non-negative, offset + Σ(size_i-1)·stride_i computed
// without overflow and inside the storage member (which must hold numel ×
// element size bytes). A C-contiguous view of a little-endian storage is a
// snapshot.Section of the input: zero-copy from a mapped file. Any other
// view (transposed, strided, stride 0) and big-endian storages are served
// by a Source that gathers (and swaps) on demand, so nothing is
// materialised; instead the arrays' total size is bounded by ExpandFactor
// (4) × the file size + ExpandSlack (64 MiB), which a view-heavy file
// cannot exceed by accident and a hostile one cannot get past. Storage
// CRC-32s are not checked (the bytes are never all read while decoding;
// WTXT hashes what is converted); data.pkl's, byteorder's and version's
// are.
//
// # Attributes
//
//	snapshot  torch.tree           the object as canonical JSON: null, true,
//	                               false, "str", {"int":"12"}, {"float":"0.5"}
//	                               ("inf", "-inf", "nan"), {"bytes":base64},
//	                               {"list":[...]}, {"tuple":[...]},
//	                               {"dict":[[k,v],...]}, {"odict":[[k,v],...],
//	                               "state":[[k,v],...]}, {"tensor":"array name",
//	                               "param":true, "requires_grad":true}
//	array     torch.storage        storage number (0, 1, ... in order of first
//	                               use); arrays with the same number are tied
//	          torch.storage_numel  that storage's element count
//	          torch.offset         the view's storage offset (elements)
//	          torch.stride         the view's strides, JSON array
//
// The four array attributes are written only for a tensor that shares its
// storage or does not view all of it in C order from offset 0; a plain
// state_dict entry has none. torch.tree is left out when the checkpoint is
// exactly what Encode writes without one (an OrderedDict of plain tensors
// keyed by array name, ascending, no attributes), so such a file converts
// losslessly to formats without attributes. A torch state_dict carries
// _metadata, so it keeps torch.tree: converting it to safetensors needs
// --lossy, which drops the tree (the tensors are kept).
//
// # Encode
//
// Encode writes the zip layout under "archive/" as torch 2.x does:
// data.pkl, .format_version "1", .storage_alignment "64", byteorder
// "little", data/0 ... data/N (storages numbered in pickling order),
// version "3\n", .data/serialization_id (40 digits computed from the
// members' names and CRC-32s; torch's reader does not check it); every
// member stored with its data 64-byte aligned; no timestamps, so output
// is a function of the snapshot. torch 1.13 ignores the 2.x records. The
// pickle uses
// only opcodes torch 1.13's weights_only loader knows (BINUNICODE
// strings, no memo) — except Python floats, which that loader cannot read
// at all (torch 2.x can); torch.load(weights_only=True) of torch 1.13
// therefore loads state_dicts and tensor dicts, and a checkpoint with
// float leaves (an optimizer's lr) only with weights_only=False, exactly
// as for torch's own file. The tree comes from torch.tree; without it
// (a snapshot from another format) the file is an OrderedDict of the
// arrays by name. Arrays sharing torch.storage become one storage again:
// if one of them covers it whole it is streamed from its source and the
// others are checked to be views of it; otherwise the views are
// scattered into a buffer (≤ MaxScatter, 1 GiB) and must agree where
// they overlap. Storage elements no view covers are written as zeros.
// Arrays of dtypes without a typed storage class (f8e4m3, f8e5m2,
// f8e8m0, u16, u32, u64) are written as torch 2.x writes them,
// _rebuild_tensor_v3 of a torch.storage.UntypedStorage with the dtype
// global: torch >= 2.1 (fp8) or 2.3 (unsigned) loads them with
// weights_only=True, torch 1.13 cannot.
//
// # Pickles snapd does not interpret
//
// Such a file (rng_state.pth pickles numpy globals, training_args.bin a
// dataclass) decodes to: array "torch.verbatim", u8, one dimension, the
// file's bytes (zero-copy), attributes torch.verbatim "1", torch.file
// (the base name), torch.unknown (canonical JSON [["key path",
// "module.name"],...], each pair once in walk order, at most 64 then
// ["...","N more"]); and every tensor the object holds, named by key path
// as above (the name torch.verbatim is reserved first), marked
// torch.derived "1", so that diffs show their rows. No torch.tree is kept.
// The verbatim bytes are the source of truth: Encode of a snapshot with a
// torch.verbatim array writes its bytes and nothing else (derived arrays,
// even edited, are ignored; any array neither verbatim nor derived beside
// it is an error). The result is a function of the file's bytes and name.
//
// # Byte-identical plain files
//
// Encode's own layout differs from torch's (archive name, memo, member
// order), so a plain zip checkpoint torch wrote also gets snapshot
// attribute torch.skeleton when each storage is viewed whole, in C order,
// by one array: the file's bytes besides the storages (at most
// MaxSkeleton) and where each array goes, with the storage's CRC-32.
// Encode replays it when the snapshot's arrays are exactly those and
// their bytes still match the CRC-32s (one extra read of each array);
// otherwise it writes its own layout from torch.tree. A file Encode wrote
// (recognised by its .data/serialization_id) gets no skeleton, so X ->
// WTXT -> X -> WTXT stays a fixed point.
//
// All Decode format errors are *Error values naming the file, the member
// or pickle stream (with the file offset) or the tensor, and the failed
// check, wrapping ErrCorrupt, ErrRefused, ErrLimit or ErrUnsupported.
package torch
