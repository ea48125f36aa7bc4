package verify

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/keys"
)

// Skeleton layout in Git (docs/FORMAT.md §6): the generation directory
// holds layout.FileSkeleton instead of current.wtxt or
// current.wtxt.parts/, the commit's Snapd-Layout trailer is
// layout.Skeleton, and the segment blobs are in an OCI registry
// (Options.Registry).

// CheckRegistry names failures of the registry side of a skeleton-layout
// generation: the gen-NNNNNN manifest, its annotations and config, and
// the presence of every blob it references (oci.Repository.CheckGeneration).
// Blob content failures are "wtxt/blob", "wtxt/chunk-sha256",
// "wtxt/crc32c"; skeleton structure failures "wtxt/skeleton".
const CheckRegistry = "registry"

// Registry is the read side of the OCI store holding skeleton-layout
// segment blobs (*oci.Repository implements it). Verify only reads: it
// fetches manifests, config blobs and segment blobs and HEADs blobs.
type Registry interface {
	wtxt.BlobSource
	// CheckGeneration checks the manifest tagged gen-NNNNNN against the
	// skeleton and that every blob it references exists.
	CheckGeneration(ctx context.Context, skeleton []byte, name, tag string) (oci.Generation, error)
}

// maxSkeletonBytes bounds a skeleton held in memory (the manifest check
// needs it whole): ~30x what a 70B model's skeleton takes at 4 MiB
// segments and 1 MiB chunks.
const maxSkeletonBytes = 1 << 30

// Verification modes of a skeleton-layout generation (Generation.Verification).
const (
	VerifyFull   = "full"   // every segment blob, every WTXT check
	VerifySample = "sample" // the sampled segments' blobs, the header and the skeleton
)

// SampleSegments returns the indexes (ascending) of the segments a
// sampled verification of generation gen checks: ceil(fraction × the
// non-empty segments), at least one when there is any, chosen with a PCG
// seeded by (seed, gen), so the same seed picks the same segments again
// and different generations get independent picks. Zero-size segments
// have no blob and are never picked. fraction >= 1 picks them all.
func SampleSegments(segs []wtxt.Segment, fraction float64, seed, gen uint64) []int {
	var cand []int
	for i, s := range segs {
		if s.Size > 0 {
			cand = append(cand, i)
		}
	}
	if len(cand) == 0 || fraction <= 0 {
		return []int{}
	}
	k := len(cand)
	if fraction < 1 {
		k = max(1, int(math.Ceil(fraction*float64(len(cand)))))
		k = min(k, len(cand))
	}
	r := rand.New(rand.NewPCG(seed, gen))
	// Partial Fisher-Yates: the first k of a random permutation.
	for i := 0; i < k; i++ {
		j := i + r.IntN(len(cand)-i)
		cand[i], cand[j] = cand[j], cand[i]
	}
	out := slices.Clone(cand[:k])
	slices.Sort(out)
	return out
}

