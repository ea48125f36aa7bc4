package gitops

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/formats/wtxt"
	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/snapshot"
)

// LayoutRanks is recorded (never configured) for a multi-rank generation
// (layout.Ranks): Config.Path/ranks/ holds its WTXT-RANKS index and one
// skeleton per rank; the rank parts' tensor bytes are in an OCI registry.
const LayoutRanks = layout.Ranks

// RanksDir returns the directory of a multi-rank generation in a commit's
// tree for the snapshot path p (Config.Path; "" is DefaultPath).
func RanksDir(p string) string {
	if p == "" {
		p = DefaultPath
	}
	return path.Join(p, layout.DirRanks)
}

// RanksIndexPath returns the path of a multi-rank generation's index in a
// commit's tree for the snapshot path p ("" is DefaultPath).
func RanksIndexPath(p string) string { return path.Join(RanksDir(p), wranks.IndexName) }

// RanksGeneration is one multi-rank generation to commit: its index and
// its W rank skeletons, in rank order.
type RanksGeneration struct {
	Index     *wranks.Index
	Skeletons [][]byte
	// Skipped lists the generations the committer gave up on since the
	// previous commit (a TrailerSkipped line each).
	Skipped []uint64
	// Meta is the generation's metadata, the one every rank's part
	// carries (the committer checks that they agree): the commit's
	// TrailerMeta line; none when empty.
	Meta snapshot.UserMeta
}

// ranksMessage is a multi-rank generation's commit message.
func ranksMessage(ix *wranks.Index, skipped []uint64, meta snapshot.UserMeta) string {
	var b strings.Builder
	fmt.Fprintf(&b, "snapd: generation %s (%d ranks)\n\n%s: %d\n%s: %d\n%s: %x\n", ix.Gen, ix.WorldSize,
		TrailerGen, ix.GenNumber(), TrailerWorldSize, ix.WorldSize, TrailerMerkleThis, ix.MerkleThis)
	for _, s := range skipped {
		fmt.Fprintf(&b, "%s: %d\n", TrailerSkipped, s)
	}
	if len(meta) > 0 {
		b.WriteString(TrailerMeta + ": " + meta.String() + "\n")
	}
	return b.String()
}

// ParseSkipped returns the TrailerSkipped values of a commit message, in
// the order written.
func ParseSkipped(msg string) ([]uint64, error) {
	var out []uint64
	for _, line := range strings.Split(msg, "\n") {
		v, ok := strings.CutPrefix(line, TrailerSkipped+": ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, errors.New("bad " + TrailerSkipped + " trailer")
		}
		out = append(out, n)
	}
	return out, nil
}

