// Package layout owns where a generation's bytes live: the names of the
// files a layout keeps in a generation directory (Config.Path of a
// gitops.Repo), and Detect, the only place a stored layout is recognised.
//
// # Layouts
//
// A generation's WTXT is stored in exactly one of four layouts
// (docs/FORMAT.md §5–§6 is the byte-level contract):
//
//	Single    current.wtxt              the WTXT as one file
//	Split     current.wtxt.parts/       MANIFEST + *.part: the WTXT cut at
//	                                    line boundaries (SplitParts)
//	Segments  current.wtxt.segs/        MANIFEST + skeleton pieces (*.part,
//	                                    every line but the base64 ones) +
//	                                    seg/<hh>/<sha256>.seg: the raw tensor
//	                                    bytes in the same Git tree
//	Skeleton  current.wtxt.skel[.parts] the skeleton (one file or parts);
//	                                    the raw tensor bytes are segment
//	                                    blobs in an OCI registry
//
// Segments and Skeleton are the same shape (wtxt.SplitIndexed to write,
// wtxt.AssembleNamed over a wtxt.BlobSource to read), differing only in
// where the segment blobs live.
//
// A multi-rank (sharded) generation is the fifth, Ranks: ranks/ holds its
// WTXT-RANKS index and one skeleton per rank (formats/wtxt/ranks), the
// rank parts' segment blobs are in an OCI registry. It has no single WTXT,
// so Detect does not return it; IsRanks recognises it.
//
// Sidecar files (a DELTA, a WSUM, a seal) are stored whole or, when
// large, as NAME.parts/ like the Split layout (Stored recognises which).
package layout
