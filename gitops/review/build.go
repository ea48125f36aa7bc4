package review

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// Review events (the values GitHub's API takes).
const (
	EventApprove        = "APPROVE"
	EventRequestChanges = "REQUEST_CHANGES"
	EventComment        = "COMMENT"
)

// File statuses of a FileResult.
const (
	StatusAdded    = "added"
	StatusModified = "modified"
	StatusRemoved  = "removed"
)

// DefaultMaxComments is Options.MaxComments when zero.
const DefaultMaxComments = 50

// FileInput is one WTXT file of a change, with both versions as local
// files (the fetchers write them; Build only reads them).
type FileInput struct {
	// Path is the file's path in the repository at head (for a removed
	// file, at base).
	Path string
	// OldPath is the base path when the file was renamed ("" otherwise).
	OldPath string
	// Base and Head are local files holding the base and head versions;
	// "" when the file does not exist on that side.
	Base, Head string
	// BaseWSUM and HeadWSUM are local WSUM files for streamed snapshots
	// (root_pending); "" when absent.
	BaseWSUM, HeadWSUM string
	// Patch is the unified diff of the file as the pull request shows it
	// (GitHub's `patch` field, or `git diff` output). HasPatch is false
	// when none is available (GitHub omits it for diffs too large to
	// render); then no comment can be anchored and all are folded into the
	// review body.
	Patch    string
	HasPatch bool
	// Parsed, when set, is used instead of Patch (for diffs parsed while
	// streaming, see LocalPatch); HasPatch must be set too.
	Parsed *Patch
}

// Thresholds make a review request changes even when every integrity
// check passes. Which arrays they judge, and with which limits, is
// resolved per array by Scope (scope.go): include/exclude patterns and
// per-pattern limits, the longest matching pattern winning; counters and
// RNG state are reported but not judged unless a pattern names them.
type Thresholds struct {
	// AllowNonFinite accepts NaN/Inf newly introduced into float arrays
	// (by default they request changes).
	AllowNonFinite bool
	// AllowNonFiniteIn accepts them in the arrays these patterns match.
	AllowNonFiniteIn []string
	// MaxRelL2 requests changes when an array's relative L2 change exceeds
	// it (0 = no limit): the default for every array.
	MaxRelL2 float64
	// MaxAbsDelta requests changes when an array's max |Δ| exceeds it
	// (0 = no limit): the default for every array.
	MaxAbsDelta float64
	// RelL2Limits and AbsDeltaLimits override the defaults for the arrays
	// their patterns match (the longest matching pattern wins; a value of
	// 0 lifts the limit).
	RelL2Limits, AbsDeltaLimits []Limit
	// Include, when not empty, limits the thresholds to the arrays these
	// patterns match; Exclude removes the arrays its patterns match.
	// Excluded arrays are listed as such, never judged.
	Include, Exclude []string
}

// Options configure how a review is built.
type Options struct {
	// TrustedKeys are the Ed25519 keys a head snapshot's signature may
	// come from (keys.LoadPublicKeys).
	TrustedKeys []ed25519.PublicKey
	// HMACKey, when set, checks every array's HMAC.
	HMACKey []byte
	// RequireSignature fails a head snapshot not signed by a trusted key.
	// Giving TrustedKeys alone already does (the WTXT verifier's rule)
	// unless AllowUnsigned is set.
	RequireSignature bool
	// AllowUnsigned accepts an unsigned head despite TrustedKeys
	// (wtxt.VerifyOptions.AllowUnsigned).
	AllowUnsigned bool
	Thresholds    Thresholds
	// Approve lets a review that passes everything be an APPROVE (else it
	// is a COMMENT).
	Approve bool
	// MaxComments caps line comments; the rest are folded into the body.
	// 0 means DefaultMaxComments; negative means no line comments.
	MaxComments int
	// HeadSHA is the commit reviewed; it goes into the hidden markers that
	// make re-runs idempotent.
	HeadSHA string
	// Pictures are the diff pictures shown in the body as images linked
	// from the repository (ReviewPullRequest fills them from the pull
	// request's changed *.diff.svg files; pictures.go).
	Pictures []PictureRef
	// Logger receives debug messages (nil = discard).
	Logger *slog.Logger
	// Registry, when set, serves the segment blobs of skeleton-layout
	// files (*.wtxt.skel): both versions are then assembled and reviewed
	// in full; without it a skeleton is reviewed from its ch lines
	// (skeleton.go).
	Registry wtxt.BlobSource
	// Resumes are the resume records between the base and the head,
	// newest first (ResumeFinder; ReviewPullRequest fills them when its
	// Fetcher reads history): a head that does not continue the base's
	// chain is then explained by the resume instead of noted as out of
	// order.
	Resumes []Resume
}