// skeletonGeneration verifies a skeleton-layout generation: the skeleton
// from Git, the manifest and blobs from the registry, streaming (the WTXT
// is never written to disk).
func (v *verifier) skeletonGeneration(x *gv, c *object.Commit, tr map[string]string, prev *genState, anchor bool,
	dir *object.Tree, entries map[string]object.TreeEntry) (*Generation, *genState, error) {
	g := x.g
	g.Layout = string(layout.Skeleton)
	if t := tr[gitops.TrailerLayout]; t != "" && t != string(layout.Skeleton) {
		x.fail("", 0, CheckTrailer, "trailer %s: %s, but the generation is stored as a skeleton (%s)", gitops.TrailerLayout, t, layout.FileSkeleton)
	}
	name, sf, _ := v.storedFile(x, dir, entries, layout.FileSkeleton, "skel")
	if sf == nil {
		return v.finish(x, c, tr, prev, anchor, content{}, nil, entries, dir, nil)
	}
	defer os.Remove(sf.path)
	repoPath := path.Join(x.dir, name)
	for _, f := range []string{gitops.FileWSUM, gitops.FileSeal} {
		if _, ok := entries[f]; ok {
			x.note("%s beside a skeleton: not used (the skeleton layout stores plaintext WTXT only)", f)
		}
	}
	files := map[string]*materialized{"skel": sf}
	x.optional = map[string]bool{"wtxt_bytes": true, "wtxt_sha256": true, "skel_bytes": true, "skel_sha256": true}
	st := &genState{}
	if sf.size > maxSkeletonBytes {
		x.fail(name, 0, CheckSize, "skeleton is %d bytes, limit %d", sf.size, maxSkeletonBytes)
		return v.finish(x, c, tr, prev, anchor, content{}, st, entries, dir, files)
	}
	skel, err := os.ReadFile(sf.path)
	if err != nil {
		v.ioErr = fmt.Errorf("verify: working copy of %s: %w", repoPath, err)
		return g, nil, nil
	}
	body, ok := bytes.CutPrefix(skel, []byte(wtxt.SkeletonMagic+"\n"))
	if !ok {
		x.fail(name, 1, "wtxt/"+string(wtxt.CheckSkeleton), "first line is not %q", wtxt.SkeletonMagic)
		return v.finish(x, c, tr, prev, anchor, content{}, st, entries, dir, files)
	}
	h, err := wtxt.ReadHeader(bytes.NewReader(body))
	if err != nil {
		v.failWTXT(x, name, err, 1)
		return v.finish(x, c, tr, prev, anchor, content{}, st, entries, dir, files)
	}
	// The declared (signed) header values stand for the generation, as
	// for a plain WTXT; a failure below is reported where it is.
	ct := rootContent(h.Root, name)
	if h.Pending {
		x.fail(name, 4, "wtxt/"+string(wtxt.CheckWSUM), "the skeleton is of a streamed WTXT (root_pending): its root values and signature are in a WSUM, which the skeleton layout does not carry")
		return v.finish(x, c, tr, prev, anchor, ct, st, entries, dir, files)
	}
	if v.o.Registry == nil {
		x.fail(name, 0, CheckRegistry, "skeleton layout: the tensor bytes are in an OCI registry; none was given (--oci-repository)")
		v.checkHeaderOnly(x, name, h)
		return v.finish(x, c, tr, prev, anchor, ct, st, entries, dir, files)
	}
	og, err := v.o.Registry.CheckGeneration(v.ctx, skel, repoPath, v.ociTag(entries))
	x.ociManifest = og.Manifest
	if err != nil {
		if v.ctx.Err() != nil {
			return nil, nil, v.ctx.Err()
		}
		if unreachable(err) {
			// Not a finding about this generation: the walk cannot go on.
			return nil, nil, fmt.Errorf("verify: registry for %s: %w", repoPath, err)
		}
		var we *wtxt.Error
		if errors.As(err, &we) {
			// The skeleton itself is malformed: no blob can be placed.
			v.failWTXT(x, name, err, 0)
			v.checkHeaderOnly(x, name, h)
			return v.finish(x, c, tr, prev, anchor, ct, st, entries, dir, files)
		}
		if errors.Is(err, oci.ErrManifestNotFound) {
			// Retention's mark (collected.go): the skeleton alone.
			v.collectedSkeleton(x, name, sf.path, h, err)
			v.checkSkeletonMeta(x, name, sf.path, tr, true)
			return v.finish(x, c, tr, prev, anchor, ct, st, entries, dir, files)
		}
		x.fail(name, 0, CheckRegistry, "%v", err)
	}
	if x.ociManifest != "" {
		g.Content = ContentPresent
	}
	g.Segments = len(og.Segments)
	skel = nil
	if v.o.Sample > 0 && v.o.Sample < 1 {
		v.sampleSkeleton(x, name, sf.path, h, og.Segments)
		v.checkSkeletonMeta(x, name, sf.path, tr, false)
		return v.finish(x, c, tr, prev, anchor, ct, st, entries, dir, files)
	}
	if wm := v.fullSkeleton(x, name, sf.path, h); wm != nil {
		files["wtxt"] = wm
		g.WTXTBytes = wm.size
	}
	v.checkSkeletonMeta(x, name, sf.path, tr, false)
	return v.finish(x, c, tr, prev, anchor, ct, st, entries, dir, files)
}

