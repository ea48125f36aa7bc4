package wtxt

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"unsafe"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// DeltaStructure is a DELTA v2 file read by its structure
// (ReadDeltaStructure): the base it applies to, the target's header and,
// per array, the chunks it carries.
type DeltaStructure struct {
	BaseSHA256All [32]byte
	// Short is set for the seed's short form (`arr name=R` blocks of
	// replacement chunks for base arrays, no header): a delta without
	// header lines.
	Short bool
	// Header is the target's header (the profile form), nil in the short
	// form. Its Signed bytes are the header lines as a WTXT has them.
	Header *Header
	// Arrays are the delta's arrays in file order: every target array
	// (profile form), the replaced ones (short form).
	Arrays []DeltaArray
	// Chunks and ChunkBytes total the carried chunks and their raw bytes
	// (their ch lines' len).
	Chunks, ChunkBytes int64
	// Audit is the target's audit line without LF, "" when there is none.
	Audit string
	// Size is the number of bytes read: the delta's size.
	Size int64
}

// DeltaArray is one arr block of a delta.
type DeltaArray struct {
	Name string
	// DType, Shape and Bytes are the arr line's (zero in the short form).
	DType snapshot.DType
	Shape []int64
	Bytes int64
	// Line is the 1-based number of the arr line.
	Line int
	// Carried lists the ix of the chunks the delta holds, ascending
	// (empty: the array is the base's).
	Carried      []int64
	CarriedBytes int64
}

