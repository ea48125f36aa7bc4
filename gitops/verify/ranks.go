package verify

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/formats/wtxt"
	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/sshsig"
	"github.com/snapd-ml/snapd/snapshot"
)

// RanksOptions configure VerifyRanks.
type RanksOptions struct {
	Branch    string // default gitops.DefaultBranch
	Path      string // snapshot path (the generations are under Path/ranks); default gitops.DefaultPath
	TagPrefix string // default gitops.DefaultTagPrefix
	// Blobs serves the rank parts' segment blobs (the job's OCI
	// repository), read only. Required.
	Blobs wtxt.BlobSource
	// Signers is the allowed_signers policy the commit and tag signatures
	// (namespace "git") are checked against, at their committer and tagger
	// time, as git verify-commit / verify-tag check them. Required.
	Signers *sshsig.AllowedSigners
	// Trusted, when set, are the keys that sign the indexes (committer)
	// and the rank parts (nodes); otherwise the keys Signers allows for
	// namespace "file" at the committer time of each generation's commit.
	// A valid signature by one of them is required on both.
	Trusted []ed25519.PublicKey
	// Chain, when non-zero, is the job's chain id; zero: the first
	// generation's, and every later one must have the same.
	Chain [32]byte
	// HMACKey checks the parts' per-array HMACs when set.
	HMACKey []byte
	// Since starts at this revision (e.g. the tag gen-NNNNNN of the oldest
	// generation kept after `snapd ranks gc`): its generation is verified,
	// its merkle_prev is the trusted chain anchor.
	Since string
}

// RanksGeneration is one verified multi-rank generation.
type RanksGeneration struct {
	Gen        uint64   `json:"gen"`
	Commit     string   `json:"commit"`
	WorldSize  int      `json:"world_size"`
	MerkleThis string   `json:"merkle_this"`
	Skipped    []uint64 `json:"skipped,omitempty"`
	Arrays     int      `json:"arrays"`
	Bytes      int64    `json:"bytes"` // raw tensor bytes over all ranks
}

// VerifyRanks checks every multi-rank generation on the branch of r,
// oldest first (docs/FORMAT.md section 7), in Go and with public keys
// only: the commit and tag SSH signatures (Signers), the index (grammar,
// root, signature), the chain across commits, generation order and the
// gaps recorded as skipped (gitops.TrailerSkipped), each skeleton against
// the index, and each rank part assembled from Blobs and fully verified as
// WTXT. It stops at the first failure, which it returns located (commit,
// file, rank, check). It returns the generations verified before it.
func VerifyRanks(ctx context.Context, r *git.Repository, o RanksOptions) ([]RanksGeneration, error) {
	if o.Signers == nil || len(o.Signers.Lines) == 0 {
		return nil, ErrNoKeys
	}
	if o.Blobs == nil {
		return nil, errors.New("verify: multi-rank generations need the registry holding their rank parts")
	}
	if o.Branch == "" {
		o.Branch = gitops.DefaultBranch
	}
	if o.TagPrefix == "" {
		o.TagPrefix = gitops.DefaultTagPrefix
	}
	head, err := resolveBranch(r, o.Branch)
	if err != nil {
		return nil, err
	}
	// The first-parent history, oldest first.
	var commits []*object.Commit
	for h := head; ; {
		if o, err := r.Storer.EncodedObject(plumbing.CommitObject, h); err == nil && o.Size() > maxObjectHeader {
			return nil, fmt.Errorf("verify: commit %s is %d bytes, limit %d", h, o.Size(), maxObjectHeader)
		}
		c, err := r.CommitObject(h)
		if err != nil {
			return nil, fmt.Errorf("verify: commit %s: %w", h, err)
		}
		commits = append(commits, c)
		if len(c.ParentHashes) == 0 {
			break
		}
		h = c.ParentHashes[0]
	}
	slices.Reverse(commits)
	var prev [32]byte
	var last uint64
	chain := o.Chain
	if o.Since != "" {
		sc, err := resolveCommit(r, o.Since)
		if err != nil {
			return nil, fmt.Errorf("%w: --since %s: %w", ErrSince, o.Since, err)
		}
		i := slices.IndexFunc(commits, func(c *object.Commit) bool { return c.Hash == sc })
		if i < 0 {
			return nil, wranks.Fail(o.Since, 0, -1, wranks.CheckChain, "not a commit of the ledger branch's first-parent history")
		}
		commits = commits[i:]
		anchor, err := gitops.ReadRanksCommit(commits[0], o.Path)
		if err != nil {
			return nil, err
		}
		prev = anchor.Index.MerklePrev // trusted, as verify-repo --since does
	}
	var out []RanksGeneration
	for _, c := range commits {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		g, err := verifyRanksCommit(ctx, r, o, c, prev, last, &chain)
		if err != nil {
			return out, fmt.Errorf("commit %.12s: %w", c.Hash.String(), err)
		}
		out = append(out, *g)
		last = g.Gen
		hex.Decode(prev[:], []byte(g.MerkleThis))
	}
	return out, nil
}

