package chunkdiff

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/safeopen"
	"github.com/snapd-ml/snapd/snapshot"
)

// NonFiniteArray counts the elements of one float array that a
// generation made NaN or ±Inf.
type NonFiniteArray struct {
	Array  string `json:"array"`
	NewNaN int64  `json:"new_nan"`
	NewInf int64  `json:"new_inf"`
}

// NonFiniteReport is what NonFiniteIntroduced found.
type NonFiniteReport struct {
	// Arrays lists the float arrays with NaN/±Inf the head introduced
	// (nil when none).
	Arrays []NonFiniteArray `json:"arrays,omitempty"`
	// ChangedBytes is the raw size of the head's changed chunks of float
	// arrays; CheckedBytes how much of it was decoded and compared (less
	// when the budget ran out: the check is then partial).
	ChangedBytes int64 `json:"changed_bytes"`
	CheckedBytes int64 `json:"checked_bytes"`
}

// Partial reports whether the budget left changed chunks unchecked.
func (r *NonFiniteReport) Partial() bool { return r.CheckedBytes < r.ChangedBytes }

// NonFiniteIntroduced compares two plaintext WTXT generations, base and
// head, chunk by chunk and reports, per float array, the elements that
// are NaN or ±Inf in head and were not in base. Only chunks whose ch line
// differs are decoded (each checked against its crc32c); an array that is
// new, or whose type, shape or chunk geometry changed, is decoded whole
// and counts the NaN/Inf it holds beyond what the base's array of the
// same type held. Both files are read with pread, not mapped (their
// pages would count in the daemon's RSS): the cost is the structure lines
// plus the changed chunks, of which at most maxBytes (raw, head
// side; <= 0: no limit) are decoded, in file order — a dense update of a
// large model is then checked in part (Partial). The files are not
// verified otherwise (wtxt.Verify's job). basePath "" stands for no base
// (a first generation): every NaN/±Inf of head is new.
//
// A writer that still has the counts of NaN and ±Inf of both generations
// (wtxt.Result.Arrays) reads neither file for most arrays:
// NonFiniteFromCounts, then NonFiniteIntroducedIn for the arrays it
// leaves.
func NonFiniteIntroduced(ctx context.Context, basePath, headPath string, maxBytes int64) (*NonFiniteReport, error) {
	return NonFiniteIntroducedIn(ctx, basePath, headPath, nil, maxBytes)
}

// NonFiniteIntroducedIn is NonFiniteIntroduced for the head's arrays
// named in arrays only (nil: every array); the budget and the bytes
// counted in the report are those of these arrays.
func NonFiniteIntroducedIn(ctx context.Context, basePath, headPath string, arrays []string, maxBytes int64) (*NonFiniteReport, error) {
	var bb io.ReaderAt = snapshot.Bytes(nil)
	bidx := &wtxt.Index{}
	if basePath != "" {
		bf, bsize, err := openRegular(basePath)
		if err != nil {
			return nil, err
		}
		defer bf.Close()
		bb = bf
		if bidx, err = wtxt.ReadIndex(ctx, basePath, bf, bsize); err != nil {
			return nil, err
		}
	}
	hf, hsize, err := openRegular(headPath)
	if err != nil {
		return nil, err
	}
	defer hf.Close()
	hb := io.ReaderAt(hf)
	hidx, err := wtxt.ReadIndex(ctx, headPath, hb, hsize)
	if err != nil {
		return nil, err
	}
	var only map[string]struct{}
	if arrays != nil {
		only = make(map[string]struct{}, len(arrays))
		for _, a := range arrays {
			only[a] = struct{}{}
		}
	}
	rep := &NonFiniteReport{}
	budget := func(n int64) bool {
		rep.ChangedBytes += n
		if maxBytes > 0 && rep.CheckedBytes+n > maxBytes {
			return false
		}
		rep.CheckedBytes += n
		return true
	}
	for i := range hidx.Arrays {
		h := &hidx.Arrays[i]
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dt := h.DType
		if _, in := only[h.Name]; !dt.IsFloat() || only != nil && !in {
			continue
		}
		b := bidx.Array(h.Name)
		var nan, inf int64
		if b != nil && h.SameGeometry(b) && sameOffsets(b, h) {
			for i, c := range h.Chunks {
				bc := b.Chunks[i]
				if bc.SHA256 == c.SHA256 || !budget(c.Len) {
					continue
				}
				cur, err := wtxt.ReadChunk(hb, headPath, h, &c)
				if err != nil {
					return nil, err
				}
				if !snapshot.AnyNonFinite(dt, cur) {
					// Nothing non-finite now, so nothing new: the usual
					// case costs one scan, no base decode and no diff.
					continue
				}
				old, err := wtxt.ReadChunk(bb, basePath, b, &bc)
				if err != nil {
					return nil, err
				}
				d, err := diffFlat(ctx, dt, h.RowSize, old, cur)
				if err != nil {
					return nil, err
				}
				nan, inf = nan+d.NewNaN, inf+d.NewInf
			}
		} else if budget(h.Bytes) {
			n1, i1, err := countNonFinite(ctx, hb, headPath, h, dt)
			if err != nil {
				return nil, err
			}
			var n0, i0 int64
			if b != nil && b.DType == h.DType {
				if n0, i0, err = countNonFinite(ctx, bb, basePath, b, dt); err != nil {
					return nil, err
				}
			}
			nan, inf = max(0, n1-n0), max(0, i1-i0)
		}
		if nan+inf > 0 {
			rep.Arrays = append(rep.Arrays, NonFiniteArray{Array: h.Name, NewNaN: nan, NewInf: inf})
		}
	}
	return rep, nil
}

