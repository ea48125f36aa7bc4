package review

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/snapshot"
)

// Skeleton layout (docs/FORMAT.md §6): a generation whose tensor bytes are
// in an OCI registry is committed as a WTXT skeleton, "*.wtxt.skel": every
// WTXT line but the base64 lines, plus seg lines. Its git diff shows
// exactly the changed ch lines, and every ch line carries its chunk's
// sha256, so the changed chunks are known from the two skeletons alone.
//
// Without Options.Registry the review of a skeleton reports the changed
// chunks (with their rows) and arrays, and checks the header: the
// Ed25519 signature by a trusted key, merkle_this against its inputs and
// the chain against the base skeleton's merkle_this; the element
// numbers (changed elements, max |Δ|, rel L2, new NaN/Inf) and the
// thresholds need the tensor bytes, which a note says. With
// Options.Registry both versions are assembled from the registry
// (every chunk hash and blob digest checked) into temporary WTXT files
// and reviewed in full like any WTXT; comments stay on the skeleton's ch
// and arr lines (the lines the pull request's diff shows).

// IsSkeleton reports whether a repository path is a WTXT skeleton.
func IsSkeleton(p string) bool { return strings.HasSuffix(p, ".wtxt.skel") }

// isSkeletonFile reports whether the local file starts with the skeleton
// magic line.
func isSkeletonFile(local string) bool { return local != "" && layout.IsSkeletonFile(local) }

// readSkeletonIndex indexes the local skeleton file.
func readSkeletonIndex(ctx context.Context, local, name string) (*wtxt.Index, error) {
	f, err := os.Open(local)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return wtxt.ReadSkeletonIndex(ctx, name, bufio.NewReaderSize(f, 1<<16), wtxt.IndexOptions{})
}