// fullSkeleton assembles the WTXT from the skeleton and the registry into
// wtxt.Verify through a pipe: every chunk's sha256 and crc32c and every
// blob's digest (the assembler), then every profile check (array hashes,
// sha256_all, fastxor, Merkle, signature by a trusted key). It returns the
// assembled WTXT's size and SHA-256 when assembly completed.
func (v *verifier) fullSkeleton(x *gv, name, skelPath string, hdr *wtxt.Header) *materialized {
	x.g.Verification = VerifyFull
	f, err := os.Open(skelPath)
	if err != nil {
		x.fail(name, 0, CheckObject, "working copy: %v", err)
		return nil
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(v.ctx)
	defer cancel()
	pr, pw := io.Pipe()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(pw, h)}
	var info *wtxt.AssembleInfo
	var aerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		info, aerr = wtxt.AssembleNamed(ctx, bufio.NewReaderSize(f, 1<<20), name, v.o.Registry, cw)
		pw.CloseWithError(aerr) // nil: EOF
	}()
	rep, verr := wtxt.Verify(ctx, bufio.NewReaderSize(pr, 1<<20), wtxt.VerifyOptions{TrustedKeys: v.fileKeys, RequireSignature: true})
	// Verify may stop early (too many failures): unblock the assembler.
	pr.CloseWithError(errVerifyDone)
	cancel()
	<-done
	if aerr != nil && !errors.Is(aerr, errVerifyDone) && !errors.Is(aerr, context.Canceled) {
		// The assembly failure is the cause; the verifier's view of the
		// cut-off stream adds nothing.
		v.failWTXT(x, name, aerr, 0)
		x.note("WTXT checks stopped where the assembly failed; the header's Merkle value and signature were checked on their own")
		v.checkHeaderOnly(x, name, hdr)
		return nil
	}
	if v.ctx.Err() != nil {
		return nil
	}
	var werr *wtxt.Error
	if verr != nil && !errors.As(verr, &werr) {
		x.fail(name, 0, CheckObject, "verify the assembled WTXT: %v", verr)
		return nil
	}
	if rep == nil {
		x.fail(name, 0, "wtxt", "%v", verr)
		return nil
	}
	x.g.Signature, x.g.KeyID = rep.Signature, rep.KeyID
	for _, e := range rep.Failures {
		msg := wtxtMessage(e)
		if e.Line > 0 {
			msg = fmt.Sprintf("assembled WTXT line %d: %s", e.Line, msg)
		}
		x.fail(name, 0, "wtxt/"+string(e.Check), "%s", msg)
	}
	if aerr != nil || info == nil {
		return nil
	}
	x.g.BlobBytes = info.Bytes
	x.g.SegmentsRead = info.Segments
	return &materialized{size: cw.n, sha256: hex.EncodeToString(h.Sum(nil))}
}

var errVerifyDone = errors.New("verification of the assembled stream ended")

// unreachable reports whether err means the registry could not be talked
// to at all (connection refused, DNS, TLS, timeout): an I/O error of the
// run (exit 2), not a failed check of the generation.
func unreachable(err error) bool {
	var ue *url.Error
	var ne net.Error
	var we *wtxt.Error
	return !errors.As(err, &we) && (errors.As(err, &ue) || errors.As(err, &ne))
}

// sampleSkeleton checks the sampled segments' blobs against the skeleton,
// every skeleton line, and the header's Merkle value and signature.
func (v *verifier) sampleSkeleton(x *gv, name, skelPath string, h *wtxt.Header, segs []wtxt.Segment) {
	x.g.Verification = VerifySample
	gen, _ := strconv.ParseUint(h.Gen, 10, 64)
	picked := SampleSegments(segs, v.o.Sample, v.o.Seed, gen)
	x.g.SampledSegments = picked
	want := map[int]bool{}
	for _, i := range picked {
		want[i] = true
	}
	f, err := os.Open(skelPath)
	if err != nil {
		x.fail(name, 0, CheckObject, "working copy: %v", err)
		return
	}
	defer f.Close()
	_, info, err := wtxt.CheckSkeletonSample(v.ctx, bufio.NewReaderSize(f, 1<<20), name, v.o.Registry, func(i int, _ wtxt.Segment) bool { return want[i] })
	if err != nil {
		v.failWTXT(x, name, err, 0)
	} else {
		x.g.BlobBytes, x.g.SegmentsRead = info.Bytes, len(picked)
	}
	v.checkHeaderOnly(x, name, h)
	x.note("sampled: %d of %d segments' blobs checked (seed %d); the array sha256, sha256_all and fastxor need every byte and are not recomputed — the signed commit binds the skeleton's ch hashes", len(picked), len(segs), v.o.Seed)
}

