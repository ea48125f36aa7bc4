package verify

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/gitops/sshsig"
)

// Errors returned by Verify (not failed checks: those are in the Report).
var (
	// ErrNoKeys means Options.TrustedKeys is empty.
	ErrNoKeys = errors.New("verify: no trusted public keys")
	// ErrBranch means the branch (or --since revision) cannot be resolved.
	ErrBranch = errors.New("verify: branch")
	// ErrSince means the since revision is not on the branch's first-parent chain.
	ErrSince = errors.New("verify: since")
)

// Checks named in failures (stable: they appear in JSON output). WTXT
// verifier checks appear as "wtxt/<check>" (e.g. "wtxt/crc32c") and seal
// checks as "seal/<check>" (e.g. "seal/sha256").
const (
	CheckObject    = "object"                // a Git object cannot be read
	CheckHistory   = "history"               // merge commit on the snapshot branch
	CheckTrailer   = "trailer"               // commit trailers missing or disagreeing with the content
	CheckCommitSig = "commit-signature"      // SSHSIG of the commit
	CheckTag       = "tag"                   // the generation's annotated tag
	CheckTagSig    = "tag-signature"         // SSHSIG of the tag
	CheckLayout    = "layout"                // files of the generation directory
	CheckParts     = "parts"                 // split layout: MANIFEST, part sizes and hashes
	CheckSummary   = "summary"               // generation.txt
	CheckGenOrder  = "gen-order"             // generation numbers strictly increasing
	CheckChain     = string(wtxt.CheckChain) // merkle_prev == previous merkle_this (wtxt.ErrChain)
	CheckDelta     = "delta"                 // current.wtxtdelta reproduces current.wtxt
	CheckSize      = "size"                  // a file above Options.MaxObjectBytes
)

// DefaultMaxObjectBytes is the default Options.MaxObjectBytes: 32 GiB, far
// above any generation the daemon writes on the machines it targets and
// well below what a hostile repository can claim.
const DefaultMaxObjectBytes = 32 << 30

// largeObjectThreshold: blobs above it are streamed from the pack rather
// than decoded into memory (go-git's filesystem storage option).
const largeObjectThreshold = 1 << 20

// objectCacheSize bounds go-git's object cache: the walk reads each blob
// once, so a small cache (trees, delta bases) does; with go-git's default
// of 96 MiB, snapd verify-repo of three 256 MiB generations peaked at
// 277-291 MB RSS (72-81 MB with this one, the same at 64 MiB).
const objectCacheSize = 16 * cache.MiByte

// Chain states of a generation.
const (
	ChainFirst     = "first"     // root commit, merkle_prev is zero
	ChainAnchor    = "anchor"    // start of the walk: merkle_prev trusted, not checked
	ChainContinues = "continues" // merkle_prev == previous generation's merkle_this
	ChainBroken    = "broken"
)

// Options configure Verify.
type Options struct {
	Branch    string // default "snapshots"
	Path      string // directory of the generation files; default "snapshots"
	TagPrefix string // default "gen-"
	// Since, when set, is a revision (commit, tag, ...) on the branch's
	// first-parent chain where the walk starts; that generation is the
	// chain anchor: verified itself, its merkle_prev not checked.
	Since string
	// TrustedKeys verify WTXT and seal signatures and the commit and tag
	// SSHSIG signatures, for any namespace at any time (a .pub file).
	TrustedKeys []ed25519.PublicKey
	// AllowedSigners, when set, also lists trusted signers with
	// ssh-keygen's allowed_signers policy: commit and tag signatures
	// (namespace "git") are accepted as git verify-commit / verify-tag
	// accept them (principals, namespaces, valid-after and valid-before
	// at the committer or tagger time, cert-authority); WTXT, skeleton
	// and seal signatures (namespace "file", Ed25519 keys only, never
	// through a certificate) by the keys whose lines allow namespace
	// "file" at the committer time of the generation's commit (snapd
	// sets it to the generation's meta ts). TrustedKeys or
	// AllowedSigners is required.
	AllowedSigners *sshsig.AllowedSigners
	// TempDir holds the working copies of two generations' WTXT files at a
	// time (default os.TempDir()).
	TempDir string
	// MaxObjectBytes bounds each file read from a generation (the WTXT or
	// delta blob, or the assembled size of its parts): a larger one fails
	// with CheckSize, checked from the object header before any content is
	// read (0 = DefaultMaxObjectBytes).
	MaxObjectBytes int64
	// OnGeneration, if set, is called with each generation once checked.
	OnGeneration func(*Generation)

	// Registry serves the segment blobs of skeleton-layout generations
	// (layout.FileSkeleton; docs/FORMAT.md §6), read only. Without it such a
	// generation fails with CheckRegistry (its header is still checked).
	Registry Registry
	// Sample, when in (0, 1), checks only that fraction of each
	// skeleton-layout generation's segments (SampleSegments, seeded by
	// Seed and the gen) plus every skeleton line, the manifest, the
	// presence of every blob, and the header's Merkle value and
	// signature. 0 or >= 1: full verification (the default).
	Sample float64
	Seed   uint64
	// RequireContent makes a skeleton-layout generation whose content
	// retention collected (ContentCollected) a failure (CheckRegistry):
	// for a check that promises the tensor bytes are still there.
	RequireContent bool
}