// objectSig checks the SSHSIG (namespace "git") of the raw commit or tag
// h against signers at its committer or tagger time.
func objectSig(r *git.Repository, t plumbing.ObjectType, h plumbing.Hash, signers *sshsig.AllowedSigners) error {
	raw, err := readRaw(r.Storer, t, h)
	if err != nil {
		return err
	}
	split, header := splitCommitSignature, "committer"
	if t == plumbing.TagObject {
		split, header = splitTagSignature, "tagger"
	}
	payload, sig, err := split(raw)
	if err != nil {
		return err
	}
	_, err = checkObjectSignature(payload, sig, signers, header, time.Now())
	return err
}

func verifyRanksCommit(ctx context.Context, r *git.Repository, o RanksOptions, c *object.Commit, prev [32]byte, last uint64, chain *[32]byte) (*RanksGeneration, error) {
	id := c.Hash.String()
	if err := objectSig(r, plumbing.CommitObject, c.Hash, o.Signers); err != nil {
		return nil, wranks.Fail(id, 0, -1, wranks.CheckSignature, "commit signature: %v", err)
	}
	rc, err := gitops.ReadRanksCommit(c, o.Path)
	if err != nil {
		return nil, err
	}
	ix := rc.Index
	name := id[:12] + ":" + gitops.RanksIndexPath(o.Path)
	trusted := o.Trusted
	// policy says which allowed_signers lines do not allow namespace
	// "file" at the commit's time (added to a signature failure).
	policy := ""
	withPolicy := func(err error) error {
		if policy == "" {
			return err
		}
		return fmt.Errorf("%w (%s)", err, policy)
	}
	if len(trusted) == 0 {
		at := c.Committer.When
		trusted = o.Signers.Ed25519Keys(sshsig.NamespaceFile, at)
		if ex := o.Signers.Excluded(sshsig.NamespaceFile, at); len(ex) > 0 {
			policy = fmt.Sprintf("allowed_signers at the commit time %s: %s", at.UTC().Format(time.RFC3339), strings.Join(ex, "; "))
		}
		if len(trusted) == 0 {
			return nil, wranks.Fail(name, 0, -1, wranks.CheckSignature, "allowed_signers allows no key for namespace %q at the commit time %s: %s",
				sshsig.NamespaceFile, at.UTC().Format(time.RFC3339), strings.Join(o.Signers.Excluded(sshsig.NamespaceFile, at), "; "))
		}
	}
	if *chain == ([32]byte{}) {
		*chain = ix.Chain
	}
	if err := ix.Verify(name, wranks.VerifyOptions{Trusted: trusted, Prev: prev, CheckChain: true, Chain: *chain}); err != nil {
		return nil, withPolicy(err)
	}
	gen := ix.GenNumber()
	if !strings.Contains(c.Message, "\n"+gitops.TrailerGen+": "+strconv.FormatUint(gen, 10)+"\n") {
		return nil, wranks.Fail(name, 0, -1, wranks.CheckGen, "commit's %s trailer is not the index's generation %d", gitops.TrailerGen, gen)
	}
	skipped, err := gitops.ParseSkipped(c.Message)
	if err != nil {
		return nil, wranks.Fail(name, 0, -1, wranks.CheckGrammar, "%v", err)
	}
	meta, err := gitops.MetaOfTrailers(gitops.ParseTrailers(c.Message))
	if err != nil {
		return nil, wranks.Fail(name, 0, -1, wtxt.Check(CheckTrailer), "%v", err)
	}
	if gen <= last {
		return nil, wranks.Fail(name, 0, -1, wranks.CheckGen, "generation %d does not follow generation %d", gen, last)
	}
	if last > 0 {
		for n := last + 1; n < gen; n++ {
			if !slices.Contains(skipped, n) {
				return nil, wranks.Fail(name, 0, -1, wranks.CheckGen, "generations %d..%d are missing and not recorded as skipped (%s)", n, gen-1, gitops.TrailerSkipped)
			}
			if n-last > 1<<20 {
				break
			}
		}
	}
	tag := o.TagPrefix + ix.Gen
	ref, err := r.Storer.Reference(plumbing.NewTagReferenceName(tag))
	if err != nil {
		return nil, wranks.Fail(tag, 0, -1, wranks.CheckSignature, "tag signature: tag not found (a clone must fetch tags: git fetch --tags)")
	}
	if err := objectSig(r, plumbing.TagObject, ref.Hash(), o.Signers); err != nil {
		return nil, wranks.Fail(tag, 0, -1, wranks.CheckSignature, "tag signature: %v", err)
	}
	if to, err := r.TagObject(ref.Hash()); err != nil || to.Target != c.Hash {
		return nil, wranks.Fail(tag, 0, -1, wranks.CheckGen, "tag does not point at the generation's commit")
	}
	want := []string{wranks.IndexName}
	for i := range ix.WorldSize {
		want = append(want, wranks.SkeletonName(i))
	}
	slices.Sort(want)
	if got := rc.Names(); !slices.Equal(got, want) {
		return nil, wranks.Fail(name, 0, -1, wranks.CheckSkeleton, "%s holds %d files, the index names %d", gitops.RanksDir(o.Path), len(got), len(want))
	}
	g := &RanksGeneration{Gen: gen, Commit: id, WorldSize: ix.WorldSize, MerkleThis: hex.EncodeToString(ix.MerkleThis[:]), Skipped: skipped}
	for i := range ix.WorldSize {
		skel, err := rc.Skeleton(i)
		if err != nil {
			return nil, err
		}
		sname := rc.SkeletonName(i)
		if err := ix.CheckSkeleton(i, skel, sname); err != nil {
			return nil, err
		}
		rep, err := verifyRankPart(ctx, skel, sname, o, trusted, *chain)
		if err != nil {
			return nil, withPolicy(err)
		}
		if meta != nil {
			if err := checkRankMeta(ctx, meta, skel, sname, i, o.Blobs); err != nil {
				return nil, err
			}
		}
		g.Arrays += len(rep.Arrays)
		for _, a := range rep.Arrays {
			g.Bytes += a.Bytes
		}
	}
	return g, nil
}

