package layout

import wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"

// Name names a layout as configured (gitops.Config.Layout), recorded
// (the Snapd-Layout trailer, generation.txt's layout=) and reported.
type Name string

// The stored layouts.
const (
	// Single stores the WTXT as one file, FileWTXT.
	Single Name = "single"
	// Split stores the WTXT cut into parts, DirWTXTParts.
	Split Name = "split"
	// Segments stores the WTXT as skeleton pieces and raw segment blobs
	// in the Git tree, DirWTXTSegs, so a clustered change adds only the
	// changed segments.
	Segments Name = "segments"
	// Skeleton stores the WTXT's skeleton, FileSkeleton (or its parts),
	// in Git and its tensor bytes in an OCI registry. It is recorded,
	// never configured.
	Skeleton Name = "skeleton"
	// Ranks stores a multi-rank (sharded) generation: DirRanks holds its
	// WTXT-RANKS index and one skeleton per rank (formats/wtxt/ranks);
	// the rank parts' raw tensor bytes are segment blobs in an OCI
	// registry. It is recorded, never configured, and has no single WTXT
	// (Detect does not return it: IsRanks recognises it).
	Ranks Name = "ranks"
)

// Stable names inside a generation directory.
const (
	FileWTXT     = "current.wtxt"       // Single
	DirWTXTParts = "current.wtxt.parts" // Split (MANIFEST + parts)
	DirWTXTSegs  = "current.wtxt.segs"  // Segments
	FileSkeleton = "current.wtxt.skel"  // Skeleton (or FileSkeleton + PartsSuffix)
	DirRanks     = wranks.DirName       // Ranks: index.ranks + rank-RRRRR.skel
	// PartsSuffix names the parts directory of a file stored split.
	PartsSuffix = ".parts"
)
