// Package sharddir reads a directory of checkpoint files as one snapshot
// and writes a snapshot back as such a directory. It is not a
// formats.Codec (a codec reads one io.ReaderAt); it decodes each file with
// the codec a Registry (normally the caller's *formats.Registry) detects,
// so any registered format — safetensors today, a torch codec for
// pytorch_model-*.bin shards once it is registered — works as a shard.
//
// # Layouts
//
// Index layout (Hugging Face sharded checkpoints). The directory holds a
// file named "*.index.json" ("model.safetensors.index.json",
// "pytorch_model.bin.index.json", ...):
//
//	{"metadata": {"total_size": 123, ...},
//	 "weight_map": {"tensor.name": "model-00001-of-00002.safetensors", ...}}
//
// The weight_map decides which shard holds which tensor. Every shard it
// names is decoded; the snapshot holds exactly the weight_map's tensors,
// under the array names their shard's codec gives them. It is an error
// (ErrCorrupt, naming the tensor and the shard) when a tensor is in two
// shards, when a shard holds a tensor the index does not list or maps to
// another shard, when a listed tensor is missing from its shard, and when
// a shard does not exist. A tensor's name in its file is the codec's
// "<codec>.name" attribute when the codec renamed it (safetensors:
// "safetensors.name"), else its array name. With several index files the
// "*.safetensors.index.json" one is used (else the first by name); the
// others, and checkpoint files the index does not name, are ignored with
// a logged note.
//
// Plain layout (no index). Every regular file whose codec the registry
// detects (magic bytes, then extension) is decoded; its arrays are named
// "<file name>/<array name>" ("b.safetensors/w"; '/' is a portable WTXT
// name byte and cannot occur in a file name, so the split is
// unambiguous). A file name that is not portable becomes its bytes with
// the others replaced by '_' plus '-' and 8 hex digits of its SHA-256. A
// directory with exactly one checkpoint file keeps that file's array names
// unprefixed (what snapd did for single-file directory generations
// before). Files of no known format are ignored with a logged note.
//
// In both layouts: entries whose name starts with '.' are skipped (temp
// files of publishers), subdirectories (and symlinks to directories
// inside the tree) are skipped with a note, and small
// text files (.json .txt .md .yaml .yml .jinja, at most 1 MiB each and
// 8 MiB in all, valid UTF-8 without NUL, portable name) — config.json,
// generation_config.json, README.md, vocab.txt, ... — are kept as
// snapshot attributes "sharddir.text.<name>", so they are signed with the
// weights and written back; larger or binary ones (tokenizer.json of big
// vocabularies, tokenizer.model) are ignored with a note. Arrays are
// sorted by name; the result depends only on the directory's content.
//
// # Attributes
//
//	snapshot  sharddir.layout       Layout as canonical JSON: kind ("index" or
//	                                "plain"), index file name and its metadata
//	                                (canonical JSON, numbers as written), and
//	                                per checkpoint file: name, codec, array-name
//	                                prefix, the file's own snapshot attributes
//	snapshot  sharddir.text.<name>  content of a kept text file
//	array     sharddir.file         the file the array came from
//
// # Security
//
// The directory is opened once (O_DIRECTORY|O_NONBLOCK) and every file
// relative to that descriptor with openat2(RESOLVE_BENEATH|
// RESOLVE_NO_MAGICLINKS) and O_NONBLOCK|O_NOCTTY: a symlink to a sibling
// is followed, one that leaves the directory (absolute, "..", /dev/zero)
// is refused (ErrUnsafe), and on kernels without openat2 every symlink is
// refused (O_NOFOLLOW). The opened descriptor is fstat'ed and anything but
// a regular file (FIFO, device, socket, directory) is refused before a
// byte is read; a FIFO or device entry anywhere in the directory is an
// error, not a skip. Index shard names must be plain file names: absolute
// paths, "..", '/', '\', NUL and control bytes, dot-names and names over
// 255 bytes are refused (ErrUnsafe, naming the tensor). The index is read
// only up to Limits.MaxIndexBytes (32 MiB; the largest public indexes,
// of MoE models with ~90,000 tensors, are about 9 MB) and Limits.MaxIndexEntries
// (1,000,000) weight_map entries; duplicate keys at any level, unknown
// top-level keys and trailing data are refused; JSON errors give the byte
// offset, never the content. At most Limits.MaxEntries directory entries
// and Limits.MaxFiles checkpoint files are considered. Checkpoint files
// are memory-mapped (snapshot.MapOpenFile) and decoded by their codecs,
// which check every size themselves.
//
// # Writing
//
// Write lays a snapshot out as a directory (MakePlan) and writes it
// atomically: files go into a temp directory beside the target, each is
// fsynced, the temp directory is fsynced and renamed (RENAME_NOREPLACE) to
// the target, which must not exist or be empty, and the parent is fsynced.
//
//   - With a recorded layout and no ShardSize, the directory is reproduced:
//     same files, same grouping, each file's attributes, the text files,
//     the index with its recorded metadata. Each file keeps its recorded
//     format unless WriteOptions.Codec names another; then index shards are
//     renamed the HF way for that format and plain files get its extension.
//     So DIR -> WTXT -> DIR gives the same files byte for byte when the
//     codecs write canonical files, and DIR -> WTXT -> DIR -> WTXT is a
//     fixed point.
//   - Otherwise (no layout recorded, or ShardSize > 0) it writes an HF
//     index layout: arrays in name order, greedily packed into shards of at
//     most ShardSize bytes (default 5 GB, as save_pretrained); a tensor
//     larger than that gets a shard of its own (huggingface_hub's rule).
//     Shards are named model-00001-of-0000N.safetensors (torch:
//     pytorch_model-…bin; other formats model-…<ext>); an index is written
//     even for one shard so that reading the directory back gives the same
//     array names. Snapshot attributes of a single-file source go to every
//     shard (e.g. safetensors __metadata__).
//   - The index is written as HF writes it: json.dumps(index, indent=2,
//     sort_keys=True) + "\n". metadata is the recorded object, with
//     "total_size" (the sum of the tensors' bytes) added when it has none;
//     a recorded total_size is kept as it was.
//
// A write interrupted by a crash leaves a ".snapd-tmp-<name>-*" directory
// beside the target, never a partial target.
//
// Besides snapshot and formats (the codec interface), this package imports
// internal/atomicfile (fsync of directories), as snapshot's generation
// store does.
//
// Layout attributes come from untrusted WTXT files: every recorded file
// name is checked like an index shard name, so nothing is written outside
// the target directory.
package sharddir
