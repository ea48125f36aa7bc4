package layout

import "github.com/snapd-ml/snapd/internal/where"

// Where locates a failure of ReadSegments: the file is the path in the
// generation (DirWTXTSegs/<Path>), Line the piece's line. The cause's
// array, chunk and check stand (a *wtxt.Error: "wtxt/crc32c", ...);
// without one the check is "layout/structure" (Layout: the directory's
// structure is wrong) or "layout/parts" (a piece's or segment's content:
// missing, size, SHA-256).
func (e *SegmentsError) Where() where.Where {
	w := where.None()
	w.File = DirWTXTSegs
	if e.Path != "" {
		w.File += "/" + e.Path
	}
	w.Line = e.Line
	c := where.Cause(e.Err)
	w.Array, w.Chunk, w.Check = c.Array, c.Chunk, c.Check
	if w.Check == "" {
		w.Check = where.Check(where.Layout, "parts")
		if e.Layout {
			w.Check = where.Check(where.Layout, "structure")
		}
	}
	return w
}