// CommitRanks records multi-rank generation g as one new commit on the
// branch: Config.Path/ranks/ holds exactly its index and its W skeletons
// (rank-RRRRR.skel), the rest of the previous tree is kept, and the
// commit and its annotated tag (TagPrefix + gen) are signed as Commit's
// are; the commit carries g.Meta as its TrailerMeta line (the caller
// checked it is every part's metadata). The commit time is the index's ts. The generation must be newer
// than the branch head's and its merkle_prev the head's merkle_this
// (ErrGenOrder, ErrChainBreak); committing the generation that already is
// the head (same gen and merkle_this) returns it with Existing set.
func (r *Repo) CommitRanks(ctx context.Context, g RanksGeneration) (*Result, error) {
	ix := g.Index
	if ix == nil || len(g.Skeletons) != ix.WorldSize {
		return nil, fmt.Errorf("%w: a multi-rank generation needs its index and one skeleton per rank", ErrHeader)
	}
	for i, s := range g.Skeletons {
		if sha256.Sum256(s) != ix.Ranks[i].SkeletonSHA256 {
			return nil, wranks.Fail(wranks.SkeletonName(i), 0, i, wranks.CheckSkeleton, "SHA-256 of the skeleton is not the index's skeleton_sha256")
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	head, err := r.head()
	if err != nil {
		return nil, err
	}
	gen := strconv.FormatUint(ix.GenNumber(), 10)
	merkle := hex.EncodeToString(ix.MerkleThis[:])
	tagName := r.TagName(ix.Gen)
	if head != nil {
		if head.trail[TrailerGen] == gen && head.trail[TrailerMerkleThis] == merkle {
			res, err := r.existing(head, &Header{Gen: ix.GenNumber()}, tagName)
			if err != nil {
				return nil, err
			}
			res.Layout = LayoutRanks
			return res, nil
		}
		pg, err := parseGenTrailer(head.trail[TrailerGen])
		if err != nil {
			return nil, fmt.Errorf("gitops: branch %s head %s has no %s trailer", r.cfg.Branch, head.commit.Hash, TrailerGen)
		}
		if ix.GenNumber() <= pg {
			return nil, fmt.Errorf("%w: generation %s, head %s has %d", ErrGenOrder, ix.Gen, head.commit.Hash, pg)
		}
		if pm, mp := head.trail[TrailerMerkleThis], hex.EncodeToString(ix.MerklePrev[:]); pm != mp {
			return nil, fmt.Errorf("%w: generation %s merkle_prev %s, head generation %d merkle_this %s", ErrChainBreak, ix.Gen, mp, pg, pm)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var prevRoot *object.Tree
	if head != nil {
		prevRoot = head.tree
	}
	attrText, err := r.attributes(prevRoot)
	if err != nil {
		return nil, err
	}
	b := &builder{st: r.r.Storer, ctx: ctx}
	dir := newTreeBuilder(nil)
	for i, s := range g.Skeletons {
		h, err := b.blob(s)
		if err != nil {
			return nil, err
		}
		dir.set(wranks.SkeletonName(i), filemode.Regular, h)
	}
	ih, err := b.blob(ix.Encode())
	if err != nil {
		return nil, err
	}
	dir.set(wranks.IndexName, filemode.Regular, ih)
	dirHash, err := b.writeTree(dir)
	if err != nil {
		return nil, err
	}
	attrs, err := b.blob(attrText)
	if err != nil {
		return nil, err
	}
	rootHash, err := b.replacePath(prevRoot, strings.Split(RanksDir(r.cfg.Path), "/"), dirHash, func(t *treeBuilder) {
		t.set(FileAttributes, filemode.Regular, attrs)
	})
	if err != nil {
		return nil, err
	}
	when := r.cfg.Now().UTC()
	if ts, err := time.Parse("2006-01-02T15:04:05Z", ix.TS); err == nil {
		when = ts
	}
	sig := object.Signature{Name: r.cfg.AuthorName, Email: r.cfg.AuthorEmail, When: when}
	c := &object.Commit{Author: sig, Committer: sig, Message: ranksMessage(ix, g.Skipped, g.Meta), TreeHash: rootHash}
	var oldRef *plumbing.Reference
	if head != nil {
		c.ParentHashes = []plumbing.Hash{head.commit.Hash}
		oldRef = plumbing.NewHashReference(plumbing.NewBranchReferenceName(r.cfg.Branch), head.commit.Hash)
	}
	if r.cfg.SigningKey != nil {
		if c.PGPSignature, err = signObject(r.cfg.SigningKey, c.EncodeWithoutSignature); err != nil {
			return nil, err
		}
	}
	commitHash, err := b.encode(c.Encode)
	if err != nil {
		return nil, err
	}
	tagHash, err := r.tagAndAdvance(b, commitHash, oldRef, tagName, sig, "snapd: generation "+ix.Gen+"\n")
	if err != nil {
		return nil, err
	}
	r.segKeys = nil
	return &Result{Gen: ix.GenNumber(), Commit: commitHash, Tag: tagName, TagObject: tagHash, Layout: LayoutRanks,
		BlobsWritten: b.blobs, BytesWritten: b.bytes}, nil
}

// RanksHead returns the branch head's multi-rank generation: nil, nil when
// the branch does not exist yet.
func (r *Repo) RanksHead() (*RanksCommit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	head, err := r.head()
	if err != nil || head == nil {
		return nil, err
	}
	return ReadRanksCommit(head.commit, r.cfg.Path)
}

// RanksCommit is one multi-rank generation commit of a ledger.
type RanksCommit struct {
	Commit *object.Commit
	Dir    *object.Tree // Config.Path/ranks
	Index  *wranks.Index
	name   string // "<commit>:<dir>" in errors
}

// ReadRanksCommit reads the multi-rank generation of commit c under the
// snapshot path p ("" is DefaultPath): its index, size checked before it
// is read (wranks.MaxIndexBytes) and parsed strictly.
func ReadRanksCommit(c *object.Commit, p string) (*RanksCommit, error) {
	root, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("gitops: tree of %s: %w", c.Hash, err)
	}
	dirPath := RanksDir(p)
	short := c.Hash.String()[:12]
	dir, err := root.Tree(dirPath)
	if err != nil {
		return nil, fmt.Errorf("gitops: %s:%s: %w", short, dirPath, err)
	}
	rc := &RanksCommit{Commit: c, Dir: dir, name: short + ":" + dirPath}
	b, err := rc.read(wranks.IndexName, wranks.MaxIndexBytes, -1, wranks.CheckGrammar)
	if err != nil {
		return nil, err
	}
	if rc.Index, err = wranks.Parse(b, rc.name+"/"+wranks.IndexName); err != nil {
		return nil, err
	}
	return rc, nil
}

// Skeleton returns rank r's skeleton, size checked before it is read
// (wranks.MaxSkeletonBytes). It is not checked against the index
// (Index.CheckSkeleton).
func (rc *RanksCommit) Skeleton(r int) ([]byte, error) {
	return rc.read(wranks.SkeletonName(r), wranks.MaxSkeletonBytes, r, wranks.CheckSkeleton)
}

// SkeletonName returns rank r's skeleton as errors name it:
// "<commit 12>:<dir>/rank-RRRRR.skel".
func (rc *RanksCommit) SkeletonName(r int) string { return rc.name + "/" + wranks.SkeletonName(r) }

// Names returns the names of the entries of the generation's directory.
func (rc *RanksCommit) Names() []string {
	out := make([]string, 0, len(rc.Dir.Entries))
	for _, e := range rc.Dir.Entries {
		out = append(out, e.Name)
	}
	return out
}

func (rc *RanksCommit) read(name string, limit int64, rank int, check wtxt.Check) ([]byte, error) {
	where := rc.name + "/" + name
	f, err := rc.Dir.File(name)
	if err != nil {
		return nil, fmt.Errorf("gitops: %s: %w", where, err)
	}
	if f.Size > limit {
		return nil, wranks.Fail(where, 0, rank, check, "%d bytes (limit %d)", f.Size, limit)
	}
	rd, err := f.Reader()
	if err != nil {
		return nil, fmt.Errorf("gitops: %s: %w", where, err)
	}
	defer rd.Close()
	var buf bytes.Buffer
	buf.Grow(int(f.Size))
	if _, err := io.Copy(&buf, io.LimitReader(rd, limit+1)); err != nil {
		return nil, fmt.Errorf("gitops: %s: %w", where, err)
	}
	if int64(buf.Len()) != f.Size {
		return nil, fmt.Errorf("gitops: %s: read %d bytes, the tree says %d", where, buf.Len(), f.Size)
	}
	return buf.Bytes(), nil
}

// RanksGenerations returns the generation numbers (TrailerGen) of the
// first-parent history of branch in repo, newest first (down to a
// shallow boundary).
func RanksGenerations(repo *git.Repository, branch string) ([]uint64, error) {
	ref, err := repo.Reference(plumbing.NewBranchReferenceName(branch), true)
	if err != nil {
		return nil, fmt.Errorf("gitops: branch %s: %w", branch, err)
	}
	shallow := map[plumbing.Hash]bool{}
	if hs, err := repo.Storer.Shallow(); err == nil {
		for _, h := range hs {
			shallow[h] = true
		}
	}
	var out []uint64
	for h := ref.Hash(); ; {
		c, err := repo.CommitObject(h)
		if err != nil {
			return out, fmt.Errorf("gitops: commit %s: %w", h, err)
		}
		if n, err := parseGenTrailer(ParseTrailers(c.Message)[TrailerGen]); err == nil {
			out = append(out, n)
		}
		if len(c.ParentHashes) == 0 || shallow[c.Hash] {
			return out, nil
		}
		h = c.ParentHashes[0]
	}
}

// ResolveRanks returns the multi-rank generation at revision rev of repo
// (a commit, tag or branch) under the snapshot path p.
func ResolveRanks(repo *git.Repository, rev, p string) (*RanksCommit, error) {
	h, err := repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return nil, fmt.Errorf("gitops: revision %q: %w", rev, err)
	}
	c, err := repo.CommitObject(*h)
	if err != nil {
		return nil, fmt.Errorf("gitops: revision %q: %w", rev, err)
	}
	return ReadRanksCommit(c, p)
}

// IsRanks reports whether the tip of branch (local, else origin's) of
// repo holds a multi-rank generation under the snapshot path p.
func IsRanks(repo *git.Repository, branch, p string) bool {
	for _, name := range []plumbing.ReferenceName{plumbing.NewBranchReferenceName(branch), plumbing.NewRemoteReferenceName("origin", branch)} {
		ref, err := repo.Reference(name, true)
		if err != nil {
			continue
		}
		c, err := repo.CommitObject(ref.Hash())
		if err != nil {
			return false
		}
		root, err := c.Tree()
		if err != nil {
			return false
		}
		if p == "" {
			p = DefaultPath
		}
		dir, err := root.Tree(p)
		return err == nil && layout.IsRanks(layout.TreeHas(dir))
	}
	return false
}