var zeroHex = strings.Repeat("0", 64)

// genState is what the next generation's checks need from the previous one.
type genState struct {
	gen        uint64
	genText    string
	merkleThis string
	sha256All  string
	file       string // plaintext WTXT working copy ("" when encrypted or unreadable)
	size       int64
	encrypted  bool
}

type verifier struct {
	ctx context.Context
	r   *git.Repository
	// plain is the repository as given, without streaming: blobs whose
	// streamed bytes do not match their object ID are read again through
	// it (copyBlob).
	plain *git.Repository
	// gitDir is the repository's directory when it is on disk: segment
	// pieces are then read through git (gitops.GitTreeFS).
	gitDir string
	o      Options
	tmp    string
	// signers is the signing policy (Options.AllowedSigners and
	// TrustedKeys); fileKeys the keys it allows for namespace "file" at
	// the time of the generation being checked.
	signers  *sshsig.AllowedSigners
	fileKeys []ed25519.PublicKey
	now      time.Time
	// ioErr records a failure to write a working copy (an I/O error, not
	// a failed check); Verify returns it.
	ioErr error
	// forks is the live chain walked so far (resume records, resume.go).
	forks *forks
}

// Verify walks the first-parent chain of opts.Branch from its root commit
// (or from opts.Since) to its head and checks every generation with public
// keys only (see the package documentation for the list of checks). A
// returned error means the walk could not be done (no keys, unknown
// branch, an unreadable commit, a temp file that cannot be written);
// failed checks are recorded in the Report, whose OK is false then.
func Verify(ctx context.Context, r *git.Repository, opts Options) (*Report, error) {
	signers, err := sshsig.Unrestricted(opts.TrustedKeys...)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if opts.AllowedSigners != nil {
		signers.Lines = append(slices.Clone(opts.AllowedSigners.Lines), signers.Lines...)
	}
	if len(signers.Lines) == 0 {
		return nil, ErrNoKeys
	}
	if opts.Branch == "" {
		opts.Branch = gitops.DefaultBranch
	}
	if opts.Path == "" {
		opts.Path = gitops.DefaultPath
	}
	if opts.TagPrefix == "" {
		opts.TagPrefix = gitops.DefaultTagPrefix
	}
	if opts.MaxObjectBytes <= 0 {
		opts.MaxObjectBytes = DefaultMaxObjectBytes
	}
	plain := r
	r = streamingRepo(r)
	opts.Path = strings.Trim(path.Clean("/"+opts.Path), "/")
	if opts.Path == "" {
		return nil, fmt.Errorf("%w: path must name a directory below the repository root", ErrBranch)
	}
	head, err := resolveBranch(r, opts.Branch)
	if err != nil {
		return nil, err
	}
	var since plumbing.Hash
	if opts.Since != "" {
		if since, err = resolveCommit(r, opts.Since); err != nil {
			return nil, fmt.Errorf("%w: --since %s: %w", ErrSince, opts.Since, err)
		}
	}
	var chain []*object.Commit
	found := false
	for h := head; ; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Check the commit object's size before decoding it.
		if o, err := r.Storer.EncodedObject(plumbing.CommitObject, h); err == nil && o.Size() > maxObjectHeader {
			return nil, fmt.Errorf("verify: commit %s on branch %s is %d bytes, limit %d", h, opts.Branch, o.Size(), maxObjectHeader)
		}
		c, err := object.GetCommit(r.Storer, h)
		if err != nil {
			return nil, fmt.Errorf("verify: read commit %s on branch %s: %w", h, opts.Branch, err)
		}
		chain = append(chain, c)
		if h == since {
			found = true
			break
		}
		if len(c.ParentHashes) == 0 {
			break
		}
		if _, ok := gitops.BaseOf(c); ok {
			break // the branch started from a base branch here (gitops.TrailerBase)
		}
		h = c.ParentHashes[0]
	}
	if opts.Since != "" && !found {
		return nil, fmt.Errorf("%w: %s (%s) is not on the first-parent chain of branch %s", ErrSince, opts.Since, since, opts.Branch)
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	tmp, err := os.MkdirTemp(opts.TempDir, "snapd-verify-*")
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	defer os.RemoveAll(tmp)
	v := &verifier{ctx: ctx, r: r, plain: plain, gitDir: repoDir(plain), o: opts, tmp: tmp, signers: signers, now: time.Now()}
	rep := &Report{Branch: opts.Branch, Path: opts.Path, Head: head.String(), Since: opts.Since, Gaps: []Gap{}, Generations: []*Generation{}}
	hold := &holder{rep: rep, on: opts.OnGeneration}
	var prev *genState
	for i, c := range chain {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g, st, err := v.commitEntry(c, prev, i == 0 && opts.Since != "")
		if err == nil {
			err = v.ioErr
		}
		if err != nil {
			return nil, err
		}
		if prev != nil && st != nil && st.gen > prev.gen+1 && prev.genText != "" {
			rep.Gaps = append(rep.Gaps, Gap{After: prev.genText, Before: st.genText, Missing: st.gen - prev.gen - 1})
		}
		if prev != nil && prev.file != "" {
			os.Remove(prev.file)
		}
		if st != nil {
			prev = st
		}
		hold.add(g)
	}
	hold.end()
	rep.OK = rep.Failures == 0
	return rep, nil
}

