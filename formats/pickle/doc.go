// Package pickle is snapd's one unpickler: a bounded pickle virtual
// machine (protocols 0–5) that builds plain data and never runs code.
// Every pickle snapd reads goes through it: torch .pt files (zip and
// legacy), FOLD's TSAV chunks, DCP .metadata files.
//
// # What callers supply
//
//	Options.Resolve      the allowlist: (module, name) -> *Global, a Go
//	                     behaviour (Call) that builds plain data, or a
//	                     refusal. PlainGlobal supplies OrderedDict,
//	                     Counter, set, frozenset, bytearray, complex and
//	                     _codecs.encode.
//	Options.Persistent   BINPERSID/PERSID ids -> values (torch storages)
//	Options.Budget       charged for every object built (*formats.Budget)
//	ctx                  checked every CheckEvery opcodes
//	Options.Placeholders the unknown-global mode (below)
//
// # Values
//
// None, bool, int64/*big.Int, float64, string, Bytes, ByteArray, *List,
// *Tuple, *Dict (Class names a dict subclass), *Set, *Global, *Opaque, and
// the values the resolver's callables and the persistent loader return.
// Values are references: BINGET of a memoized 4 MB string pushes the same
// string, and using it as a dict key again costs nothing more (key
// identities are interned per object, see key.go).
//
// # Bounds
//
//   - steps: one per opcode, one per item an opcode moves, one per item
//     (and per 64 bytes) a global's Call receives; at most StepsPerByte ×
//     len(pickle) + StepsSlack (Options.MaxSteps), so the work is linear
//     in the input;
//   - memory: every object built is charged to Options.Budget before it
//     is kept (objectCost per container, global, placeholder or call;
//     slotCost per item and stack slot; entryBytes per dict entry, set
//     item and memo entry; the bytes of every string, bytes and int read;
//     the entries of the key-identity tables), in batches of chargeBatch;
//   - depth: tuples nest at most Options.MaxDepth (DefaultMaxDepth)
//     deep, checked when built; key identities (hashing, equality) are
//     computed once per tuple from its items' identities, linear in its
//     length, recursing at most that deep; Walk is depth- and
//     node-bounded and enters each container once;
//   - memo entries ≤ Options.MaxMemo, nested MARKs ≤ Options.MaxMarks,
//     integers ≤ 4096 bytes (LONG1/LONG4) or 1000 digits (INT/LONG), every
//     length checked against the bytes left before anything is read.
//
// Opcodes that build arbitrary objects (INST, OBJ, EXT1/2/4) and
// out-of-band buffers are refused (ErrRefused).
//
// # Unknown globals
//
// A global the resolver does not allow is never looked up. Without
// Options.Placeholders the pickle is refused: Next keeps reading to the
// end (everything stays bounded) so that the error can name the first
// such global, its opcode's offset and its key path in the result
// (Error.Path: "optimizer.param_groups.0.lr_lambda"), and any later
// failure is reported as that refusal. With Options.Placeholders the
// global becomes an *Opaque recording (module, name) and its offset;
// REDUCE/NEWOBJ/NEWOBJ_EX of it make an *Opaque instance recording the
// arguments, BUILD its state, APPEND(S)/SETITEM(S) its items; Unknowns
// lists them with their key paths, so a caller can extract every tensor
// it can name and carry the rest verbatim.
//
// # Errors
//
// Failures are *Error values: Offset (Options.Base + position of the
// opcode), Path when knowable, Check (never the file's content: names go
// through PrintableName), and Err, the class: formats.ErrCorrupt,
// formats.ErrLimit, formats.ErrUnsupported or ErrRefused. A context's
// error, and a *formats.Error from the persistent loader, are returned as
// they are. Callers add where the pickle is ("member data.pkl").
package pickle
