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
	"hash"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/gitops/sshsig"
	"github.com/snapd-ml/snapd/internal/where"
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

// Failure is one failed check, naming where it happened.
type Failure struct {
	Commit  string `json:"commit"`
	Gen     string `json:"gen,omitempty"`
	File    string `json:"file,omitempty"` // path in the repository
	Line    int    `json:"line,omitempty"`
	Check   string `json:"check"`
	Message string `json:"message"`
}

func (f Failure) Error() string {
	var b strings.Builder
	c := f.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	fmt.Fprintf(&b, "commit %s", c)
	if f.Gen != "" {
		fmt.Fprintf(&b, " gen %s", f.Gen)
	}
	if f.File != "" {
		fmt.Fprintf(&b, " %s", f.File)
		if f.Line > 0 {
			fmt.Fprintf(&b, ":%d", f.Line)
		}
	}
	fmt.Fprintf(&b, ": %s: %s", f.Check, f.Message)
	return b.String()
}

// Unwrap returns wtxt.ErrChain for the chain check (the one chain check
// of the project; also a sub-format's, "ranks/chain"), nil otherwise.
func (f Failure) Unwrap() error {
	if f.Check == CheckChain || strings.HasSuffix(f.Check, "/"+CheckChain) {
		return wtxt.ErrChain
	}
	return nil
}

// Where locates the failure (internal/where): the file in the repository
// and its line, the part "commit <hash>", and the check in its namespace:
// "wtxt/<check>" and "seal/<check>" as they are, the ledger's own checks
// (CheckObject, ..., CheckSize, CheckResume, CheckRegistry) as
// "ledger/<check>".
func (f Failure) Where() where.Where {
	w := where.None()
	w.File, w.Line = f.File, f.Line
	if f.Commit != "" {
		w.Part = "commit " + f.Commit
	}
	w.Check = f.Check
	if !strings.Contains(f.Check, "/") {
		w.Check = where.Check(where.Ledger, f.Check)
	}
	return w
}

// Generation is what was established about one commit of the branch.
type Generation struct {
	Commit     string `json:"commit"`
	Gen        string `json:"gen"`
	Tag        string `json:"tag,omitempty"`
	TS         string `json:"ts,omitempty"`
	Layout     string `json:"layout,omitempty"` // single, split, segments or skeleton, as stored
	Encrypted  bool   `json:"encrypted"`
	WTXTBytes  int64  `json:"wtxt_bytes"`
	SHA256All  string `json:"sha256_all,omitempty"`
	MerklePrev string `json:"merkle_prev,omitempty"`
	MerkleThis string `json:"merkle_this,omitempty"`
	// Signature is the WTXT's (or, encrypted, the seal's) Ed25519
	// signature: wtxt.SigVerified, SigAbsent, SigFailed, ...
	Signature string `json:"signature"`
	KeyID     string `json:"keyid,omitempty"`
	// CommitSignature and TagSignature: SigVerified, SigAbsent or SigFailed.
	CommitSignature string `json:"commit_signature"`
	TagSignature    string `json:"tag_signature"`
	Signer          string `json:"signer,omitempty"` // SHA256 fingerprint of the commit's key
	Chain           string `json:"chain"`
	// Delta: "none", "applied", "skipped" (see Notes) or "failed".
	Delta string `json:"delta"`
	// Content says whether the generation's tensor bytes are there:
	// ContentPresent, ContentCollected or ContentMissing ("" when it was
	// not established: an untrusted commit, no registry given, a
	// skeleton that does not parse).
	Content string `json:"content,omitempty"`
	// Skeleton layout: Verification is VerifyFull, VerifySample or, for
	// a collected generation, VerifySkeleton; Segments the skeleton's
	// segment count, SegmentsRead the blobs read (and checked),
	// SampledSegments their indexes in file order when sampled, BlobBytes
	// the raw bytes read from the registry.
	Verification    string    `json:"verification,omitempty"`
	Segments        int       `json:"segments,omitempty"`
	SegmentsRead    int       `json:"segments_read,omitempty"`
	SampledSegments []int     `json:"sampled_segments,omitempty"`
	BlobBytes       int64     `json:"blob_bytes,omitempty"`
	Notes           []string  `json:"notes,omitempty"`
	Failures        []Failure `json:"failures"`
	// Abandoned: a later resume record abandons this generation (the run
	// restarted from an earlier one); it was verified all the same.
	Abandoned bool `json:"abandoned,omitempty"`
	// Resume is set on a resume record's entry (resume.go).
	Resume *ResumeInfo `json:"resume,omitempty"`

	// collected is the registry's answer for a ContentCollected
	// generation and the skeleton's path, for the failure should no later
	// generation's content be present (collected.go).
	collected *collectedInfo
}

