package wal

import (
	"path/filepath"

	"github.com/snapd-ml/snapd/internal/where"
)

// The Where methods of the request log's typed errors (internal/where):
// checks "wal/record" (a line that is not a valid record), "wal/corrupt"
// (bytes of a segment skipped) and "wal/cursor" (a cursor that cannot be
// resumed from).

// Where locates a line that is not a valid record: the check only (the
// reader that met the line knows its segment and offset: CorruptError).
func (e *ParseError) Where() where.Where {
	w := where.None()
	w.Check = where.Check(where.WAL, "record")
	return w
}

// Where locates skipped bytes: the segment file (its name in the WAL
// directory) and the offset of the first skipped byte.
func (e *CorruptError) Where() where.Where {
	w := where.None()
	w.File, w.Offset = SegmentName(e.Segment), e.Offset
	w.Check = where.Check(where.WAL, "corrupt")
	return w
}

// Where locates a damaged cursor: its file in the WAL directory.
func (e *CursorError) Where() where.Where {
	w := where.None()
	w.File = filepath.Join(e.Dir, CursorFile)
	w.Check = where.Check(where.WAL, "cursor")
	return w
}