// Review is a complete pull-request review: the event, the summary body
// and the line comments that could be anchored in the diff.
type Review struct {
	HeadSHA  string
	Event    string
	Body     string
	Comments []Comment
	Files    []*FileResult

	opts Options // for re-rendering (foldAll)
}

// Comment is a line comment on the RIGHT (head) side of a file's diff.
type Comment struct {
	Path string
	// Line is the line of the head file the comment is on (the `ch` line
	// of a changed chunk, or the `arr` line of a new/reshaped array).
	Line int
	// Position is the legacy diff position of Line in the file's patch.
	Position int
	Array    string
	Chunk    int64 // -1 for an array-level comment
	// Marker is the hidden HTML comment that starts Body and identifies
	// the comment across re-runs.
	Marker string
	Body   string
}

// ChunkChange is one changed WTXT chunk of a head file.
type ChunkChange struct {
	Array string
	Chunk int64 // ix; -1 for an array-level change (added/reshaped/retyped)
	Line  int   // line of the ch (or arr) line in the head file
	// FirstRow and EndRow delimit the chunk's rows [FirstRow, EndRow).
	FirstRow, EndRow int64
	// Stats is the element-level comparison of the chunk's rows (row
	// numbers in ChangedRows are absolute); nil when not computable.
	Stats *snapshot.ArrayDiff
	// Change is the array's change kind.
	Change snapshot.ArrayChange
	// Anchored is set when the line appears in the patch.
	Anchored bool
	Position int
	// NoStats, when Stats is nil, says why (a skeleton reviewed without
	// its registry); "" means a side does not decode.
	NoStats string
}

// FileResult is what the review says about one file.
type FileResult struct {
	Path, OldPath string
	Status        string
	// Report is the verification report of the head version (nil for a
	// removed file or when the file could not be read).
	Report  *wtxt.Report
	BaseGen string
	HeadGen string
	// BaseMerkle is the base version's merkle_this ("" when unknown).
	BaseMerkle string
	// Diffs is snapshot.Diff of base against head (nil when either side
	// does not decode).
	Diffs []snapshot.ArrayDiff
	// BaseMeta and HeadMeta are the two versions' generation metadata
	// (snapshot.UserMeta; nil when a side has none or does not decode),
	// shown as a table old → new.
	BaseMeta, HeadMeta snapshot.UserMeta
	// Scopes says, by array name, how the thresholds judged each array of
	// Diffs (Thresholds.Scope).
	Scopes map[string]ArrayScope
	Chunks []ChunkChange
	// Collected lists the generations (as written) of this file's
	// versions whose content retention collected from the registry
	// (skeleton layout, collected.go): their rows could not be compared.
	Collected []string
	// Problems make the review REQUEST_CHANGES.
	Problems []string
	// Notes are facts that keep a review from approving without being
	// the change's fault (e.g. the base version does not decode).
	Notes    []string
	HasPatch bool

	// metaUnknown: a version's metadata could not be read (its document
	// was collected), so BaseMeta and HeadMeta are not shown as a table.
	metaUnknown bool
	// arrayChanges are a skeleton reviewed from its lines' changed
	// arrays, one "`name`: what changed" each (the body lists them when
	// a version's content was collected).
	arrayChanges []string
}