// OK reports whether every check of the generation passed.
func (g *Generation) OK() bool { return len(g.Failures) == 0 }

// Gap is a jump in generation numbers between consecutive commits.
type Gap struct {
	After   string `json:"after"`
	Before  string `json:"before"`
	Missing uint64 `json:"missing"`
}

// Report is the outcome of Verify.
type Report struct {
	Branch      string        `json:"branch"`
	Path        string        `json:"path"`
	Head        string        `json:"head"`
	Since       string        `json:"since,omitempty"`
	Generations []*Generation `json:"generations"`
	// Gaps in generation numbers: reported, not failures (see doc.go).
	Gaps     []Gap `json:"gaps"`
	Failures int   `json:"failures"`
	OK       bool  `json:"ok"`
	// ContentPresent and ContentCollected count the generations of each
	// Generation.Content (collected.go).
	ContentPresent   int `json:"content_present"`
	ContentCollected int `json:"content_collected"`
}

// AllFailures returns the failures of every generation, oldest first.
func (r *Report) AllFailures() []Failure {
	var out []Failure
	for _, g := range r.Generations {
		out = append(out, g.Failures...)
	}
	return out
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

// storedFile is fetchFile of a file stored whole or as parts
// (layout.Stored); both forms present is a layout failure.
func (v *verifier) storedFile(x *gv, dir *object.Tree, entries map[string]object.TreeEntry, name, kind string) (string, *materialized, string) {
	stored, err := layout.Stored(func(n string) bool { _, ok := entries[n]; return ok }, name)
	var de *layout.DetectError
	if errors.As(err, &de) {
		x.fail(de.Path, 0, CheckLayout, "%s", de.Msg)
		return de.Path, nil, ""
	}
	return v.fetchFile(x, dir, entries, name, stored, kind)
}

// fetchFile copies name (a blob), name.parts/ (assembled, every part
// checked) or, for the WTXT, current.wtxt.segs/ (the segments layout,
// rebuilt by layout.ReadSegments, every piece and segment checked) to a
// temp file, as stored says (layout.Detect or layout.Stored; "": not
// present). It returns the repository path found ("" when none exists),
// the working copy (nil on failure) and the layout.
func (v *verifier) fetchFile(x *gv, dir *object.Tree, entries map[string]object.TreeEntry, name string, stored layout.Name, kind string) (string, *materialized, string) {
	e, single := entries[name], stored == layout.Single
	pe, split := entries[name+layout.PartsSuffix], stored == layout.Split
	se, segs := entries[layout.DirWTXTSegs], stored == layout.Segments
	if !single && !split && !segs {
		return "", nil, ""
	}
	f, err := os.CreateTemp(v.tmp, kind+"-*")
	if err != nil {
		v.ioErr = err
		return name, nil, ""
	}
	m := &materialized{path: f.Name()}
	var (
		h  hash.Hash
		fw *errWriter
		cw *countWriter
		lw *limitWriter
		bw *bufio.Writer
	)
	// reset (re)starts the working copy: empty file, fresh hash, counters
	// and budget (a blob read again by copyBlob starts over). The segments
	// layout's WTXT is not hashed on the way: its generation.txt records
	// no wtxt_sha256 (checkSummary hashes the copy if an older one does).
	reset := func() error {
		if err := f.Truncate(0); err != nil {
			return err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		fw = &errWriter{w: f}
		cw = &countWriter{w: fw}
		if !segs {
			h = sha256.New()
			cw.w = io.MultiWriter(fw, h)
		}
		lw = &limitWriter{w: cw, left: v.o.MaxObjectBytes}
		bw = bufio.NewWriterSize(lw, 1<<20)
		return nil
	}
	if err := reset(); err != nil {
		f.Close()
		os.Remove(m.path)
		v.ioErr = err
		return name, nil, ""
	}
	var rp, lname string
	var cerr, check = error(nil), CheckObject
	failFile, failLine := "", 0 // a located failure inside a segments directory
	switch {
	case single:
		rp, lname = name, string(layout.Single)
		if e.Mode != filemode.Regular && e.Mode != filemode.Executable {
			cerr, check = fmt.Errorf("mode %s, want a regular file", e.Mode), CheckLayout
		} else if b, err := v.r.BlobObject(e.Hash); err != nil {
			cerr = fmt.Errorf("blob %s: %w", e.Hash, err)
		} else if b.Size > v.o.MaxObjectBytes {
			cerr, check = fmt.Errorf("blob %s is %d bytes, above the budget of %d (not read; raise --max-object-bytes if it is genuine)", e.Hash, b.Size, v.o.MaxObjectBytes), CheckSize
		} else {
			cerr = v.copyBlob(e.Hash, func() (io.Writer, error) {
				if err := reset(); err != nil {
					return nil, err
				}
				return bw, nil
			})
		}
	case split:
		rp, lname = name+layout.PartsSuffix, string(layout.Split)
		check = CheckParts
		if pe.Mode != filemode.Dir {
			cerr, check = fmt.Errorf("%s.parts is not a directory", name), CheckLayout
		} else if t, err := dir.Tree(name + ".parts"); err != nil {
			cerr, check = err, CheckObject
		} else {
			cerr = layout.AssembleFS(gitops.TreeFS(t), ".", bw)
		}
	default:
		rp, lname = layout.DirWTXTSegs, string(layout.Segments)
		check, failFile, failLine, cerr = v.readSegments(x, dir, se, bw)
		if cerr == nil {
			check = CheckParts
		}
	}
	if cerr == nil {
		cerr = bw.Flush()
	}
	if lw.over {
		cerr, check, failFile, failLine = fmt.Errorf("more than the budget of %d bytes (reading stopped; raise --max-object-bytes if it is genuine)", v.o.MaxObjectBytes), CheckSize, "", 0
	}
	werr := f.Close()
	if cerr == nil && werr != nil {
		cerr = werr
	}
	if fw.err != nil || werr != nil {
		os.Remove(m.path)
		v.ioErr = fmt.Errorf("verify: working copy of %s: %w", rp, errors.Join(fw.err, werr))
		return rp, nil, lname
	}
	if cerr != nil {
		os.Remove(m.path)
		if failFile == "" {
			failFile = rp
		}
		x.fail(failFile, failLine, check, "%v", cerr)
		return rp, nil, lname
	}
	m.size = cw.n
	if h != nil {
		m.sha256 = hex.EncodeToString(h.Sum(nil))
	}
	m.head = cw.head
	return rp, m, lname
}

// ErrBlobID reports a blob whose bytes, as read, do not hash to its
// object ID.
var ErrBlobID = errors.New("content does not match the object ID")

// copyBlob copies blob want to the writer out returns (called again to start
// over), checking the Git object ID of the bytes copied. go-git's
// streaming of large objects stored as deltas (LargeObjectThreshold) has
// returned wrong bytes for such a blob (a 2.6 MB skeleton stored as a
// delta in a fetched pack, found by scripts/bench-oci.sh at 1 GiB); a
// mismatch is read again, in memory, through the repository without
// streaming, and fails with ErrBlobID if it still does not match.
func (v *verifier) copyBlob(want plumbing.Hash, out func() (io.Writer, error)) error {
	copyFrom := func(r *git.Repository) error {
		w, err := out()
		if err != nil {
			return err
		}
		bb, err := r.BlobObject(want)
		if err != nil {
			return fmt.Errorf("blob %s: %w", want, err)
		}
		rd, err := bb.Reader()
		if err != nil {
			return fmt.Errorf("blob %s: %w", want, err)
		}
		defer rd.Close()
		id := plumbing.NewHasher(plumbing.BlobObject, bb.Size)
		n, err := io.Copy(io.MultiWriter(w, id), rd)
		if err != nil {
			return err
		}
		if n != bb.Size || id.Sum() != want {
			return fmt.Errorf("blob %s: %d bytes read of %d: %w", want, n, bb.Size, ErrBlobID)
		}
		return nil
	}
	err := copyFrom(v.r)
	if errors.Is(err, ErrBlobID) && v.plain != nil && v.plain != v.r {
		err = copyFrom(v.plain)
	}
	return err
}

// smallFile reads an optional small file (WSUM, seal), at most limit bytes.
func (v *verifier) smallFile(x *gv, dir *object.Tree, entries map[string]object.TreeEntry, name string, limit int64) ([]byte, *materialized) {
	e, ok := entries[name]
	if _, split := entries[name+".parts"]; split {
		x.fail(name+".parts", 0, CheckLayout, "%s is split into parts; a file this small is never split", name)
	}
	if !ok {
		return nil, nil
	}
	b, err := v.r.BlobObject(e.Hash)
	if err != nil {
		x.fail(name, 0, CheckObject, "blob %s: %v", e.Hash, err)
		return nil, nil
	}
	if b.Size > limit {
		x.fail(name, 0, CheckLayout, "%d bytes, limit %d", b.Size, limit)
		return nil, nil
	}
	rd, err := b.Reader()
	if err != nil {
		x.fail(name, 0, CheckObject, "blob %s: %v", e.Hash, err)
		return nil, nil
	}
	defer rd.Close()
	data, err := io.ReadAll(io.LimitReader(rd, limit+1))
	if err != nil {
		x.fail(name, 0, CheckObject, "blob %s: %v", e.Hash, err)
		return nil, nil
	}
	sum := sha256.Sum256(data)
	return data, &materialized{size: int64(len(data)), sha256: hex.EncodeToString(sum[:])}
}

// checkPlain fully verifies a plaintext WTXT.
func (v *verifier) checkPlain(x *gv, name string, wf *materialized, wsum []byte) content {
	f, err := os.Open(wf.path)
	if err != nil {
		x.fail(name, 0, CheckObject, "working copy: %v", err)
		return content{}
	}
	defer f.Close()
	opts := wtxt.VerifyOptions{TrustedKeys: v.fileKeys, RequireSignature: true}
	if wsum != nil {
		if armor.IsArmored(wsum) {
			x.note("%s is age-armored: not used", gitops.FileWSUM)
		} else {
			opts.WSUM = wsum
		}
	}
	rep, err := wtxt.Verify(v.ctx, bufio.NewReaderSize(f, 1<<20), opts)
	var werr *wtxt.Error
	if err != nil && !errors.As(err, &werr) {
		x.fail(name, 0, CheckObject, "read: %v", err)
		return content{}
	}
	if rep == nil {
		x.fail(name, 0, "wtxt", "%v", err)
		return content{}
	}
	x.g.Signature, x.g.KeyID = rep.Signature, rep.KeyID
	for _, e := range rep.Failures {
		file := name
		if e.Check == wtxt.CheckWSUM && e.Line > 0 && e.File != "" {
			file = e.File
		}
		x.fail(file, e.Line, "wtxt/"+string(e.Check), "%s", wtxtMessage(e))
	}
	h := rep.Header
	if h == nil {
		return content{}
	}
	// The declared (signed) values: when a check failed, the computed ones
	// are not the generation's; the failure is already reported.
	ct := rootContent(h.Root, name)
	if h.Pending {
		// Streamed: the root values come from the WSUM.
		ct.sha256All, ct.merklePrev, ct.merkleThis = rep.SHA256All, rep.MerklePrev, rep.MerkleThis
	}
	return ct
}

func wtxtMessage(e *wtxt.Error) string {
	var b strings.Builder
	if e.Array != "" {
		fmt.Fprintf(&b, "array %s: ", e.Array)
	}
	if e.Chunk >= 0 {
		fmt.Fprintf(&b, "chunk %d: ", e.Chunk)
	}
	b.WriteString(e.Msg)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// checkSealed verifies an age-armored WTXT through its seal, without
// decrypting.
func (v *verifier) checkSealed(x *gv, name string, wf *materialized, sealBytes []byte) content {
	x.note("age-armored: verified through %s without decrypting (the plaintext is not checked)", gitops.FileSeal)
	if sealBytes == nil {
		x.fail(gitops.FileSeal, 0, "seal/missing", "%s is age-armored and has no seal sidecar %s: nothing to verify it with public keys", name, gitops.FileSeal)
		x.g.Signature = wtxt.SigFailed
		return content{}
	}
	s, err := armor.ParseSeal(sealBytes)
	if err != nil {
		x.fail(gitops.FileSeal, 0, sealCheck(err), "%v", err)
		x.g.Signature = wtxt.SigFailed
		return content{}
	}
	ct := rootContent(s.Root, gitops.FileSeal)
	if s.Kind != armor.KindWTXT {
		x.fail(gitops.FileSeal, 0, "seal/kind", "kind=%s, want %s (the seal must describe %s)", s.Kind, armor.KindWTXT, name)
	}
	f, err := os.Open(wf.path)
	if err != nil {
		x.fail(name, 0, CheckObject, "working copy: %v", err)
		return ct
	}
	srep, err := s.Check(bufio.NewReaderSize(f, 1<<20), armor.VerifyOptions{Trusted: v.fileKeys, RequireSignature: true})
	f.Close()
	if err != nil {
		file := gitops.FileSeal
		if c := sealCheck(err); c == "seal/bytes" || c == "seal/sha256" || c == "seal/armor" {
			file = name
		}
		x.fail(file, 0, sealCheck(err), "%v", err)
	}
	x.g.Signature, x.g.KeyID = srep.Signature, srep.KeyID
	if srep.Signature == wtxt.SigUnchecked || sealCheck(err) == "seal/armor" {
		x.g.Signature = wtxt.SigFailed // a signature is required here
	}
	return ct
}

func sealCheck(err error) string {
	var se *armor.SealError
	if errors.As(err, &se) {
		return "seal/" + se.Check
	}
	return "seal"
}

// checkDelta applies the generation's delta to the previous generation's
// WTXT and compares the output with this generation's WTXT byte for byte.
func (v *verifier) checkDelta(x *gv, name string, df *materialized, prev, cur *genState) {
	g := x.g
	g.Delta = "skipped"
	switch {
	case armor.IsArmored(df.head):
		x.note("%s is age-armored: not applied (needs decryption)", name)
		return
	case prev == nil && g.Chain == ChainAnchor:
		x.note("%s: its base is outside the verified range: not applied", name)
		return
	case prev == nil:
		x.note("%s in the first generation has no base in this history: not applied", name)
		return
	case prev.encrypted || cur.encrypted:
		x.note("%s: the previous or this generation is age-armored: not applied", name)
		return
	case prev.file == "" || cur.file == "":
		x.note("%s: the previous or this generation's WTXT could not be read: not applied", name)
		return
	}
	g.Delta = "failed"
	base, err := os.Open(prev.file)
	if err != nil {
		x.fail(name, 0, CheckDelta, "base working copy: %v", err)
		return
	}
	defer base.Close()
	want, err := os.Open(cur.file)
	if err != nil {
		x.fail(name, 0, CheckDelta, "working copy: %v", err)
		return
	}
	defer want.Close()
	d, err := os.Open(df.path)
	if err != nil {
		x.fail(name, 0, CheckDelta, "working copy: %v", err)
		return
	}
	defer d.Close()
	cw := &compareWriter{want: bufio.NewReaderSize(want, 1<<20), mismatch: -1}
	info, err := wtxt.ApplyDelta(v.ctx, cw, base, prev.size, bufio.NewReaderSize(d, 1<<20), name)
	wtxtName := path.Join(x.dir, gitops.FileWTXT)
	switch {
	case cw.mismatch >= 0:
		x.fail(name, 0, CheckDelta, "applied to generation %s it differs from %s at byte %d", prev.genText, wtxtName, cw.mismatch)
	case err != nil:
		var we *wtxt.Error
		if errors.As(err, &we) {
			x.fail(name, we.Line, CheckDelta, "applied to generation %s: %s: %s", prev.genText, we.Check, wtxtMessage(we))
		} else {
			x.fail(name, 0, CheckDelta, "applied to generation %s: %v", prev.genText, err)
		}
	case cw.n != cur.size:
		x.fail(name, 0, CheckDelta, "applied to generation %s it gives %d bytes, %s has %d", prev.genText, cw.n, wtxtName, cur.size)
	default:
		g.Delta = "applied"
		x.note("delta applied to generation %s: %d of %d chunks carried, output identical to %s", prev.genText, info.Changed, info.Chunks, gitops.FileWTXT)
	}
}

// checkSummary compares generation.txt with the content and the files.
func (v *verifier) checkSummary(x *gv, entries map[string]object.TreeEntry, dir *object.Tree, ct content, files map[string]*materialized) {
	data, _ := v.smallFile(x, dir, entries, gitops.FileSummary, gitops.MaxSummaryBytes)
	if data == nil {
		if _, ok := entries[gitops.FileSummary]; !ok {
			x.fail(gitops.FileSummary, 0, CheckSummary, "missing")
		}
		return
	}
	kv, err := gitops.ParseSummary(data)
	if err != nil {
		x.fail(gitops.FileSummary, 0, CheckSummary, "%v", err)
		return
	}
	want := map[string]string{"layout": x.g.Layout}
	if ct.known {
		vals := ct.vals()
		for i, f := range (wtxt.Root{}).Fields() {
			want[f.Key] = *vals[i]
		}
	}
	for _, ext := range []string{"wtxt", "wtxtdelta", "wsum", "wseal", "skel"} {
		if m := files[ext]; m != nil {
			want[ext+"_bytes"] = strconv.FormatInt(m.size, 10)
			if m.sha256 == "" && kv[ext+"_sha256"] != "" {
				m.sha256 = v.fileSHA256(m)
			}
			if m.sha256 != "" {
				want[ext+"_sha256"] = m.sha256
			}
		} else if ext != "wtxt" {
			for _, k := range []string{ext + "_bytes", ext + "_sha256"} {
				if _, ok := kv[k]; ok {
					x.fail(gitops.FileSummary, 0, CheckSummary, "%s is set but the generation has no %s file", k, ext)
				}
			}
		}
	}
	v.checkOCISummary(x, kv)
	for _, k := range summaryKeys(want) {
		got, ok := kv[k]
		switch {
		case !ok && x.optional[k]:
		case !ok:
			x.fail(gitops.FileSummary, 0, CheckSummary, "%s missing (want %s)", k, want[k])
		case got != want[k]:
			x.fail(gitops.FileSummary, 0, CheckSummary, "%s=%s, but the generation's files give %s", k, got, want[k])
		}
	}
}

// fileSHA256 hashes a working copy that was not hashed as it was written
// (the segments layout's WTXT, for an older generation.txt that records
// its wtxt_sha256); "" when it cannot be read (an I/O error, reported).
func (v *verifier) fileSHA256(m *materialized) string {
	f, err := os.Open(m.path)
	if err != nil {
		v.ioErr = fmt.Errorf("verify: working copy: %w", err)
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		v.ioErr = fmt.Errorf("verify: working copy: %w", err)
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// summaryKeys returns the keys of m in the summary file's order.
func summaryKeys(m map[string]string) []string {
	order := []string{"gen", "ts", "build", "sha256_all", "merkle_prev", "merkle_this", "layout",
		"wtxt_bytes", "wtxt_sha256", "wtxtdelta_bytes", "wtxtdelta_sha256", "wsum_bytes", "wsum_sha256", "wseal_bytes", "wseal_sha256", "skel_bytes", "skel_sha256"}
	var out []string
	for _, k := range order {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

func short(h string) string {
	if len(h) > 16 {
		return h[:16] + "…"
	}
	return h
}

// countWriter counts bytes and keeps the first 64.
type countWriter struct {
	w    io.Writer
	n    int64
	head []byte
}

func (c *countWriter) Write(p []byte) (int, error) {
	if len(c.head) < 64 {
		c.head = append(c.head, p[:min(len(p), 64-len(c.head))]...)
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// limitWriter passes at most left bytes on and fails (over) beyond.
type limitWriter struct {
	w    io.Writer
	left int64
	over bool
}

// errOverBudget stops a copy that exceeds Options.MaxObjectBytes.
var errOverBudget = errors.New("over the size budget")

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		l.over = true
		return 0, errOverBudget
	}
	l.left -= int64(len(p))
	return l.w.Write(p)
}

// repoDir returns the directory of r's object store ("" when r is not on
// disk).
func repoDir(r *git.Repository) string {
	fst, ok := r.Storer.(*filesystem.Storage)
	if !ok {
		return ""
	}
	if d, ok := fst.Filesystem().(interface{ Root() string }); ok {
		return d.Root()
	}
	return ""
}

// streamingRepo returns r over a filesystem storage that streams objects
// above largeObjectThreshold from their pack or loose file instead of
// decoding them into memory (go-git's default holds a whole blob in a
// MemoryObject while it is read). Other storages are returned as they are.
func streamingRepo(r *git.Repository) *git.Repository {
	fst, ok := r.Storer.(*filesystem.Storage)
	if !ok {
		return r
	}
	st := filesystem.NewStorageWithOptions(fst.Filesystem(), cache.NewObjectLRU(objectCacheSize), filesystem.Options{LargeObjectThreshold: largeObjectThreshold})
	sr, err := git.Open(st, nil)
	if err != nil {
		return r
	}
	return sr
}

// errWriter records the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil && e.err == nil {
		e.err = err
	}
	return n, err
}

// errMismatch stops ApplyDelta at the first differing byte.
var errMismatch = errors.New("output differs from the committed WTXT")

// compareWriter compares what is written with want.
type compareWriter struct {
	want     *bufio.Reader
	n        int64
	mismatch int64
	buf      []byte
}

func (c *compareWriter) Write(p []byte) (int, error) {
	if cap(c.buf) < len(p) {
		c.buf = make([]byte, len(p))
	}
	b := c.buf[:len(p)]
	m, _ := io.ReadFull(c.want, b)
	if m < len(p) || !bytes.Equal(b, p) {
		i := 0
		for i < m && b[i] == p[i] {
			i++
		}
		c.mismatch = c.n + int64(i)
		return 0, errMismatch
	}
	c.n += int64(len(p))
	return len(p), nil
}