// resolveBranch finds the branch head: refs/heads/B, else
// refs/remotes/origin/B (a CI checkout of another branch), else B as any
// revision.
func resolveBranch(r *git.Repository, b string) (plumbing.Hash, error) {
	for _, n := range []plumbing.ReferenceName{plumbing.NewBranchReferenceName(b), plumbing.NewRemoteReferenceName("origin", b)} {
		if ref, err := r.Reference(n, true); err == nil {
			return ref.Hash(), nil
		}
	}
	h, err := resolveCommit(r, b)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("%w: %s: not found as refs/heads/%s, refs/remotes/origin/%s or a revision: %w", ErrBranch, b, b, b, err)
	}
	return h, nil
}

// resolveCommit resolves a revision, peeling annotated tags.
func resolveCommit(r *git.Repository, rev string) (plumbing.Hash, error) {
	h, err := r.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return plumbing.ZeroHash, err
	}
	for range 10 {
		t, err := object.GetTag(r.Storer, *h)
		if err != nil {
			break
		}
		h = &t.Target
	}
	if _, err := object.GetCommit(r.Storer, *h); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("%s is not a commit: %w", rev, err)
	}
	return *h, nil
}

// gv collects one generation's results.
type gv struct {
	g   *Generation
	dir string // repository path of the generation directory
	// skip: the commit is untrusted; no content is read.
	skip bool
	// optional: generation.txt keys checked only when present.
	optional map[string]bool
	// ociManifest: skeleton layout, the digest of the manifest the
	// registry's gen-NNNNNN tag resolved to ("" when not fetched).
	ociManifest string
}

func (x *gv) fail(file string, line int, check, format string, a ...any) {
	x.g.Failures = append(x.g.Failures, Failure{Commit: x.g.Commit, Gen: x.g.Gen, File: x.fileOf(file), Line: line, Check: check, Message: fmt.Sprintf(format, a...)})
}

// fileOf returns the repository path of file: a bare name is in the
// generation directory.
func (x *gv) fileOf(file string) string {
	if file != "" && !strings.Contains(file, "/") {
		return path.Join(x.dir, file)
	}
	return file
}