// checkRankMeta checks the Snapd-Meta trailer of a multi-rank
// generation's commit (trailer, present) against rank's part, whose
// skeleton skel (file name) verifyRankPart verified: the metadata inside
// the part (its attributes document, read through the skeleton from
// blobs: wtxt.ReadSkeletonUserMeta) must equal the trailer's. A
// difference fails CheckTrailer naming the rank and the keys, never a
// value. A trailer must equal every rank's metadata (the committer writes
// one when every rank's request gave the same); without one nothing is
// compared (each part's metadata is covered by the part's own hashes and
// signature).
func checkRankMeta(ctx context.Context, trailer snapshot.UserMeta, skel []byte, name string, rank int, blobs wtxt.BlobSource) error {
	inside, err := wtxt.ReadSkeletonUserMeta(ctx, name, bytes.NewReader(skel), int64(len(skel)), blobs)
	if err != nil {
		return err
	}
	if trailer.Equal(inside) {
		return nil
	}
	return wranks.Fail(name, 0, rank, wtxt.Check(CheckTrailer), "commit trailer %s disagrees with the metadata inside the rank's part (keys %s)",
		gitops.TrailerMeta, metaDiffKeys(trailer, inside))
}

// verifyRankPart assembles a rank part from its skeleton and the blobs and
// verifies it as WTXT, streaming (nothing is written to disk).
func verifyRankPart(ctx context.Context, skel []byte, name string, o RanksOptions, trusted []ed25519.PublicKey, chain [32]byte) (*wtxt.Report, error) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := wtxt.AssembleNamed(ctx, bytes.NewReader(skel), name, o.Blobs, pw)
		pw.CloseWithError(err)
	}()
	rep, err := wtxt.Verify(ctx, pr, wtxt.VerifyOptions{File: name, TrustedKeys: trusted, PrevMerkle: &chain, HMACKey: o.HMACKey, RequireSignature: len(trusted) > 0})
	pr.CloseWithError(io.ErrClosedPipe)
	<-done
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if !rep.OK() {
		return nil, fmt.Errorf("%s: %w", name, rep.Failures[0])
	}
	return rep, nil
}