// ReadDeltaStructure reads the DELTA v2 file r (docs/FORMAT.md §4) by its
// structure, with the grammar ApplyDelta applies: the first line, the
// target's header (checked as a WTXT header), the arr, idx and ch lines
// (each carried chunk's ch line against its array's geometry, in the
// short form against its own len), the order of the chunks, endch, endarr,
// audit and enddelta, and that nothing follows enddelta. The carried
// base64 lines are counted (printable ASCII, none missing), not decoded:
// their base64, parity, chunk and array hashes, the signature and whether
// the delta applies to a base are ApplyDelta's checks.
//
// name is used in errors, which are *Error values naming the line, array,
// chunk and check (Check "delta", or "text" for the text rules, or
// "truncated" when the input ends early) and never quote the file.
// Memory is bounded by DefaultMaxIndexBytes (Check "limit",
// formats.ErrLimit): nothing is allocated by a declared size.
func ReadDeltaStructure(ctx context.Context, name string, r io.Reader) (*DeltaStructure, error) {
	const (
		atEnd   = "the file ends before enddelta"
		inArray = "the file ends inside the array"
		inChunk = "the file ends inside the chunk"
	)
	array, chunk, msg := "", int64(-1), atEnd
	d := &deltaReader{lr: newLineReader(r, name)}
	d.where = func() (string, int64, string) { return array, chunk, msg }
	base, err := d.readStart()
	if err != nil {
		return nil, err
	}
	_, h, line, err := d.readTargetHeader()
	if err != nil {
		return nil, err
	}
	// Without header lines the delta is in the short form, as ApplyDelta
	// reads it (even with no arrays at all).
	s := &DeltaStructure{BaseSHA256All: base, Header: h, Short: h == nil}
	var held int64
	charge := func(n int64) error {
		if held += n; held > DefaultMaxIndexBytes {
			return &Error{File: name, Line: d.lr.n, Array: array, Chunk: chunk, Check: CheckLimit, Err: formats.ErrLimit,
				Msg: fmt.Sprintf("the structure of this delta would hold more than %d bytes", int64(DefaultMaxIndexBytes))}
		}
		return nil
	}
	seen := map[string]bool{}
	for bytes.HasPrefix(line, []byte("arr ")) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var a DeltaArray
		var head *arrHead
		if n, short := isShortArr(line); short {
			if !s.Short {
				return nil, d.fail(CheckDelta, "", -1, "short form `arr name=...` cannot be mixed with a target header")
			}
			if _, ok := NameNeedsExt(n); !ok {
				return nil, d.fail(CheckDelta, "", -1, "arr name: want 1..%d bytes of A-Z a-z 0-9 _ . : / -", MaxNameLen)
			}
			a.Name = n
		} else {
			if s.Short {
				return nil, d.fail(CheckDelta, "", -1, "want `arr name=...`: a delta without the target's header is in the short form")
			}
			var m string
			if head, m = parseArr(line); m != "" {
				return nil, d.fail(CheckDelta, "", -1, "%s", m)
			}
			a = DeltaArray{Name: head.name, DType: head.dt, Shape: head.shape, Bytes: head.nbytes}
		}
		if seen[a.Name] {
			return nil, d.fail(CheckDelta, a.Name, -1, "array appears twice")
		}
		seen[a.Name] = true
		a.Line = d.lr.n
		array, msg = a.Name, inArray
		if err := charge(int64(unsafe.Sizeof(DeltaArray{})) + 2*int64(len(line))); err != nil {
			return nil, err
		}
		if line, err = d.next(); err != nil {
			return nil, err
		}
		if head != nil {
			head.geo = geometry{nbytes: head.nbytes, chunkLen: UnblockedChunk}
			if bytes.HasPrefix(line, []byte("idx ")) {
				if m := parseIdx(line, head); m != "" {
					return nil, d.fail(CheckDelta, a.Name, -1, "%s", m)
				}
				if line, err = d.next(); err != nil {
					return nil, err
				}
			}
			if m := idxPresence(head); m != "" {
				return nil, d.fail(CheckDelta, a.Name, -1, "%s", m)
			}
		}
		a.Carried = []int64{}
		for bytes.HasPrefix(line, []byte("ch ")) {
			ch, m := parseCh(line)
			if m != "" {
				return nil, d.fail(CheckDelta, a.Name, -1, "%s", m)
			}
			if len(a.Carried) > 0 && ch.ix <= a.Carried[len(a.Carried)-1] {
				return nil, d.fail(CheckDelta, a.Name, ch.ix, "chunks out of order or repeated")
			}
			if head != nil {
				if ch.ix >= head.geo.numChunks() {
					return nil, d.fail(CheckDelta, a.Name, -1, "chunk beyond the array's %d chunks", head.geo.numChunks())
				}
				if m := chGeometry(head, ch); m != "" {
					return nil, d.fail(CheckDelta, a.Name, ch.ix, "%s", m)
				}
			} else if ch.lines != numLines(ch.n) {
				return nil, d.fail(CheckDelta, a.Name, ch.ix, "ch line says len=%d lines=%d, len=%d needs lines=%d", ch.n, ch.lines, ch.n, numLines(ch.n))
			}
			chunk, msg = ch.ix, inChunk
			for k := int64(1); k <= ch.lines; k++ {
				if line, err = d.next(); err != nil {
					return nil, err
				}
				if bytes.HasPrefix(line, []byte("endch")) {
					return nil, d.fail(CheckDelta, a.Name, ch.ix, "base64 line %d of %d missing", k, ch.lines)
				}
			}
			if line, err = d.next(); err != nil {
				return nil, err
			}
			if string(line) != "endch" {
				return nil, d.fail(CheckDelta, a.Name, ch.ix, "want endch after %d base64 lines", ch.lines)
			}
			if a.CarriedBytes+ch.n < a.CarriedBytes || s.ChunkBytes+ch.n < s.ChunkBytes {
				return nil, d.fail(CheckDelta, a.Name, ch.ix, "carried bytes overflow")
			}
			if err := charge(8); err != nil {
				return nil, err
			}
			a.Carried = append(a.Carried, ch.ix)
			a.CarriedBytes += ch.n
			s.Chunks++
			s.ChunkBytes += ch.n
			chunk, msg = -1, inArray
			if line, err = d.next(); err != nil {
				return nil, err
			}
		}
		if string(line) != "endarr" {
			return nil, d.fail(CheckDelta, a.Name, -1, "want ch or endarr")
		}
		s.Arrays = append(s.Arrays, a)
		array, msg = "", atEnd
		if line, err = d.next(); err != nil {
			return nil, err
		}
	}
	want := "arr, audit or enddelta"
	if s.Short {
		want = "`arr name=...` or enddelta"
	} else if bytes.HasPrefix(line, []byte("audit")) {
		if m := checkAudit(line); m != "" {
			return nil, d.fail(CheckDelta, "", -1, "%s", m)
		}
		s.Audit = string(line)
		if line, err = d.next(); err != nil {
			return nil, err
		}
	}
	if err := d.readEnd(line, want); err != nil {
		return nil, err
	}
	s.Size = d.lr.off
	return s, nil
}

// IsDelta reports whether head, the first bytes of a file, starts like a
// DELTA v2 file (DeltaMagic and a space).
func IsDelta(head []byte) bool { return bytes.HasPrefix(head, []byte(DeltaMagic+" ")) }
