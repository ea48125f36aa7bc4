package gitops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout"
)

// Repo commits generations into a bare Git repository on disk. Its methods
// are safe for concurrent use; other processes must not commit to the same
// branch.
type Repo struct {
	dir string
	cfg Config
	mu  sync.Mutex
	r   *git.Repository
	// segKeys maps the skeleton segments of the last generation this Repo
	// committed (by wtxt.SegmentKey) to their digests, so the next Commit
	// reads, decodes and hashes only the segments whose chunks changed.
	// Empty after a restart: the first Commit then decodes everything.
	segKeys map[wtxt.SegmentKey][32]byte
	// objIdx answers Commit's existence checks (objindex.go); nil
	// without an objects directory.
	objIdx *objIndex
	// checkPacks: every pack Commit writes is checked by git before it
	// is installed (EnvCheckPacks).
	checkPacks bool
	// retainHook, when set (tests), runs before each step of Retain and
	// fails it with its error, as a crash there would stop it.
	retainHook func(step string) error
}

// packCompression is the zlib level of objects the git CLI packs from
// snapd's repository (and of the loose objects Repo writes, looseLevel).
const packCompression = "0"

// OpenRepo opens the bare repository at dir, creating it when dir does not
// exist or is empty.
func OpenRepo(dir string, cfg Config) (*Repo, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	r, err := git.PlainOpen(dir)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		r, err = git.PlainInit(dir, true)
	}
	if err != nil {
		return nil, fmt.Errorf("gitops: open repository %s: %w", dir, err)
	}
	// WTXT chunks are base64 of high-entropy floats: a changed chunk has
	// nothing in common with the old one, and a thin pack's delta bases
	// are appended in full by the receiver's index-pack (--fix-thin), so
	// git's delta search on push (pack.window, default 10) costs CPU and
	// saves nothing stored (scripts/bench-git.sh: window 10 gave 1.8x the
	// first push's CPU and the same remote growth). snapd owns this
	// repository and turns it off.
	// Compression: base64 of floats deflates only to ~75%, and inflating
	// and deflating every changed part (loose write, pack-objects, the
	// receiver's index-pack) was most of the Git CPU; pack.compression=0
	// stores zlib blocks uncompressed (see doc.go, "Pushing").
	gc, err := r.Config()
	if err == nil && (gc.Pack.Window != 0 || gc.Raw.Section("pack").Option("compression") != packCompression) {
		gc.Pack.Window = 0
		gc.Raw.Section("pack").SetOption("compression", packCompression)
		err = r.SetConfig(gc)
	}
	if err != nil {
		return nil, fmt.Errorf("gitops: repository %s: set pack.window=0, pack.compression=%s: %w", dir, packCompression, err)
	}
	return &Repo{dir: dir, cfg: cfg, r: r, checkPacks: checkPacksFromEnv(os.Getenv)}, nil
}

// OpenExisting opens an existing repository (bare, or a clone with a work
// tree) for reading generations with WriteWTXT, without creating it or
// changing its configuration.
func OpenExisting(dir string, cfg Config) (*Repo, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	r, err := git.PlainOpen(dir)
	if err != nil {
		return nil, fmt.Errorf("gitops: open repository %s: %w", dir, err)
	}
	return &Repo{dir: dir, cfg: cfg, r: r, checkPacks: checkPacksFromEnv(os.Getenv)}, nil
}

// Dir returns the repository directory.
func (r *Repo) Dir() string { return r.dir }

// Config returns the configuration with defaults applied.
func (r *Repo) Config() Config { return r.cfg }

// TagName returns the tag name of generation text gen (e.g. "000123").
func (r *Repo) TagName(genText string) string { return r.cfg.TagPrefix + genText }

// headInfo is what Commit needs from the branch head.
type headInfo struct {
	commit *object.Commit
	tree   *object.Tree
	trail  map[string]string
	base   bool // the base branch's tip (Config.BaseBranch), not a generation
}

