package layout

import (
	"errors"

	"github.com/snapd-ml/snapd/internal/where"
)

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

// Where locates a failure of Detect or Stored: the entry of the generation
// directory at fault, the check "layout/missing" (ErrNoLayout) or
// "layout/ambiguous" (ErrAmbiguous).
func (e *DetectError) Where() where.Where {
	w := where.None()
	w.File = e.Path
	w.Check = where.Check(where.Layout, "detect")
	switch {
	case errors.Is(e.Err, ErrNoLayout):
		w.Check = where.Check(where.Layout, "missing")
	case errors.Is(e.Err, ErrAmbiguous):
		w.Check = where.Check(where.Layout, "ambiguous")
	}
	return w
}
