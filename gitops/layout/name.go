package layout

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
)

// Stable names inside a generation directory.
const (
	FileWTXT     = "current.wtxt"       // Single
	DirWTXTParts = "current.wtxt.parts" // Split (MANIFEST + parts)
	DirWTXTSegs  = "current.wtxt.segs"  // Segments
	FileSkeleton = "current.wtxt.skel"  // Skeleton (or FileSkeleton + PartsSuffix)
	// PartsSuffix names the parts directory of a file stored split.
	PartsSuffix = ".parts"
)