// reviewSkeleton reviews a changed skeleton file.
func reviewSkeleton(ctx context.Context, in FileInput, opts Options) (*FileResult, error) {
	if opts.Registry == nil {
		return reviewSkeletonStructure(ctx, in, opts, structureWhy{noStats: noBytes, tail: noBytesTail})
	}
	// Beside the fetched versions (the caller's temporary directory),
	// not in the system's: the assembled files are model-sized.
	near := in.Head
	if near == "" {
		near = in.Base
	}
	dir, err := os.MkdirTemp(filepath.Dir(near), ".snapd-review-skel-")
	if err != nil {
		if dir, err = os.MkdirTemp("", "snapd-review-skel-"); err != nil {
			return nil, err
		}
	}
	defer os.RemoveAll(dir)
	a, err := assembleSides(ctx, in, opts, dir)
	if err != nil {
		return nil, err
	}
	if a.complete() {
		return reviewSkeletonAssembled(ctx, in, a.asm, opts)
	}
	// Not assembled: review the structure, saying why.
	why := structureWhy{noStats: noBytesFailed, tail: noBytesFailedTail}
	if len(a.collected) > 0 {
		why = collectedWhy(a)
	}
	st, err := reviewSkeletonStructure(ctx, in, opts, why)
	if err != nil {
		return nil, err
	}
	st.Problems = append(a.problems, st.Problems...)
	st.Notes = append(a.notes, st.Notes...)
	if len(a.collected) > 0 {
		if err := collectedMeta(ctx, st, in, a, opts); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// assembled is what assembleSides made of a skeleton's two versions.
type assembled struct {
	// asm is the FileInput with Base and Head replaced by the WTXT files
	// assembled from the registry ("" for a side that was not).
	asm FileInput
	// problems (head) and notes (base) say why a side did not assemble,
	// unless retention explains it (collected).
	problems, notes []string
	// collected holds the sides ("base", "head") whose content retention
	// collected, with their generations as written (collected.go).
	collected []collectedSide
}

// complete reports whether every version there is was assembled.
func (a *assembled) complete() bool { return len(a.problems)+len(a.notes)+len(a.collected) == 0 }

// assembleSides assembles both versions of in from opts.Registry into
// dir. A version that does not assemble is a problem (head) or a note
// (base) saying why — or, when the registry says retention collected its
// generation (collected.go), a collected side.
func assembleSides(ctx context.Context, in FileInput, opts Options, dir string) (*assembled, error) {
	a := &assembled{asm: in}
	a.asm.HasPatch, a.asm.Parsed, a.asm.Patch = false, nil, ""
	for _, side := range []struct {
		src  string
		dst  *string
		name string
	}{{in.Base, &a.asm.Base, "base"}, {in.Head, &a.asm.Head, "head"}} {
		*side.dst = ""
		if side.src == "" {
			continue
		}
		out := filepath.Join(dir, side.name+".wtxt")
		err := assembleTo(ctx, side.src, in.Path+"@"+side.name, opts.Registry, out)
		if err == nil {
			*side.dst = out
			continue
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if c, ok := collectedOf(ctx, opts.Registry, in.Path, side.src, side.name, err); ok {
			a.collected = append(a.collected, c)
			continue
		}
		if side.name == "head" {
			a.problems = append(a.problems, "head skeleton does not assemble from the registry: "+err.Error())
		} else {
			a.notes = append(a.notes, "base skeleton does not assemble from the registry, so only the skeletons are compared: "+err.Error())
		}
	}
	return a, nil
}

// reviewSkeletonAssembled reviews asm, both versions of in assembled
// from the registry, as WTXT files, with the comments on the skeleton's
// lines.
func reviewSkeletonAssembled(ctx context.Context, in, asm FileInput, opts Options) (*FileResult, error) {
	fr, err := reviewFile(ctx, asm, opts)
	if err != nil {
		return nil, err
	}
	fr.HasPatch = in.HasPatch
	// The chunk lines are the assembled WTXT's: move them to the skeleton's.
	if in.Head != "" {
		hidx, err := readSkeletonIndex(ctx, in.Head, in.Path)
		if err != nil {
			fr.Problems = append(fr.Problems, "head skeleton does not parse: "+err.Error())
			hidx = nil
		}
		for i := range fr.Chunks {
			c := &fr.Chunks[i]
			c.Line, c.Anchored, c.Position = 0, false, 0
			a := hidx.Array(c.Array)
			switch {
			case a == nil:
			case c.Chunk < 0:
				c.Line = a.Line
			case c.Chunk < int64(len(a.Chunks)):
				c.Line = a.Chunks[c.Chunk].Line
			}
		}
	}
	anchor(fr, in)
	return fr, nil
}

// assembleTo rebuilds the WTXT of the local skeleton src from reg into
// dst.
func assembleTo(ctx context.Context, src, name string, reg wtxt.BlobSource, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(out, 1<<20)
	_, err = wtxt.AssembleNamed(ctx, bufio.NewReaderSize(f, 1<<20), name, reg, bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// anchor places fr's chunk changes in the file's patch.
func anchor(fr *FileResult, in FileInput) {
	patch := in.Parsed
	if in.HasPatch && patch == nil {
		p, err := ParsePatch(in.Patch)
		if err != nil {
			fr.Notes = append(fr.Notes, "the diff could not be parsed, so no line comments: "+err.Error())
			fr.HasPatch = false
			return
		}
		patch = p
	}
	for i := range fr.Chunks {
		if fr.Chunks[i].Line <= 0 {
			continue
		}
		if pos, ok := patch.Position(fr.Chunks[i].Line); ok {
			fr.Chunks[i].Anchored, fr.Chunks[i].Position = true, pos
		}
	}
}

// noBytes is what a chunk comment says without the registry, and
// noBytesFailed when the registry could not serve the bytes; the tails
// end the summary note in each case.
const (
	noBytes           = "sha256 changed (skeleton layout: the element numbers need the tensor bytes from the OCI registry; run snapd review with --oci-repository)"
	noBytesFailed     = "sha256 changed (skeleton layout: no element numbers, the registry did not serve the tensor bytes)"
	noBytesTail       = "Changed elements, max |Δ|, mean |Δ|, rel L2, new NaN/Inf and the thresholds need the tensor bytes: run snapd review with --oci-repository (snapd verify-repo --oci-repository checks every blob)."
	noBytesFailedTail = "No element numbers and no thresholds: the registry did not serve the tensor bytes (see above)."
)

// structureWhy says why a skeleton is reviewed from its lines: what a
// changed chunk says instead of numbers (ChunkChange.NoStats) and how the
// summary note ends. head, when set, is the head version assembled from
// the registry: it is verified in full (collected.go).
type structureWhy struct {
	noStats, tail string
	head          string
}

// reviewSkeletonStructure reviews a skeleton from its lines alone (and
// the assembled head, when why has one).
func reviewSkeletonStructure(ctx context.Context, in FileInput, opts Options, why structureWhy) (*FileResult, error) {
	fr, err := newFileResult(in)
	if err != nil {
		return nil, err
	}
	var bidx, hidx *wtxt.Index
	if in.Base != "" {
		if bidx, err = readSkeletonIndex(ctx, in.Base, in.Path+"@base"); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			fr.Notes = append(fr.Notes, "base skeleton does not parse, so nothing is compared: "+err.Error())
			bidx = nil
		} else {
			fr.BaseGen = bidx.Header.Gen
			fr.BaseMerkle = hex.EncodeToString(bidx.Header.MerkleThis[:])
		}
	}
	if in.Head != "" {
		if hidx, err = readSkeletonIndex(ctx, in.Head, in.Path); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			fr.Problems = append(fr.Problems, "head skeleton does not parse: "+err.Error())
			return fr, nil
		}
		fr.HeadGen = hidx.Header.Gen
		fr.Report = skeletonReport(in.Path, hidx.Header, bidx, opts)
		if why.head != "" {
			rep, err := verifyAssembledHead(ctx, why.head, in.Path, opts, fr.Report)
			if err != nil {
				return nil, err
			}
			fr.Report = rep
		}
		for _, fl := range fr.Report.Failures {
			fr.Problems = append(fr.Problems, "verification failed: "+fl.Error())
		}
		if bidx != nil && hidx.Header.Meta.Gen <= bidx.Header.Meta.Gen {
			fr.Notes = append(fr.Notes, fmt.Sprintf("generation does not increase: base %s, head %s", fr.BaseGen, fr.HeadGen))
		}
	}
	if hidx == nil {
		return fr, nil
	}
	chunks, err := chunkChanges(ctx, bidx, hidx, nil, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("review: %s: %w", in.Path, err)
	}
	perArray := map[string]int{}
	for i := range chunks {
		c := &chunks[i]
		if c.Chunk < 0 {
			continue
		}
		c.NoStats = why.noStats
		perArray[c.Array]++
		// Rows as chunkChanges computes them (the index checked that the
		// chunk lies inside the array's bytes).
		if a := hidx.Array(c.Array); a != nil && c.Chunk < int64(len(a.Chunks)) {
			rowSize, rows := snapshot.RowGeometry(&snapshot.Array{DType: a.DType, Shape: a.Shape})
			if rowSize > 0 {
				ch := a.Chunks[c.Chunk]
				c.FirstRow = ch.Off / rowSize
				c.EndRow = min(rows, (ch.Off+ch.Len+rowSize-1)/rowSize)
			}
		}
	}
	fr.Chunks = chunks
	anchor(fr, in)
	var parts []string
	for _, a := range hidx.Arrays {
		if n := perArray[a.Name]; n > 0 {
			parts = append(parts, fmt.Sprintf("`%s` %d of %d", a.Name, n, len(a.Chunks)))
			fr.arrayChanges = append(fr.arrayChanges, fmt.Sprintf("`%s`: %d of %d chunk(s) changed", a.Name, n, len(a.Chunks)))
		}
	}
	var arrays []string
	for _, c := range chunks {
		if c.Chunk < 0 {
			arrays = append(arrays, fmt.Sprintf("`%s` %s", c.Array, c.Change))
		}
	}
	if bidx != nil {
		for _, a := range bidx.Arrays {
			if hidx.Array(a.Name) == nil {
				arrays = append(arrays, fmt.Sprintf("`%s` removed", a.Name))
			}
		}
	}
	sort.Strings(arrays)
	for _, a := range arrays {
		name, change, _ := strings.Cut(a, " ")
		fr.arrayChanges = append(fr.arrayChanges, name+": "+change)
	}
	summary := "skeleton layout (tensor bytes in an OCI registry), reviewed from the skeletons' ch lines: "
	if len(parts) == 0 && len(arrays) == 0 {
		summary += "no chunk changed"
	} else {
		summary += "changed chunks per array: " + strings.Join(append(parts, arrays...), ", ")
	}
	summary += ". " + why.tail
	fr.Notes = append(fr.Notes, summary)
	return fr, nil
}

// skeletonReport checks what a skeleton's header proves: the signature
// by a trusted key (the rules of wtxt.Verify: TrustedKeys require a
// signature unless AllowUnsigned), merkle_this against its inputs, and
// the chain against the base skeleton's merkle_this when the head is the
// base's next generation. Array hashes, sha256_all and fastxor need the
// tensor bytes and are not checked.
func skeletonReport(name string, h *wtxt.Header, base *wtxt.Index, opts Options) *wtxt.Report {
	r := &wtxt.Report{File: name, Header: h, Signature: wtxt.SigUnchecked, Chain: "unchecked",
		SHA256All: hex.EncodeToString(h.SHA256All[:]), MerklePrev: hex.EncodeToString(h.MerklePrev[:]), MerkleThis: hex.EncodeToString(h.MerkleThis[:])}
	fail := func(check wtxt.Check, format string, a ...any) {
		r.Failures = append(r.Failures, &wtxt.Error{File: name, Chunk: -1, Check: check, Msg: fmt.Sprintf(format, a...)})
	}
	if h.Pending {
		fail(wtxt.CheckWSUM, "the skeleton is of a streamed WTXT (root_pending), which the skeleton layout does not carry")
	}
	if m := wtxt.Merkle(h.MerklePrev, h.SHA256All, h.TS, h.Gen, h.Meta.Build); m != h.MerkleThis {
		fail(wtxt.CheckMerkle, "merkle_this is not SHA-256(merkle_prev || sha256_all || ts || gen || build)")
	}
	switch {
	case h.Signature == nil:
		r.Signature = wtxt.SigAbsent
		if opts.RequireSignature || len(opts.TrustedKeys) > 0 && !opts.AllowUnsigned {
			fail(wtxt.CheckSignature, "the snapshot is not signed and a signature is required")
		}
	case len(opts.TrustedKeys) == 0:
		if opts.RequireSignature {
			fail(wtxt.CheckSignerTrust, "signed by keyid %s, but no trusted keys were given", h.KeyID)
		}
	default:
		r.Signature = wtxt.SigFailed
		trusted := false
		for _, k := range opts.TrustedKeys {
			if keys.KeyID(k) != h.KeyID {
				continue
			}
			trusted = true
			if ed25519.Verify(k, h.Signed, h.Signature) {
				r.Signature, r.KeyID = wtxt.SigVerified, h.KeyID
			}
			break
		}
		switch {
		case !trusted:
			fail(wtxt.CheckSignerTrust, "signed by keyid %s, which is not among the trusted keys", h.KeyID)
		case r.Signature != wtxt.SigVerified:
			fail(wtxt.CheckSignature, "Ed25519 signature by keyid %s does not verify over the header", h.KeyID)
		}
	}
	var zero [32]byte
	switch {
	case IsRankSkeleton(name) && base != nil && h.Meta.Gen == base.Header.Meta.Gen+1:
		// A rank part chains to the job's chain id, as the base's rank
		// part does; the index carries the generation's chain (ranks.go).
		if h.MerklePrev == base.Header.MerklePrev {
			r.Chain = "continues"
		} else {
			fail(wtxt.CheckChain, "merkle_prev (the job's chain id) is not the base rank part's")
		}
	case IsRankSkeleton(name):
	case base != nil && h.Meta.Gen == base.Header.Meta.Gen+1:
		if bytes.Equal(h.MerklePrev[:], base.Header.MerkleThis[:]) {
			r.Chain = "continues"
		} else {
			fail(wtxt.CheckChain, "merkle_prev is not the base generation's merkle_this")
		}
	case h.MerklePrev == zero:
		r.Chain = "first"
	}
	return r
}