// Build verifies and compares every file and renders the review. Content
// problems (a failed check, a threshold) become part of the review; an
// error is returned only when a local file cannot be read or ctx ends.
func Build(ctx context.Context, files []FileInput, opts Options) (*Review, error) {
	if opts.MaxComments == 0 {
		opts.MaxComments = DefaultMaxComments
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rv := &Review{HeadSHA: opts.HeadSHA, opts: opts}
	sorted := append([]FileInput(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, in := range sorted {
		log.Debug("review file", "path", in.Path, "base", in.Base != "", "head", in.Head != "", "patch", in.HasPatch)
		var fr *FileResult
		var err error
		if isRanksIndex(in.Path) {
			fr, err = reviewRanksIndex(ctx, in, sorted, opts)
		} else {
			fr, err = reviewFile(ctx, in, opts)
		}
		if err != nil {
			return nil, err
		}
		rv.Files = append(rv.Files, fr)
	}
	rv.Event = decideEvent(rv.Files, opts)
	rv.Comments = makeComments(rv.Files, opts)
	rv.Body = renderBody(rv, opts)
	return rv, nil
}

func decideEvent(files []*FileResult, opts Options) string {
	clean := len(files) > 0
	for _, f := range files {
		if len(f.Problems) > 0 {
			return EventRequestChanges
		}
		if len(f.Notes) > 0 {
			clean = false
		}
	}
	if opts.Approve && clean {
		return EventApprove
	}
	return EventComment
}

// opened is one decoded version of a file.
type opened struct {
	snap *snapshot.Snapshot
	idx  *wtxt.Index
	hdr  *wtxt.Header
	m    *snapshot.Mapping
}

func (o *opened) close() {
	if o != nil && o.m != nil {
		o.m.Close()
	}
}

// openVersion indexes and decodes a local WTXT file. Content errors are
// returned as decodeErr (the file is still indexed when possible); err is
// an I/O error.
func openVersion(ctx context.Context, path, name string) (o *opened, decodeErr, err error) {
	o = &opened{}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	o.hdr, decodeErr = wtxt.ReadHeader(f)
	if decodeErr != nil {
		return o, decodeErr, nil
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if o.idx, decodeErr = wtxt.ReadIndex(ctx, name, f, fi.Size()); decodeErr != nil {
		return o, decodeErr, nil
	}
	m, err := snapshot.MapFile(path)
	if err != nil {
		return nil, nil, err
	}
	s, derr := wtxt.New().Decode(ctx, m, m.Size(), formats.DecodeOptions{Name: name})
	if derr != nil {
		m.Close()
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return o, derr, nil
	}
	o.snap, o.m = s, m
	return o, nil, nil
}

// newFileResult starts a file's result with its status from which of its
// versions exist (an error when neither does).
func newFileResult(in FileInput) (*FileResult, error) {
	fr := &FileResult{Path: in.Path, OldPath: in.OldPath, HasPatch: in.HasPatch}
	switch {
	case in.Base == "" && in.Head == "":
		return nil, fmt.Errorf("review: %s: neither a base nor a head version", in.Path)
	case in.Base == "":
		fr.Status = StatusAdded
	case in.Head == "":
		fr.Status = StatusRemoved
	default:
		fr.Status = StatusModified
	}
	return fr, nil
}

func reviewFile(ctx context.Context, in FileInput, opts Options) (*FileResult, error) {
	if isSkeletonFile(in.Head) || in.Head == "" && isSkeletonFile(in.Base) {
		return reviewSkeleton(ctx, in, opts)
	}
	fr, err := newFileResult(in)
	if err != nil {
		return nil, err
	}
	var base, head *opened
	defer func() { base.close(); head.close() }()

	var prevMerkle *[32]byte
	if in.Base != "" {
		var derr, err error
		base, derr, err = openVersion(ctx, in.Base, in.Path+"@base")
		if err != nil {
			return nil, fmt.Errorf("review: %s: base version: %w", in.Path, err)
		}
		if derr != nil {
			fr.Notes = append(fr.Notes, "base version does not decode, so nothing is compared: "+derr.Error())
		}
		if base.hdr != nil {
			fr.BaseGen = base.hdr.Gen
			switch {
			case !base.hdr.Pending:
				pm := base.hdr.MerkleThis
				prevMerkle = &pm
			case in.BaseWSUM != "":
				pm, err := wsumMerkle(in.BaseWSUM)
				if err != nil {
					fr.Notes = append(fr.Notes, "base WSUM unreadable, chain not checked: "+err.Error())
				} else {
					prevMerkle = &pm
				}
			default:
				fr.Notes = append(fr.Notes, "base version is streamed (root_pending) and has no WSUM: chain not checked")
			}
			if prevMerkle != nil {
				fr.BaseMerkle = hex.EncodeToString(prevMerkle[:])
			}
			if prevMerkle != nil && IsRankSkeleton(in.Path) {
				// A rank part chains to the job's chain id (ranks.go).
				pm := base.hdr.MerklePrev
				prevMerkle = &pm
			}
		}
	}
	if in.Head != "" && prevMerkle != nil && base.hdr != nil {
		// Two files prove the chain only when the head is the base's next
		// generation; a PR spanning several generations is checked link
		// by link by `snapd verify-repo`, not here.
		if f, err := os.Open(in.Head); err == nil {
			h, herr := wtxt.ReadHeader(f)
			f.Close()
			switch {
			case herr != nil || h.Meta.Gen == base.hdr.Meta.Gen+1 && h.MerklePrev == *prevMerkle:
			case len(opts.Resumes) > 0:
				fr.Notes = append(fr.Notes, resumeNote(opts.Resumes[0]))
				prevMerkle = nil
			case h.Meta.Gen != base.hdr.Meta.Gen+1:
				fr.Notes = append(fr.Notes, fmt.Sprintf("head is generation %s, base %s: the chain between them spans several commits and is checked by `snapd verify-repo`, not from these two files", h.Gen, base.hdr.Gen))
				prevMerkle = nil
			}
		}
	}
	if in.Head != "" {
		vopts := wtxt.VerifyOptions{File: in.Path, TrustedKeys: opts.TrustedKeys, HMACKey: opts.HMACKey,
			PrevMerkle: prevMerkle, RequireSignature: opts.RequireSignature, AllowUnsigned: opts.AllowUnsigned}
		if in.HeadWSUM != "" {
			b, err := readLimited(in.HeadWSUM, 4096)
			if err != nil {
				return nil, fmt.Errorf("review: %s: head WSUM: %w", in.Path, err)
			}
			vopts.WSUM = b
		}
		f, err := os.Open(in.Head)
		if err != nil {
			return nil, fmt.Errorf("review: %s: head version: %w", in.Path, err)
		}
		rep, verr := wtxt.Verify(ctx, f, vopts)
		f.Close()
		var werr *wtxt.Error
		if verr != nil && !errors.As(verr, &werr) {
			return nil, fmt.Errorf("review: %s: verify head: %w", in.Path, verr)
		}
		fr.Report = rep
		if rep != nil {
			if rep.Header != nil {
				fr.HeadGen = rep.Header.Gen
			}
			for _, fl := range rep.Failures {
				fr.Problems = append(fr.Problems, "verification failed: "+fl.Error())
			}
		}
		if verr != nil && (rep == nil || len(rep.Failures) == 0) {
			fr.Problems = append(fr.Problems, "verification failed: "+verr.Error())
		}
		var derr error
		head, derr, err = openVersion(ctx, in.Head, in.Path)
		if err != nil {
			return nil, fmt.Errorf("review: %s: head version: %w", in.Path, err)
		}
		if derr != nil && verr == nil {
			fr.Problems = append(fr.Problems, "head version does not decode: "+derr.Error())
		}
		if head.hdr != nil && base != nil && base.hdr != nil && head.hdr.Meta.Gen <= base.hdr.Meta.Gen && len(opts.Resumes) == 0 {
			fr.Notes = append(fr.Notes, fmt.Sprintf("generation does not increase: base %s, head %s", fr.BaseGen, head.hdr.Gen))
		}
	}

	// Array-level comparison.
	var baseSnap, headSnap *snapshot.Snapshot
	if base != nil {
		baseSnap = base.snap
	}
	if head != nil {
		headSnap = head.snap
	}
	if baseSnap != nil {
		fr.BaseMeta = baseSnap.UserMeta
	}
	if headSnap != nil {
		fr.HeadMeta = headSnap.UserMeta
	}
	bothOK := (in.Base == "" || baseSnap != nil) && (in.Head == "" || headSnap != nil)
	if bothOK {
		a, b := baseSnap, headSnap
		if a == nil {
			a = &snapshot.Snapshot{}
		}
		if b == nil {
			b = &snapshot.Snapshot{}
		}
		var hidx *wtxt.Index
		if head != nil {
			hidx = head.idx
		}
		ds, err := snapshot.Diff(ctx, a, b, snapshot.DiffOptions{RowsPerChunk: geometryOf(hidx)})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			fr.Notes = append(fr.Notes, "comparison failed: "+err.Error())
		} else {
			fr.Diffs = ds
			fr.Scopes = scopes(ds, &opts.Thresholds)
			fr.Problems = append(fr.Problems, thresholdProblems(ds, fr.Scopes)...)
		}
	}

	// Chunk-level changes, from the files' structure (exact for any
	// geometry), with per-chunk numbers where both sides decode.
	if head != nil && head.idx != nil {
		var bidx *wtxt.Index
		if base != nil {
			bidx = base.idx
		}
		patch := in.Parsed
		if in.HasPatch && patch == nil {
			p, err := ParsePatch(in.Patch)
			if err != nil {
				fr.Notes = append(fr.Notes, "the diff could not be parsed, so no line comments: "+err.Error())
				fr.HasPatch = false
			} else {
				patch = p
			}
		}
		chunks, err := chunkChanges(ctx, bidx, head.idx, baseSnap, headSnap, fr.Diffs)
		if err != nil {
			return nil, fmt.Errorf("review: %s: %w", in.Path, err)
		}
		for i := range chunks {
			if pos, ok := patch.Position(chunks[i].Line); ok {
				chunks[i].Anchored, chunks[i].Position = true, pos
			}
		}
		fr.Chunks = chunks
	}
	return fr, nil
}

// geometryOf returns the chunk geometry of the head file for snapshot.Diff:
// rows_per_chunk from the idx line, or, for arrays without one (fixed
// 32768-byte chunks), the rows of one such chunk (approximate when rows
// straddle chunks; the exact chunk list comes from chunkChanges).
func geometryOf(x *wtxt.Index) func(*snapshot.Array, int64) int64 {
	return func(a *snapshot.Array, rowSize int64) int64 {
		if e := x.Array(a.Name); e != nil && e.RowsPerChunk > 0 {
			return e.RowsPerChunk
		}
		if x != nil && rowSize > 0 {
			return max(1, 32768/rowSize)
		}
		return snapshot.DefaultRowsPerChunk(rowSize)
	}
}

// scopes resolves t for every array of ds (the head's dtype and shape,
// the base's for a removed array).
func scopes(ds []snapshot.ArrayDiff, t *Thresholds) map[string]ArrayScope {
	out := make(map[string]ArrayScope, len(ds))
	for _, d := range ds {
		out[d.Name] = t.Scope(d.Name, d.DType, d.Shape)
	}
	return out
}

func thresholdProblems(ds []snapshot.ArrayDiff, sc map[string]ArrayScope) []string {
	var out []string
	for _, d := range ds {
		t := sc[d.Name]
		if d.Change != snapshot.Modified || !t.Thresholded {
			continue
		}
		if !t.AllowNonFinite && d.NewNaN+d.NewInf > 0 {
			out = append(out, fmt.Sprintf("array `%s`: %d NaN and %d Inf newly introduced", d.Name, d.NewNaN, d.NewInf))
		}
		// The limits judge the finite pairs (non-finite changes are the
		// NaN/Inf rule's); integers have no non-finite values.
		rel, maxAbs := d.RelL2, d.MaxAbsDelta
		if snapshot.IsFloatDType(d.DType) {
			rel, maxAbs = d.FiniteRelL2, d.FiniteMaxAbsDelta
		}
		if t.MaxRelL2 > 0 && rel > t.MaxRelL2 {
			out = append(out, fmt.Sprintf("array `%s`: relative L2 change %s exceeds the limit %s", d.Name, num(rel), num(t.MaxRelL2)))
		}
		if t.MaxAbsDelta > 0 && maxAbs > t.MaxAbsDelta {
			out = append(out, fmt.Sprintf("array `%s`: max |Δ| %s exceeds the limit %s", d.Name, num(maxAbs), num(t.MaxAbsDelta)))
		}
	}
	return out
}

// chunkChanges lists the head file's changed chunks: every chunk of an
// array whose ch line (sha256 at the same ix, same geometry) differs from
// the base. New, reshaped or retyped arrays give one array-level entry on
// their arr line instead.
func chunkChanges(ctx context.Context, bidx, hidx *wtxt.Index, baseSnap, headSnap *snapshot.Snapshot, ds []snapshot.ArrayDiff) ([]ChunkChange, error) {
	kinds := map[string]snapshot.ArrayChange{}
	for _, d := range ds {
		kinds[d.Name] = d.Change
	}
	baseArrays, headArrays := arrayMap(baseSnap), arrayMap(headSnap)
	var out []ChunkChange
	for i := range hidx.Arrays {
		h := &hidx.Arrays[i]
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b := bidx.Array(h.Name)
		kind, known := kinds[h.Name]
		if !known {
			// Not in the decoded snapshots (the reserved attrs array, or a
			// side that does not decode): classify from the structure.
			switch {
			case b == nil:
				kind = snapshot.Added
			case b.DType != h.DType:
				kind = snapshot.Retyped
			case !slices.Equal(b.Shape, h.Shape):
				kind = snapshot.Reshaped
			default:
				kind = snapshot.Modified
			}
		}
		if kind == snapshot.Added || kind == snapshot.Reshaped || kind == snapshot.Retyped {
			out = append(out, ChunkChange{Array: h.Name, Chunk: -1, Line: h.Line, Change: kind})
			continue
		}
		sameGeo := b != nil && b.RowsPerChunk == h.RowsPerChunk && b.RowSize == h.RowSize
		ba, ha := baseArrays[h.Name], headArrays[h.Name]
		for _, c := range h.Chunks {
			if sameGeo && c.IX < int64(len(b.Chunks)) {
				bc := b.Chunks[c.IX]
				if bc.IX == c.IX && bc.Off == c.Off && bc.Len == c.Len && bc.SHA256 == c.SHA256 {
					continue
				}
			}
			cc := ChunkChange{Array: h.Name, Chunk: c.IX, Line: c.Line, Change: snapshot.Modified}
			if ha != nil {
				rowSize, rows := snapshot.RowGeometry(ha)
				if rowSize > 0 {
					cc.FirstRow = c.Off / rowSize
					cc.EndRow = min(rows, (c.Off+c.Len+rowSize-1)/rowSize)
				}
				if ba != nil && rowSize > 0 && cc.EndRow > cc.FirstRow {
					st, err := chunkStats(ctx, ba, ha, cc.FirstRow, cc.EndRow, rowSize)
					if err != nil {
						return nil, err
					}
					cc.Stats = st
				}
			}
			out = append(out, cc)
		}
	}
	return out, nil
}

func arrayMap(s *snapshot.Snapshot) map[string]*snapshot.Array {
	m := map[string]*snapshot.Array{}
	if s != nil {
		for _, a := range s.Arrays {
			m[a.Name] = a
		}
	}
	return m
}

// chunkStats runs snapshot.Diff over rows [r0, r1) of a and b (same dtype
// and shape), giving the chunk's own numbers; row numbers are made
// absolute.
func chunkStats(ctx context.Context, a, b *snapshot.Array, r0, r1, rowSize int64) (*snapshot.ArrayDiff, error) {
	var shape []int64 // a scalar stays a scalar (one row of one element)
	if len(b.Shape) > 0 {
		shape = append([]int64{r1 - r0}, b.Shape[1:]...)
	}
	sub := func(x *snapshot.Array) *snapshot.Snapshot {
		return &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: x.Name, DType: x.DType, Shape: shape,
			Data: snapshot.Section(x.Data, r0*rowSize, (r1-r0)*rowSize)}}}
	}
	ds, err := snapshot.Diff(ctx, sub(a), sub(b), snapshot.DiffOptions{})
	if err != nil {
		return nil, fmt.Errorf("array %q rows %d-%d: %w", b.Name, r0, r1-1, err)
	}
	d := ds[0]
	for i := range d.ChangedRows {
		d.ChangedRows[i].Start += r0
		d.ChangedRows[i].End += r0
	}
	d.Chunks, d.RowsPerChunk = nil, 0
	return &d, nil
}

func wsumMerkle(path string) ([32]byte, error) {
	b, err := readLimited(path, 4096)
	if err != nil {
		return [32]byte{}, err
	}
	w, err := wtxt.ParseWSUM(b)
	if err != nil {
		return [32]byte{}, err
	}
	return w.MerkleThis, nil
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, larger than the limit %d", path, st.Size(), limit)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && st.Size() > 0 {
		return nil, err
	}
	return b, nil
}