// checkHeaderOnly checks what the header alone proves: merkle_this is
// SHA-256(merkle_prev || sha256_all || ts || gen || build) of the declared
// values, and the Ed25519 signature over the header is by a trusted key.
func (v *verifier) checkHeaderOnly(x *gv, name string, h *wtxt.Header) {
	if m := wtxt.Merkle(h.MerklePrev, h.SHA256All, h.TS, h.Gen, h.Meta.Build); m != h.MerkleThis {
		x.fail(name, 5, "wtxt/"+string(wtxt.CheckMerkle), "merkle_this is %x, SHA-256(merkle_prev || sha256_all || ts || gen || build) gives %x", h.MerkleThis, m)
	}
	line := h.Lines + 1 // the skeleton's first line shifts the WTXT's
	x.g.Signature = wtxt.SigFailed
	if h.Signature == nil {
		x.g.Signature = wtxt.SigAbsent
		x.fail(name, 0, "wtxt/"+string(wtxt.CheckSignature), "the snapshot is not signed and a signature is required")
		return
	}
	for _, k := range v.fileKeys {
		if keys.KeyID(k) != h.KeyID {
			continue
		}
		if ed25519.Verify(k, h.Signed, h.Signature) {
			x.g.Signature, x.g.KeyID = wtxt.SigVerified, h.KeyID
			return
		}
		x.fail(name, line, "wtxt/"+string(wtxt.CheckSignature), "Ed25519 signature by keyid %s does not verify over the header", h.KeyID)
		return
	}
	x.fail(name, line, "wtxt/"+string(wtxt.CheckSignerTrust), "signed by keyid %s, which is not among the trusted keys", h.KeyID)
}

// failWTXT records err (a *wtxt.Error from the skeleton or the assembler
// when it is one) as a located failure; lineShift is added to its line.
func (v *verifier) failWTXT(x *gv, name string, err error, lineShift int) {
	if errors.Is(err, oci.ErrStalled) && v.ioErr == nil {
		// The registry stopped answering while a blob was read: an I/O
		// error of the run (exit 2), as an unreachable registry is.
		v.ioErr = fmt.Errorf("verify: registry for %s: %w", name, err)
	}
	var we *wtxt.Error
	if !errors.As(err, &we) {
		x.fail(name, 0, CheckRegistry, "%v", err)
		return
	}
	line := we.Line
	if line > 0 {
		line += lineShift
	}
	x.fail(name, line, "wtxt/"+string(we.Check), "%s", wtxtMessage(we))
}

// ociTag returns the registry tag of the generation whose tree entries
// are entries: generation.txt's oci_tag when it has one (a number a
// resumed run re-used: gen-NNNNNN-rK), else "" (gen-NNNNNN). A
// generation.txt that cannot be read gives "": checkSummary reports it.
func (v *verifier) ociTag(entries map[string]object.TreeEntry) string {
	e, ok := entries[gitops.FileSummary]
	if !ok {
		return ""
	}
	data, _, err := v.blobBytes(e.Hash, gitops.MaxSummaryBytes)
	if err != nil || data == nil {
		return ""
	}
	kv, err := gitops.ParseSummary(data)
	if err != nil {
		return ""
	}
	return kv["oci_tag"]
}

// checkOCISummary checks generation.txt's registry keys (kv): in the
// skeleton layout oci_manifest, when present, must be the digest of the
// manifest the registry's tag for the generation resolves to (oci_tag, a
// re-used number's gen-NNNNNN-rK, else gen-NNNNNN) — it binds the signed
// commit to the registry's content, so a tag moved to another manifest
// (even one whose annotations and segments agree) is caught;
// oci_repository is where the daemon pushed and is not checked (a mirror
// may be verified); oci_tag must be one of the generation's tags. In
// another layout none of these keys may be set.
func (v *verifier) checkOCISummary(x *gv, kv map[string]string) {
	if x.g.Layout != string(layout.Skeleton) {
		for _, k := range []string{"oci_repository", "oci_manifest", "oci_tag"} {
			if _, ok := kv[k]; ok {
				x.fail(gitops.FileSummary, 0, CheckSummary, "%s is set but the generation is not in the skeleton layout", k)
			}
		}
		return
	}
	tag := oci.Tag(x.g.Gen)
	if t, ok := kv["oci_tag"]; ok {
		if !oci.IsTagOf(t, x.g.Gen) {
			x.fail(gitops.FileSummary, 0, CheckSummary, "oci_tag is not one of generation %s's tags (%s or %s-rK)", x.g.Gen, tag, tag)
			return
		}
		tag = t
	}
	got, ok := kv["oci_manifest"]
	if !ok || x.ociManifest == "" {
		return
	}
	if got != x.ociManifest {
		x.fail(gitops.FileSummary, 0, CheckRegistry, "oci_manifest=%s, but the registry's tag %s resolves to manifest %s: the registry does not hold the generation this commit signed",
			got, tag, x.ociManifest)
	}
}
