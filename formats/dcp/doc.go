// Package dcp reads and writes torch.distributed.checkpoint (DCP)
// directories, the format torch.distributed.checkpoint.save writes from
// any number of ranks, as one snapshot: every tensor whole, whatever the
// world size and sharding that wrote it, so that a job's WTXT is the same
// for any world size. A DCP checkpoint is a directory, not one file: Open
// and Write take the directory; Codec (registered as "dcp") only names
// the format for --to and refuses single files.
//
// # Layout
//
//	<dir>/.metadata          pickle of torch.distributed.checkpoint.metadata.Metadata,
//	                         written last (to .metadata.tmp, then renamed)
//	<dir>/__<R>_<N>.distcp   rank R's N-th item file: its items back to back
//
// An item file is a concatenation of items with no header, index or
// padding; .metadata says where each lies:
//
//	offset 0      item  (torch.save zip archive of a chunk tensor, or the
//	                     torch.save bytes of a non-tensor leaf)
//	offset L0     item
//	...
//
// .metadata (the pickled dataclasses; fields read are marked *):
//
//	Metadata
//	  state_dict_metadata*  {FQN: TensorStorageMetadata | BytesStorageMetadata}
//	     TensorStorageMetadata
//	       properties*  TensorProperties, pickled with the tuple state of its
//	                    __getstate__: (dtype*, layout*, requires_grad*,
//	                    _MEM_FORMAT_ENCODING(n)*, pin_memory*) (or a dict
//	                    state, older torch)
//	       size*        torch.Size: the whole tensor's shape
//	       chunks*      [ChunkStorageMetadata(offsets*: torch.Size,
//	                                          sizes*: torch.Size)]
//	     BytesStorageMetadata()   a non-tensor leaf (an int, a float, a list)
//	  planner_data*   {FQN: (key, key, ...)}: where the FQN sits in the nested
//	                  state dict (DefaultSavePlanner's flatten mapping)
//	  storage_data*   {MetadataIndex(fqn*, offset*: chunk offsets or absent,
//	                                 index: chunk number, a hint):
//	                   _StorageInfo(relative_path*, offset*, length*)}
//	  storage_meta    StorageMeta(checkpoint_id, save_id, load_id)  (ignored)
//	  version, ...    fields newer torch adds (ignored)
//
// A chunk's item is found as torch finds it: by (fqn, chunk offsets);
// index is only a hint. Chunk offsets and sizes are in elements, per
// dimension, of the whole tensor; a chunk's item is a torch.save archive
// of a tensor of exactly the chunk's sizes (a DTensor's local shard, a
// replicated tensor written once by one rank, a plain tensor).
//
// # Reading
//
// .metadata (at most Limits.MaxMetadataBytes) runs in formats/pickle's
// bounded machine. Its allowlist builds torch.Size, the dtypes and
// layouts (torch.serialization._get_layout); the DCP classes stay inert
// placeholders the machine records (class, arguments, BUILD state) and
// are read by class name where one is expected — anything else there is
// an error naming what it is; the same placeholders elsewhere (a
// pathlib.PosixPath in storage_meta, a field a newer torch adds) are
// ignored. Nothing in the pickle is looked up or run.
//
// Every item file is opened beneath the directory (openat2
// RESOLVE_BENEATH; on kernels without it no symlink is followed), without
// blocking (a FIFO is refused, not waited on), must be a regular file,
// and is memory-mapped. relative_path must be a plain file name: an
// absolute path, "..", a '/' or '\', a dot-name (.metadata itself),
// control bytes or more than 255 bytes are refused (ErrUnsafe). Before
// any item is decoded every file must exist and hold every item placed
// in it; otherwise the directory is incomplete (ErrIncomplete, also for
// a missing .metadata), so a directory still being written is never
// half-read.
//
// Each tensor's chunks must tile it: each has the tensor's rank and lies
// inside it, no two share an element, every element is in one (the same
// chunk listed twice counts once). The check cuts the tensor along every
// chunk boundary into a grid (at most Limits.MaxCells regions) and gives
// each region to exactly one chunk; an overlap, a hole or a chunk beyond
// the tensor is an ErrCorrupt naming the tensor, the chunk index and the
// element. Each chunk's item is decoded by the torch codec
// (Options.Torch, charged to the item file's decode budget) and must be
// one bare tensor of the item's dtype and the chunk's sizes. The whole
// tensor is then served lazily: a one-chunk tensor is its chunk's bytes
// (zero-copy from the mapping), any other is gathered on read, run by
// run (the elements contiguous in both the tensor and one chunk), so
// nothing the size of a tensor is materialised.
//
// # Snapshot
//
// Arrays are named by FQN ("model.layers.0.weight",
// "optim.state.0.exp_avg") and sorted by name. A tensor is an array of its
// dtype (f64 f32 f16 bf16, i64 i32 i16 i8, u64 u32 u16 u8, bool, fp8,
// complex) and whole shape. A non-tensor item is a u8 array of its bytes,
// verbatim, so it is written back byte for byte.
//
//	array     dcp.kind           "bytes" for a non-tensor item
//	          dcp.value          a non-tensor item's object as the torch
//	                             codec's tree ({"int":"42"}), informational
//	          dcp.fqn            the FQN, when it is not a portable array name
//	                             (the name is then its bytes outside
//	                             [A-Za-z0-9_.:/-] made '_', "_2"... if taken)
//	          dcp.requires_grad  "true" when TensorProperties says so
//	          dcp.pin_memory     "true" when TensorProperties says so
//	          dcp.memory_format  "channels_last" / "preserve_format"
//	snapshot  dcp.planner_data   planner_data as canonical JSON
//	                             ({"fqn":["key",0,...]}), unless it is the
//	                             trivial one of a flat state dict
//
// Nothing of the layout (world size, chunks, files, offsets, save ids) is
// kept: the same state dict saved by any number of ranks, sharded in any
// way, is the same snapshot.
//
// # Writing
//
// Write lays a snapshot out as torch 2.6's FileSystemWriter and
// DefaultSavePlanner do for one rank: one item file __0_0.distcp holding
// the non-tensor items (verbatim) and then every tensor as one chunk at
// offset 0 (the torch codec's torch.save archive of the whole tensor),
// each group in FQN order, and .metadata: a protocol-2 pickle of the same
// dataclasses (same module and class names, TensorProperties with its
// tuple state, MetadataIndex(fqn, index, offset), _StorageInfo), the
// planner data (dcp.planner_data, else each FQN its own path) and a
// StorageMeta whose save_id derives from the item bytes.
// torch.distributed.checkpoint.load reads it into any world size. The
// directory is written into a temp directory beside the target, fsynced
// and renamed; the output depends only on the snapshot. Attributes of
// other formats, and arrays of dtypes torch lacks, need
// EncodeOptions.Lossy (reported through Lost).
//
// Besides snapshot and formats, this package imports formats/pickle (the
// one unpickler) and internal/atomicfile (directory fsync); it never
// imports a codec: the torch codec comes through Options.
package dcp