func (x *gv) note(format string, a ...any) { x.g.Notes = append(x.g.Notes, fmt.Sprintf(format, a...)) }

// content holds the values of a generation read from its files.
type content struct {
	genText, ts, build                string
	sha256All, merklePrev, merkleThis string
	known                             bool   // values above were read from the WTXT or seal
	source                            string // the file they were read from
}

// materialized is a working copy of a repository file.
type materialized struct {
	path   string
	size   int64
	sha256 string
	head   []byte // first bytes
}

func (v *verifier) generation(c *object.Commit, prev *genState, anchor bool) (*Generation, *genState, error) {
	g := &Generation{Commit: c.Hash.String(), Failures: []Failure{}, Delta: "none", CommitSignature: SigAbsent, TagSignature: SigAbsent, Signature: wtxt.SigAbsent}
	x := &gv{g: g, dir: v.o.Path}
	tr := gitops.ParseTrailers(c.Message)
	g.Gen = tr[gitops.TrailerGen]
	if len(c.ParentHashes) > 1 {
		x.fail("", 0, CheckHistory, "merge commit with %d parents: snapd writes a linear branch (the first parent was followed)", len(c.ParentHashes))
	}
	var missing []string
	keys := gitops.RootTrailers()
	for _, k := range append(keys[:], gitops.TrailerLayout) {
		if tr[k] == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		x.fail("", 0, CheckTrailer, "commit message lacks trailer(s) %s: not a snapd generation commit", strings.Join(missing, ", "))
	}

	// Commit signature over the raw object.
	raw, err := readRaw(v.r.Storer, plumbing.CommitObject, c.Hash)
	if err != nil {
		return nil, nil, fmt.Errorf("verify: read commit %s: %w", c.Hash, err)
	}
	g.CommitSignature, g.Signer = v.objectSignature(x, CheckCommitSig, "commit", raw, splitCommitSignature)
	if g.CommitSignature != SigVerified {
		// Nothing of an untrusted commit is read: its blobs may be
		// arbitrarily large or hostile, and no check of them could make
		// the generation pass.
		x.skip = true
		x.note("content not read: the commit is not signed by a trusted key")
		return v.finish(x, c, tr, prev, anchor, content{}, nil, nil, nil, nil)
	}
	// WTXT, skeleton and seal signatures: the keys allowed for "file" at
	// the commit's time.
	v.fileKeys = v.signers.Ed25519Keys(sshsig.NamespaceFile, c.Committer.When)
	if excluded := v.signers.Excluded(sshsig.NamespaceFile, c.Committer.When); len(excluded) > 0 {
		defer func() {
			if g.Signature != wtxt.SigVerified {
				x.note("allowed_signers does not allow %d key(s) for WTXT signatures (namespace %q) at %s: %s",
					len(excluded), sshsig.NamespaceFile, c.Committer.When.UTC().Format(time.RFC3339), strings.Join(excluded, "; "))
			}
		}()
	}

	// The generation directory.
	root, err := c.Tree()
	if err != nil {
		x.fail("", 0, CheckObject, "tree %s: %v", c.TreeHash, err)
		return g, nil, nil
	}
	dir, err := root.Tree(v.o.Path)
	if err != nil {
		x.fail(v.o.Path, 0, CheckLayout, "no directory %s in the commit's tree: %v", v.o.Path, err)
		return g, nil, nil
	}
	entries := map[string]object.TreeEntry{}
	for _, e := range dir.Entries {
		entries[e.Name] = e
	}

	// The layout (layout.Detect). The skeleton layout: the tensor bytes
	// are in an OCI registry.
	has := layout.TreeHas(dir)
	stored, derr := layout.Detect(has)
	var de *layout.DetectError
	if errors.As(derr, &de) && de.Path == layout.FileSkeleton && errors.Is(derr, layout.ErrAmbiguous) {
		// A skeleton beside a WTXT: reported, then the WTXT is verified.
		x.fail(de.Path, 0, CheckLayout, "%s", de.Msg)
		stored, derr = layout.DetectWithoutSkeleton(has)
	}
	if derr == nil && stored == layout.Skeleton {
		return v.skeletonGeneration(x, c, tr, prev, anchor, dir, entries)
	}

	// The WTXT.
	var wtxtName, lname string
	var wf *materialized
	switch {
	case errors.As(derr, &de) && errors.Is(derr, layout.ErrNoLayout):
		x.fail(de.Path, 0, CheckLayout, "%s in %s", de.Msg, v.o.Path)
	case errors.As(derr, &de):
		x.fail(de.Path, 0, CheckLayout, "%s", de.Msg)
	default:
		wtxtName, wf, lname = v.fetchFile(x, dir, entries, gitops.FileWTXT, stored, "wtxt")
	}
	g.Layout = lname
	if wf == nil {
		return v.finish(x, c, tr, prev, anchor, content{}, nil, entries, dir, nil)
	}
	g.Content = ContentPresent
	g.WTXTBytes = wf.size
	if lname == string(layout.Segments) && v.o.Sample > 0 && v.o.Sample < 1 {
		x.note("segments layout: verified in full (--sample applies to segments held in a registry; these are in the Git clone already)")
	}
	if t := tr[gitops.TrailerLayout]; t != "" && t != lname {
		x.fail("", 0, CheckTrailer, "trailer %s: %s, but the WTXT is stored %s", gitops.TrailerLayout, t, lname)
	}

	// Optional small files.
	wsum, wsumInfo := v.smallFile(x, dir, entries, gitops.FileWSUM, 4096)
	seal, sealInfo := v.smallFile(x, dir, entries, gitops.FileSeal, armor.MaxSealSize)

	var ct content
	st := &genState{size: wf.size}
	if armor.IsArmored(wf.head) {
		g.Encrypted, st.encrypted = true, true
		ct = v.checkSealed(x, wtxtName, wf, seal)
		os.Remove(wf.path)
	} else {
		st.file = wf.path
		ct = v.checkPlain(x, wtxtName, wf, wsum)
		v.checkMeta(x, wtxtName, wf, tr)
		if seal != nil {
			x.note("%s present beside a plaintext WTXT: not used", gitops.FileSeal)
		}
	}
	summaryFiles := map[string]*materialized{"wtxt": wf}
	if wsumInfo != nil {
		summaryFiles["wsum"] = wsumInfo
	}
	if sealInfo != nil {
		summaryFiles["wseal"] = sealInfo
	}
	return v.finish(x, c, tr, prev, anchor, ct, st, entries, dir, summaryFiles)
}