func (r *Repo) head() (*headInfo, error) {
	ref, err := r.r.Reference(plumbing.NewBranchReferenceName(r.cfg.Branch), true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gitops: read branch %s: %w", r.cfg.Branch, err)
	}
	c, err := r.r.CommitObject(ref.Hash())
	if err != nil {
		return nil, fmt.Errorf("gitops: branch %s head %s: %w", r.cfg.Branch, ref.Hash(), err)
	}
	t, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("gitops: tree of %s: %w", c.Hash, err)
	}
	return &headInfo{commit: c, tree: t, trail: ParseTrailers(c.Message)}, nil
}

// Commit records generation g as one new commit on the branch, plus an
// annotated tag, both signed when a SigningKey is configured. Only blobs
// for changed files (or changed parts) are written; the trees are built
// from the previous commit's trees. Committing the generation that already
// is the branch head (same gen and sha256_all) returns it with Existing set,
// so a caller may retry after a crash.
func (r *Repo) Commit(ctx context.Context, g Generation) (*Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := readHeader(g)
	if err != nil {
		return nil, err
	}
	if err := settleMeta(ctx, g, h); err != nil {
		return nil, err
	}
	// 1. The parent: the branch head, the base branch's tip, or a resume
	// record over the abandoned generations.
	head, err := r.parent(ctx, g, h)
	if err != nil {
		return nil, err
	}
	// 2. The chain: a repeat of the head is returned as it is; anything
	// else must follow it (gen order, merkle link) and pass Verify.
	tagName := r.genTag(ctx, h.Root.Gen, head)
	if res, err := r.checkChain(head, h, tagName); res != nil || err != nil {
		return res, err
	}
	if r.cfg.Verify != nil {
		if err := r.cfg.Verify(ctx, g, h); err != nil {
			return nil, fmt.Errorf("gitops: generation %s: verify: %w", h.Root.Gen, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// 3. The generation directory: the WTXT in the chosen layout, the
	// sidecars, generation.txt.
	b, attrText, err := r.newBuilder(ctx, head)
	if err != nil {
		return nil, err
	}
	if b.pack != nil {
		defer b.pack.abort()
	}
	prevDir, err := r.prevDir(head)
	if err != nil {
		return nil, err
	}
	dir := newTreeBuilder(prevDir)
	stored, info, err := r.storeWTXT(b, dir, prevDir, g)
	if err != nil {
		return nil, err
	}
	if err := r.storeSidecars(b, dir, prevDir, g, h, stored, info); err != nil {
		return nil, err
	}
	// 4. The root tree, the signed commit and tag, then the refs.
	rootHash, err := r.writeRoot(b, head, dir, attrText)
	if err != nil {
		return nil, err
	}
	res, err := r.writeCommit(b, head, h, stored, tagName, rootHash)
	if err == nil {
		r.noteGen(h.Gen)
	}
	if err != nil {
		return nil, err
	}
	if stored == LayoutSegments {
		r.segKeys = b.newSegKeys
	} else {
		r.segKeys = nil
	}
	return res, nil
}

// parent returns what generation g's commit follows (nil: an orphan
// commit): the branch head; on a branch not yet made, the base branch's
// tip (Config.BaseBranch, base.go); after a resume record when g
// declares one (resume.go).
func (r *Repo) parent(ctx context.Context, g Generation, h *Header) (*headInfo, error) {
	head, err := r.head()
	if err != nil {
		return nil, err
	}
	if head == nil {
		if bc, err := r.baseCommit(ctx); err != nil {
			return nil, err
		} else if bc != nil {
			if head, err = startFrom(bc); err != nil {
				return nil, err
			}
		}
	}
	if g.Resume != nil {
		if head, err = r.resume(ctx, head, h, *g.Resume); err != nil {
			return nil, err
		}
	}
	return head, nil
}

// checkChain checks that h follows the head generation: the same
// generation again returns the head (existing); an older or equal gen
// fails with ErrGenOrder, a merkle_prev that is not the head's
// merkle_this with ErrChainBreak. Both nil: commit.
func (r *Repo) checkChain(head *headInfo, h *Header, tagName string) (*Result, error) {
	if head == nil || head.base {
		return nil, nil
	}
	prevGen := head.trail[TrailerGen]
	if prevGen == h.Root.Gen && head.trail[TrailerSHA256All] == h.trailer(TrailerSHA256All) {
		return r.existing(head, h, tagName)
	}
	pg, err := parseGenTrailer(prevGen)
	if err != nil {
		return nil, fmt.Errorf("gitops: branch %s head %s has no %s trailer", r.cfg.Branch, head.commit.Hash, TrailerGen)
	}
	if h.Gen <= pg {
		return nil, fmt.Errorf("%w: generation %s, head %s has %s", ErrGenOrder, h.Root.Gen, head.commit.Hash, prevGen)
	}
	if pm, mp := head.trail[TrailerMerkleThis], h.trailer(TrailerMerklePrev); pm != mp {
		return nil, fmt.Errorf("%w: generation %s merkle_prev %s, head generation %s merkle_this %s", ErrChainBreak, h.Root.Gen, mp, prevGen, pm)
	}
	return nil, nil
}

// newBuilder returns the object writer of one commit and the root
// .gitattributes it carries (its blob is the base of the pack's literal
// deltas, packw.go, so it is known before anything is stored). The
// caller aborts b.pack (when set) on its way out.
func (r *Repo) newBuilder(ctx context.Context, head *headInfo) (*builder, []byte, error) {
	var prevRoot *object.Tree
	if head != nil {
		prevRoot = head.tree
	}
	attrText, err := r.attributes(prevRoot)
	if err != nil {
		return nil, nil, err
	}
	b := &builder{st: r.r.Storer, ctx: ctx, objects: objectsDir(r.dir), knownSegs: r.segKeys}
	if b.objects != "" {
		// A pack index that cannot be read leaves the checks to go-git.
		if x, err := r.objectIndex(b.objects); err == nil {
			b.idx = x
		}
		b.pack = newPackWriter(b.objects)
		b.pack.setDeltaBase(plumbing.ComputeHash(plumbing.BlobObject, attrText), attrText)
		if r.checkPacks {
			b.pack.check = indexPackCheck(ctx, r.dir)
		}
	}
	return b, attrText, nil
}

// prevDir returns the head generation's directory (nil: none, or the
// head is the base branch's tip).
func (r *Repo) prevDir(head *headInfo) (*object.Tree, error) {
	if head == nil || head.base {
		return nil, nil
	}
	prevDir, err := head.tree.Tree(r.cfg.Path)
	if errors.Is(err, object.ErrDirectoryNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("gitops: previous tree %s: %w", r.cfg.Path, err)
	}
	return prevDir, nil
}

// chooseLayout returns the layout generation g's WTXT (or skeleton) of
// size bytes is stored in, and whether a single file is stored split
// into parts: the configured one, auto's choice by SplitThreshold, the
// skeleton layout for a Generation.Skeleton, and split parts for an
// age-armored WTXT the segments layout has no structure to cut.
func (r *Repo) chooseLayout(g Generation, size int64) (Layout, bool) {
	big := r.cfg.Layout == LayoutAuto && size > r.cfg.SplitThreshold
	split := r.cfg.Layout == LayoutSplit || big
	switch {
	case g.Skeleton != "":
		return LayoutSkeleton, split
	case (r.cfg.Layout == LayoutSegments || big) && layout.IsPlainWTXTFile(g.WTXT):
		// auto above SplitThreshold: segments (an armored WTXT has no
		// structure to cut into raw segments: split parts, below).
		return LayoutSegments, false
	case r.cfg.Layout == LayoutSegments:
		return LayoutSplit, true // an armored WTXT has no structure to split by
	case split:
		return LayoutSplit, true
	}
	return LayoutSingle, false
}

// storeWTXT stores generation g's WTXT (or skeleton) in dir in the
// layout chooseLayout picks, removing the other layouts' entries, and
// returns the layout and what generation.txt records of it. A WTXT is
// written by its layout.Layout into the commit's tree (genTree) and, for
// segments, its seg/ store (gitSegs); a skeleton the pipeline cut (its
// segments already in the registry) is stored as a file, one or split.
func (r *Repo) storeWTXT(b *builder, dir *treeBuilder, prevDir *object.Tree, g Generation) (Layout, fileInfo, error) {
	src, name := g.WTXT, FileWTXT
	if g.Skeleton != "" {
		src, name = g.Skeleton, FileSkeleton
	}
	st, err := os.Stat(src)
	if err != nil {
		return "", fileInfo{}, fmt.Errorf("gitops: %w", err)
	}
	stored, split := r.chooseLayout(g, st.Size())
	for _, n := range []string{FileWTXT, DirWTXTParts, DirWTXTSegs, FileSkeleton, FileSkeleton + partsSuffix} {
		dir.remove(n)
	}
	if stored == LayoutSkeleton {
		info, err := b.storeFile(dir, prevDir, name, src, split, r.cfg.PartLimit)
		return stored, info, err
	}
	info, err := r.writeLayout(b, dir, prevDir, stored, src)
	return stored, info, err
}

// writeLayout writes the WTXT at src into dir with the layout named
// stored (single, split or segments).
func (r *Repo) writeLayout(b *builder, dir *treeBuilder, prevDir *object.Tree, stored Layout, src string) (fileInfo, error) {
	l, ok := layout.Lookup(stored)
	if !ok {
		return fileInfo{}, fmt.Errorf("gitops: no layout %q", stored)
	}
	f, err := os.Open(src)
	if err != nil {
		return fileInfo{}, fmt.Errorf("gitops: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fileInfo{}, fmt.Errorf("gitops: %w", err)
	}
	t := b.genTree(dir, prevDir, src)
	var segs *gitSegs
	var blobs layout.Blobs
	if stored == LayoutSegments {
		var prev *object.Tree
		if prevDir != nil {
			if pt, err := prevDir.Tree(DirWTXTSegs); err == nil {
				prev = pt
			}
		}
		segs = b.segStore(prev, r.cfg.SegmentPiece)
		blobs = segs
	}
	o := layout.WriteOptions{PartLimit: r.cfg.PartLimit, SegmentSize: r.cfg.SegmentSize, File: src}
	if err := l.Write(b.ctx, f, st.Size(), t, blobs, o); err != nil {
		switch stored {
		case LayoutSplit:
			return fileInfo{}, fmt.Errorf("gitops: split %s: %w", src, err)
		case LayoutSegments:
			return fileInfo{}, fmt.Errorf("gitops: skeleton %s: %w", src, err)
		}
		return fileInfo{}, err
	}
	var info fileInfo
	switch stored {
	case LayoutSingle:
		info = t.info[FileWTXT]
	case LayoutSplit:
		info = t.info[DirWTXTParts]
	case LayoutSegments:
		h, err := segs.tree()
		if err != nil {
			return fileInfo{}, err
		}
		if !h.IsZero() {
			if err := t.setDir(path.Join(DirWTXTSegs, layout.SegDir), h); err != nil {
				return fileInfo{}, err
			}
		}
		b.newSegKeys = segs.keys
		b.segsReused += segs.reused
		// No wtxt_sha256 (generation.txt omits it): it would cost a
		// second pass over the whole file (about 1.5 CPU-s per GiB), and
		// a reader rebuilds the WTXT from the pieces and segments the
		// signed commit holds and checks it whole (structure, every
		// chunk, sha256_all, the signed root) anyway.
		info = fileInfo{size: st.Size()}
	}
	return info, t.finish()
}

// storeSidecars stores the optional files (the DELTA as Config.Delta
// says, WSUM, seal, picture), removing absent ones, and generation.txt
// (summary).
func (r *Repo) storeSidecars(b *builder, dir *treeBuilder, prevDir *object.Tree, g Generation, h *Header, stored Layout, info fileInfo) error {
	summary := summaryText(h, g, stored, info)
	delta := g.Delta
	if r.cfg.Delta == DeltaNever || r.cfg.Delta == DeltaAuto && stored != LayoutSingle || g.Skeleton != "" {
		delta = ""
	}
	for _, o := range []struct{ name, src string }{{FileDelta, delta}, {FileWSUM, g.WSUM}, {FileSeal, g.Seal}} {
		if o.src == "" {
			dir.remove(o.name)
			dir.remove(o.name + partsSuffix)
			continue
		}
		st, err := os.Stat(o.src)
		if err != nil {
			return fmt.Errorf("gitops: %w", err)
		}
		split := r.cfg.Layout != LayoutSingle && st.Size() > r.cfg.SplitThreshold
		fi, err := b.storeFile(dir, prevDir, o.name, o.src, split, r.cfg.PartLimit)
		if err != nil {
			return err
		}
		key := strings.TrimPrefix(path.Ext(o.name), ".")
		summary += fmt.Sprintf("%s_bytes=%d\n%s_sha256=%s\n", key, fi.size, key, fi.sha256)
	}
	if g.Picture == "" {
		dir.remove(FilePicture)
	} else if _, err := b.storeFile(dir, prevDir, FilePicture, g.Picture, false, r.cfg.PartLimit); err != nil {
		return err
	}
	sum, err := b.blob([]byte(summary))
	if err != nil {
		return err
	}
	dir.set(FileSummary, filemode.Regular, sum)
	return nil
}

// summaryText is generation.txt up to the sidecars: the root values,
// the layout, the WTXT's (or skeleton's) size and SHA-256, the registry
// side of a skeleton.
func summaryText(h *Header, g Generation, stored Layout, info fileInfo) string {
	key := "wtxt"
	if g.Skeleton != "" {
		key = "skel"
	}
	var sb strings.Builder
	for _, f := range h.Root.Fields() {
		sb.WriteString(f.Key + "=" + f.Value + "\n")
	}
	fmt.Fprintf(&sb, "layout=%s\n%s_bytes=%d\n", stored, key, info.size)
	if info.sha256 != "" { // the segments layout omits it
		fmt.Fprintf(&sb, "%s_sha256=%s\n", key, info.sha256)
	}
	if g.OCI != nil {
		fmt.Fprintf(&sb, "oci_repository=%s\noci_manifest=%s\n", g.OCI.Repository, g.OCI.Manifest)
		if g.OCI.Tag != "" {
			fmt.Fprintf(&sb, "oci_tag=%s\n", g.OCI.Tag)
		}
	}
	return sb.String()
}

// writeRoot writes the generation directory and the root tree (the
// previous root with .gitattributes and Config.Path replaced), then
// installs the pack, so every new blob and tree is stored before a
// commit names them.
func (r *Repo) writeRoot(b *builder, head *headInfo, dir *treeBuilder, attrText []byte) (plumbing.Hash, error) {
	dirHash, err := b.writeTree(dir)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	attrs, err := b.blob(attrText)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	var prevRoot *object.Tree
	if head != nil {
		prevRoot = head.tree
	}
	rootHash, err := b.replacePath(prevRoot, strings.Split(r.cfg.Path, "/"), dirHash, func(t *treeBuilder) {
		t.set(FileAttributes, filemode.Regular, attrs)
	})
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if b.pack != nil {
		added, err := b.pack.finish()
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if s, ok := r.r.Storer.(interface{ Reindex() }); ok && added {
			s.Reindex() // go-git lists packs once
		}
	}
	return rootHash, nil
}

// writeCommit writes the (signed) commit of rootHash and its annotated
// tag, then moves the branch (checked against the head it follows) and
// sets the tag.
func (r *Repo) writeCommit(b *builder, head *headInfo, h *Header, stored Layout, tagName string, rootHash plumbing.Hash) (*Result, error) {
	when := r.cfg.Now().UTC()
	if ts, err := time.Parse("2006-01-02T15:04:05Z", h.Root.TS); err == nil {
		when = ts
	}
	sig := object.Signature{Name: r.cfg.AuthorName, Email: r.cfg.AuthorEmail, When: when}
	msg := message(h, stored)
	if head != nil && head.base {
		msg = baseMessage(msg, head.commit.Hash)
	}
	c := &object.Commit{Author: sig, Committer: sig, Message: msg, TreeHash: rootHash}
	var oldRef *plumbing.Reference
	if head != nil {
		c.ParentHashes = []plumbing.Hash{head.commit.Hash}
	}
	if head != nil && !head.base {
		oldRef = plumbing.NewHashReference(plumbing.NewBranchReferenceName(r.cfg.Branch), head.commit.Hash)
	}
	var err error
	if r.cfg.SigningKey != nil {
		if c.PGPSignature, err = signObject(r.cfg.SigningKey, c.EncodeWithoutSignature); err != nil {
			return nil, err
		}
	}
	commitHash, err := b.encode(c.Encode)
	if err != nil {
		return nil, err
	}
	tagHash, err := r.tagAndAdvance(b, commitHash, oldRef, tagName, sig, msg)
	if err != nil {
		return nil, err
	}
	return &Result{Gen: h.Gen, Commit: commitHash, Tag: tagName, TagObject: tagHash, Layout: stored,
		BlobsWritten: b.blobs, BytesWritten: b.bytes}, nil
}

// existing returns the head as the result for a repeated Commit, creating
// its tag if a crash lost it.
func (r *Repo) existing(head *headInfo, h *Header, tagName string) (*Result, error) {
	res := &Result{Gen: h.Gen, Commit: head.commit.Hash, Tag: tagName, Layout: Layout(head.trail[TrailerLayout]), Existing: true}
	tagRef := plumbing.NewTagReferenceName(tagName)
	if ref, err := r.r.Storer.Reference(tagRef); err == nil {
		res.TagObject = ref.Hash()
		return res, nil
	}
	b := &builder{st: r.r.Storer, ctx: context.Background()}
	t := &object.Tag{Name: tagName, Tagger: head.commit.Committer, Message: head.commit.Message, TargetType: plumbing.CommitObject, Target: head.commit.Hash}
	var err error
	if r.cfg.SigningKey != nil {
		if t.PGPSignature, err = signObject(r.cfg.SigningKey, t.EncodeWithoutSignature); err != nil {
			return nil, err
		}
	}
	if res.TagObject, err = b.encode(t.Encode); err != nil {
		return nil, err
	}
	if err := r.r.Storer.SetReference(plumbing.NewHashReference(tagRef, res.TagObject)); err != nil {
		return nil, fmt.Errorf("gitops: set tag %s: %w", tagName, err)
	}
	return res, nil
}

// ResolveGen returns the commit (hex) of generation gen: its tag when the
// repository has it (the newest, -rK, when a resumed run re-used the
// number), else the newest commit on the branch whose Snapd-Gen trailer
// names it (first parents from the head, as far as a shallow clone goes;
// a resume record, which reads as the generation it resumed from, is
// passed over). A generation below the boundary Retain left is ErrPruned.
func (r *Repo) ResolveGen(gen uint64) (string, error) {
	// Commit may reindex the object store's packs (go-git's storage is
	// not safe for concurrent use); the daemon's OCI publisher resolves
	// generations while the pipeline commits.
	r.mu.Lock()
	defer r.mu.Unlock()
	text := fmt.Sprintf("%06d", gen)
	// A number re-used after a resume: the newest tag (resume.go).
	tags := GenTags(func(n string) bool {
		_, err := r.r.Reference(plumbing.NewTagReferenceName(n), true)
		return err == nil
	}, r.cfg.TagPrefix, text)
	if ref, err := r.r.Reference(plumbing.NewTagReferenceName(tags[len(tags)-1]), true); err == nil {
		if t, err := r.r.TagObject(ref.Hash()); err == nil {
			return t.Target.String(), nil
		}
		return ref.Hash().String(), nil
	}
	ref, err := r.r.Reference(plumbing.NewBranchReferenceName(r.cfg.Branch), true)
	if err != nil {
		// A clone of one generation's tag (snapd clone --gen) has no
		// branch, only a detached HEAD.
		if ref, err = r.detachedHead(); err != nil {
			return "", fmt.Errorf("gitops: generation %s: no tag %s and no branch %s: %w", text, r.TagName(text), r.cfg.Branch, err)
		}
	}
	h := ref.Hash()
	shallow := r.shallowSet()
	for {
		c, err := r.r.CommitObject(h)
		if err != nil {
			break // the shallow boundary (or a broken history)
		}
		tr := ParseTrailers(c.Message)
		if tr[TrailerGen] == text && tr[TrailerResumedFrom] == "" {
			return c.Hash.String(), nil
		}
		if shallow[c.Hash] {
			// The boundary Retain left: older generations were pushed.
			if g, err := parseGenTrailer(tr[TrailerGen]); err == nil && gen < g {
				return "", fmt.Errorf("gitops: generation %s: %w (the oldest generation kept is %s)", text, ErrPruned, tr[TrailerGen])
			}
			break
		}
		if len(c.ParentHashes) == 0 {
			break
		}
		h = c.ParentHashes[0]
	}
	return "", fmt.Errorf("gitops: generation %s is not in this repository (no tag %s; not on branch %s as fetched)", text, r.TagName(text), r.cfg.Branch)
}

// detachedHead returns HEAD when it is detached (names a commit, not a
// branch).
func (r *Repo) detachedHead() (*plumbing.Reference, error) {
	ref, err := r.r.Storer.Reference(plumbing.HEAD)
	if err != nil {
		return nil, err
	}
	if ref.Type() != plumbing.HashReference {
		return nil, plumbing.ErrReferenceNotFound
	}
	return ref, nil
}

// LatestRevision returns the revision of the newest generation: the
// branch, or a detached HEAD when the repository has no such branch (a
// clone of one generation's tag, snapd clone --gen).
func (r *Repo) LatestRevision() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	branch := plumbing.NewBranchReferenceName(r.cfg.Branch)
	if _, err := r.r.Reference(branch, true); err != nil {
		if _, derr := r.detachedHead(); derr == nil {
			return "HEAD"
		}
	}
	return branch.String()
}

// tagAndAdvance writes the (signed) annotated tag tagName on commitHash
// and moves the branch from oldRef (nil: the branch must not exist) to
// commitHash, then sets the tag. Branch first: a crash between the two
// leaves a head whose tag existing() re-creates. A tag of that name
// already naming another object is ErrGenOrder.
func (r *Repo) tagAndAdvance(b *builder, commitHash plumbing.Hash, oldRef *plumbing.Reference, tagName string, sig object.Signature, msg string) (plumbing.Hash, error) {
	t := &object.Tag{Name: tagName, Tagger: sig, Message: msg, TargetType: plumbing.CommitObject, Target: commitHash}
	var err error
	if r.cfg.SigningKey != nil {
		if t.PGPSignature, err = signObject(r.cfg.SigningKey, t.EncodeWithoutSignature); err != nil {
			return plumbing.ZeroHash, err
		}
	}
	tagHash, err := b.encode(t.Encode)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	tagRef := plumbing.NewTagReferenceName(tagName)
	if old, err := r.r.Storer.Reference(tagRef); err == nil && old.Hash() != tagHash {
		return plumbing.ZeroHash, fmt.Errorf("%w: tag %s already exists (%s) for another commit", ErrGenOrder, tagName, old.Hash())
	}
	newRef := plumbing.NewHashReference(plumbing.NewBranchReferenceName(r.cfg.Branch), commitHash)
	if err := r.r.Storer.CheckAndSetReference(newRef, oldRef); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("gitops: update branch %s: %w", r.cfg.Branch, err)
	}
	if err := r.r.Storer.SetReference(plumbing.NewHashReference(tagRef, tagHash)); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("gitops: set tag %s: %w", tagName, err)
	}
	return tagHash, nil
}