// NonFiniteCount is how many elements of one float array are NaN and
// how many ±Inf (snapshot.CountNonFinite's counts; wtxt.Encode reports
// them per array).
type NonFiniteCount struct {
	Array string `json:"array"`
	NaN   int64  `json:"nan"`
	Inf   int64  `json:"inf"`
}

// NonFiniteFromCounts is NonFiniteIntroduced decided from the counts of
// NaN and ±Inf each generation holds per float array, without reading
// either file: base lists the base's arrays holding any (nil: none, or
// no base), head the head's (arrays holding none may be listed, with
// zero counts). Where the base's array of that name held none — or
// there is none — every NaN/±Inf of the head's array is new, which is
// what the element-by-element comparison finds too; where the head's
// holds none, nothing is new. Only an array holding some in both
// generations needs the comparison (a NaN may have stayed, moved or
// been joined by others): its name is returned in recheck, for
// NonFiniteIntroducedIn, and it is not in found. found is in head's
// order.
func NonFiniteFromCounts(base, head []NonFiniteCount) (found []NonFiniteArray, recheck []string) {
	held := make(map[string]bool, len(base))
	for _, b := range base {
		if b.NaN+b.Inf > 0 {
			held[b.Array] = true
		}
	}
	for _, h := range head {
		switch {
		case h.NaN+h.Inf == 0:
		case held[h.Array]:
			recheck = append(recheck, h.Array)
		default:
			found = append(found, NonFiniteArray{Array: h.Array, NewNaN: h.NaN, NewInf: h.Inf})
		}
	}
	return found, recheck
}

// HeldNonFinite lists the arrays of an encode's result holding NaN or
// ±Inf elements (wtxt.ArrayInfo's counts), in its (WTXT) order; nil
// when none does.
func HeldNonFinite(arrays []wtxt.ArrayInfo) []NonFiniteCount {
	var out []NonFiniteCount
	for _, a := range arrays {
		if a.NaN+a.Inf > 0 {
			out = append(out, NonFiniteCount{Array: a.Name, NaN: a.NaN, Inf: a.Inf})
		}
	}
	return out
}

func sameOffsets(b, h *wtxt.IndexArray) bool {
	if len(b.Chunks) != len(h.Chunks) {
		return false
	}
	for i, c := range h.Chunks {
		if bc := b.Chunks[i]; bc.IX != c.IX || bc.Off != c.Off || bc.Len != c.Len {
			return false
		}
	}
	return true
}

// diffFlat compares two chunks' bytes as arrays of dt, in rows of
// rowSize bytes when they divide the chunk (fewer, larger rows compare
// faster), else element by element.
func diffFlat(ctx context.Context, dt snapshot.DType, rowSize int64, old, cur []byte) (*snapshot.ArrayDiff, error) {
	esz := int64(dt.Size())
	n := int64(len(old))
	if n%esz != 0 || len(old) != len(cur) {
		return nil, fmt.Errorf("chunkdiff: chunks of %d and %d bytes are not whole %s elements", len(old), len(cur), dt)
	}
	shape := []int64{n / esz}
	if rowSize > 0 && rowSize%esz == 0 && n%rowSize == 0 {
		shape = []int64{n / rowSize, rowSize / esz}
	}
	arr := func(b []byte) *snapshot.Snapshot {
		return &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "c", DType: dt, Shape: shape, Data: snapshot.Bytes(b)}}}
	}
	ds, err := snapshot.Diff(ctx, arr(old), arr(cur), snapshot.DiffOptions{})
	if err != nil {
		return nil, err
	}
	return &ds[0], nil
}

// countNonFinite counts the NaN and ±Inf elements of an array, chunk by
// chunk (a comparison with zeros: every NaN/Inf is "new" against 0).
func countNonFinite(ctx context.Context, file io.ReaderAt, name string, a *wtxt.IndexArray, dt snapshot.DType) (nan, inf int64, err error) {
	for i := range a.Chunks {
		cur, err := wtxt.ReadChunk(file, name, a, &a.Chunks[i])
		if err != nil {
			return 0, 0, err
		}
		if !snapshot.AnyNonFinite(dt, cur) {
			continue
		}
		d, err := diffFlat(ctx, dt, a.RowSize, make([]byte, len(cur)), cur)
		if err != nil {
			return 0, 0, err
		}
		nan, inf = nan+d.NewNaN, inf+d.NewInf
	}
	return nan, inf, nil
}

// openRegular opens path for positioned reads (internal/safeopen: a
// regular file, never a FIFO or device) and returns its size.
func openRegular(path string) (*os.File, int64, error) {
	f, err := safeopen.Open(path, 0)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}