// finish runs the checks that need the content values: trailers, tag,
// chain, delta and generation.txt.
func (v *verifier) finish(x *gv, c *object.Commit, tr map[string]string, prev *genState, anchor bool, ct content, st *genState,
	entries map[string]object.TreeEntry, dir *object.Tree, files map[string]*materialized) (*Generation, *genState, error) {
	g := x.g
	if !ct.known {
		// Fall back to the trailers so one unreadable generation does not
		// also break the next link.
		ct = trailerContent(tr)
		if ct.genText != "" {
			x.note("generation values taken from the commit trailers (the content could not be verified)")
		}
	} else {
		g.Gen = ct.genText
		for i := range g.Failures {
			g.Failures[i].Gen = ct.genText
		}
		vals := ct.vals()
		for i, key := range gitops.RootTrailers() {
			if got, want := tr[key], *vals[i]; got != "" && got != want {
				x.fail("", 0, CheckTrailer, "trailer %s: %s, but the verified content says %s", key, got, want)
			}
		}
	}
	g.TS, g.SHA256All, g.MerklePrev, g.MerkleThis = ct.ts, ct.sha256All, ct.merklePrev, ct.merkleThis
	if st == nil {
		st = &genState{}
	}
	st.genText, st.merkleThis, st.sha256All = ct.genText, ct.merkleThis, ct.sha256All
	gen, err := strconv.ParseUint(ct.genText, 10, 64)
	if err == nil {
		st.gen = gen
	}

	// Tag.
	if ct.genText != "" {
		v.checkTag(x, c, v.tagFor(c, ct.genText))
	}

	// Chain.
	switch {
	case prev == nil && anchor:
		g.Chain = ChainAnchor
		x.note("--since anchor: merkle_prev %s is trusted, not checked", short(ct.merklePrev))
	case prev == nil && ct.merklePrev == zeroHex:
		g.Chain = ChainFirst
	case prev == nil:
		g.Chain = ChainAnchor
		x.note("root commit with a non-zero merkle_prev %s: the chain starts at a generation outside this history", short(ct.merklePrev))
	default:
		if err == nil && gen <= prev.gen {
			x.fail(ct.source, 0, CheckGenOrder, "generation %s does not follow the previous commit's generation %s (must be strictly greater)", ct.genText, prev.genText)
		}
		if err == nil && gen > prev.gen+1 {
			x.note("gap: generations %d..%d are not in the history (the Merkle chain decides whether anything is missing)", prev.gen+1, gen-1)
		}
		if ct.merklePrev != prev.merkleThis {
			g.Chain = ChainBroken
			x.fail(ct.source, 0, CheckChain, "merkle_prev %s is not merkle_this %s of the previous generation %s", ct.merklePrev, prev.merkleThis, prev.genText)
		} else {
			g.Chain = ChainContinues
		}
	}

	// Delta.
	var name string
	var df *materialized
	if !x.skip {
		name, df, _ = v.storedFile(x, dir, entries, gitops.FileDelta, "delta")
	}
	if df != nil {
		defer os.Remove(df.path)
		if files != nil {
			files["wtxtdelta"] = df
		}
		v.checkDelta(x, name, df, prev, st)
	} else if name != "" {
		g.Delta = "failed"
	}

	// generation.txt.
	if files != nil {
		v.checkSummary(x, entries, dir, ct, files)
	}
	if !ct.known && st.file != "" {
		os.Remove(st.file)
		st.file = ""
	}
	return g, st, nil
}

// objectSignature verifies the SSHSIG of a raw commit or tag.
func (v *verifier) objectSignature(x *gv, check, what string, raw []byte, split func([]byte) ([]byte, []byte, error)) (string, string) {
	payload, sig, err := split(raw)
	if errors.Is(err, errUnsigned) {
		x.fail("", 0, check, "the %s is not signed", what)
		return SigAbsent, ""
	}
	if err != nil {
		x.fail("", 0, check, "%s signature: %v", what, err)
		return SigFailed, ""
	}
	header := "committer"
	if check == CheckTagSig {
		header = "tagger"
	}
	fp, err := checkObjectSignature(payload, sig, v.signers, header, v.now)
	if err != nil {
		x.fail("", 0, check, "%s signature: %v", what, err)
		return SigFailed, fp
	}
	return SigVerified, fp
}

func (v *verifier) checkTag(x *gv, c *object.Commit, name string) {
	x.g.Tag = name
	ref, err := v.r.Storer.Reference(plumbing.NewTagReferenceName(name))
	if err != nil {
		x.fail("", 0, CheckTag, "tag %s not found (a clone must fetch tags: git fetch --tags)", name)
		return
	}
	raw, err := readRaw(v.r.Storer, plumbing.TagObject, ref.Hash())
	if err != nil {
		x.fail("", 0, CheckTag, "tag %s (%s) is not an annotated tag object: %v", name, ref.Hash(), err)
		return
	}
	t, err := object.GetTag(v.r.Storer, ref.Hash())
	if err != nil {
		x.fail("", 0, CheckTag, "tag %s: %v", name, err)
		return
	}
	switch {
	case t.TargetType != plumbing.CommitObject || t.Target != c.Hash:
		x.fail("", 0, CheckTag, "tag %s points at %s %s, not at the generation's commit", name, t.TargetType, t.Target)
	case t.Name != name:
		x.fail("", 0, CheckTag, "tag ref %s holds a tag object named %q", name, t.Name)
	case t.Message != c.Message:
		x.fail("", 0, CheckTag, "tag %s message differs from the commit message", name)
	}
	x.g.TagSignature, _ = v.objectSignature(x, CheckTagSig, "tag "+name, raw, splitTagSignature)
}

// ErrBlobID reports a blob whose bytes, as read, do not hash to its
// object ID.
var ErrBlobID = errors.New("content does not match the object ID")

// errOverBudget stops a copy that exceeds Options.MaxObjectBytes.
var errOverBudget = errors.New("over the size budget")

// errMismatch stops ApplyDelta at the first differing byte.
var errMismatch = errors.New("output differs from the committed WTXT")
