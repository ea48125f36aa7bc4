package gitops

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/gitops/sshsig"
)

// Layout selects how a generation's WTXT is stored (gitops/layout owns
// the stored layouts and recognises them: layout.Detect).
type Layout = layout.Name

// Layouts (config values).
const (
	LayoutAuto   Layout = "auto"        // above SplitThreshold: segments (an age-armored WTXT: split)
	LayoutSingle        = layout.Single // always one file, whatever its size
	LayoutSplit         = layout.Split  // always a parts directory
	// LayoutSkeleton is recorded (never configured) for a generation whose
	// tensor bytes are in an OCI registry: Git holds its WTXT skeleton
	// (FileSkeleton; formats/wtxt Split, store/oci).
	LayoutSkeleton = layout.Skeleton
	// LayoutSegments stores the WTXT in Git as skeleton pieces (text:
	// every line but the base64 ones) and raw segment blobs (DirWTXTSegs,
	// doc.go), so a clustered change adds only the changed segments.
	LayoutSegments = layout.Segments
)

// ParseLayout parses a config value; "" means LayoutAuto.
func ParseLayout(s string) (Layout, error) {
	switch Layout(s) {
	case "", LayoutAuto:
		return LayoutAuto, nil
	case LayoutSingle, LayoutSplit, LayoutSegments:
		return Layout(s), nil
	}
	return "", fmt.Errorf("gitops: layout %q: want auto, single, split or segments", s)
}

// DeltaPolicy selects when a generation's DELTA is committed beside its
// WTXT.
type DeltaPolicy string

// Delta policies (config values).
const (
	// DeltaAuto (the default) commits the delta only with the single
	// layout: split parts already store exactly the changed chunks, so a
	// delta beside them would store each change twice.
	DeltaAuto   DeltaPolicy = "auto"
	DeltaAlways DeltaPolicy = "always"
	DeltaNever  DeltaPolicy = "never"
)

// ParseDeltaPolicy parses a config value; "" means DeltaAuto.
func ParseDeltaPolicy(s string) (DeltaPolicy, error) {
	switch DeltaPolicy(s) {
	case "", DeltaAuto:
		return DeltaAuto, nil
	case DeltaAlways, DeltaNever:
		return DeltaPolicy(s), nil
	}
	return "", fmt.Errorf("gitops: delta policy %q: want auto, always or never", s)
}

// Defaults for Config.
const (
	DefaultBranch      = "snapshots"
	DefaultPath        = "snapshots"
	DefaultTagPrefix   = "gen-"
	DefaultAuthorName  = "snapd"
	DefaultAuthorEmail = "snapd@localhost"
)

// Stable names inside Config.Path.
const (
	FileWTXT       = layout.FileWTXT     // single layout
	DirWTXTParts   = layout.DirWTXTParts // split layout (MANIFEST + parts)
	FileDelta      = "current.wtxtdelta" // DELTA v2 from the previous generation
	FileWSUM       = "current.wsum"
	FileSeal       = "current.wseal"
	FileSkeleton   = layout.FileSkeleton // skeleton layout (Generation.Skeleton)
	FileSummary    = "generation.txt"
	FileAttributes = ".gitattributes" // at the repository root
	partsSuffix    = layout.PartsSuffix

	// FilePicture is the snapshot/diffsvg picture of the change from the
	// previous generation (Generation.Picture).
	FilePicture = "current.diff.svg"
)

// Gitattributes is the content of the .gitattributes file every commit
// carries: snapshot files are diffed as text and never get CRLF on checkout,
// so a checkout is byte-identical to what was committed. Raw segments and
// their pieces are binary and -delta: git's delta search over them finds
// nothing and, in a pack-objects that reads these attributes (a clone's
// git gc, a server that reads in-tree attributes), costs most of the CPU
// of packing a generation (1 GiB: 31 user-s against 15 without it).
const Gitattributes = `# Written by snapd. WTXT files are LF-only ASCII and signed: keep them byte for byte.
*.wtxt text eol=lf diff
*.wtxtdelta text eol=lf diff
*.wsum text eol=lf diff
*.wseal text eol=lf diff
*.part text eol=lf diff
*.seg -text -diff -delta
**/*.seg/p[0-9]* -text -diff -delta
MANIFEST text eol=lf
generation.txt text eol=lf
`

// Errors returned by Repo.Commit; test with errors.Is.
var (
	// ErrGenOrder means the generation is not newer than the branch head's.
	ErrGenOrder = errors.New("gitops: generation not newer than the branch head")
	// ErrChainBreak means merkle_prev differs from the head's merkle_this.
	ErrChainBreak = errors.New("gitops: merkle chain break")
	// ErrConfig reports an invalid Config field.
	ErrConfig = errors.New("gitops: config")
)

// Config configures a Repo. Zero values take the defaults above.
type Config struct {
	Branch string // branch the generations are committed on
	Path   string // directory (slash-separated, relative) holding the files
	Layout Layout
	// SplitThreshold: with LayoutAuto a WTXT larger than this is stored
	// in the segments layout (an age-armored one, which has no structure
	// to cut into raw segments, split into parts); a delta or sidecar
	// larger than this is split in the auto, split and segments layouts.
	// At most MaxPartLimit; default PartLimit.
	SplitThreshold int64
	// SegmentSize is the skeleton layout's target segment size in raw
	// bytes (default DefaultSegmentSize; a chunk is never cut, and a
	// chunk over MaxPartLimit is refused).
	SegmentSize int64
	// SegmentPiece: in the segments layout a segment larger than this is
	// stored as a tree of raw pieces of this size (doc.go), so a change
	// to a few rows of a chunk stores about those rows. Default
	// DefaultSegmentPiece; negative: one blob per segment.
	SegmentPiece int64
	// PartLimit is the largest part size, in [MinPartLimit, MaxPartLimit].
	// Default DefaultPartLimit.
	PartLimit int64
	// Delta: when Generation.Delta is committed (default DeltaAuto).
	Delta       DeltaPolicy
	TagPrefix   string // tag name = TagPrefix + gen as written, e.g. gen-000123
	AuthorName  string
	AuthorEmail string
	// SigningKey signs commits and tags (SSHSIG, namespace "git"); nil
	// leaves them unsigned.
	SigningKey ed25519.PrivateKey
	// Verify, if set, is called before a generation is committed (e.g. a
	// full WTXT verification); an error aborts the commit.
	Verify func(ctx context.Context, g Generation, h *Header) error
	// Now gives the commit time when meta ts does not parse; default time.Now.
	Now func() time.Time
	// BaseBranch, if set, is the branch the first generation commit starts
	// from (its tip is the parent, its files are kept) instead of an orphan
	// commit, so the generations branch shares history with it; FetchBase,
	// if set, fetches it from the remote first (see base.go).
	BaseBranch string
	FetchBase  func(ctx context.Context, branch string) error
	// MaxPacks: Maintain repacks when the repository holds more packs
	// than this (default DefaultMaxPacks; negative: never).
	MaxPacks int
}

func (c *Config) setDefaults() error {
	if c.Branch == "" {
		c.Branch = DefaultBranch
	}
	if c.MaxPacks == 0 {
		c.MaxPacks = DefaultMaxPacks
	}
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if c.TagPrefix == "" {
		c.TagPrefix = DefaultTagPrefix
	}
	if c.AuthorName == "" {
		c.AuthorName = DefaultAuthorName
	}
	if c.AuthorEmail == "" {
		c.AuthorEmail = DefaultAuthorEmail
	}
	if c.SegmentSize == 0 {
		c.SegmentSize = DefaultSegmentSize
	}
	if c.SegmentPiece == 0 {
		c.SegmentPiece = DefaultSegmentPiece
	}
	if c.SegmentSize < 0 || c.SegmentSize > MaxPartLimit {
		return fmt.Errorf("%w: segment size %d outside [1, %d]", ErrConfig, c.SegmentSize, MaxPartLimit)
	}
	if c.PartLimit == 0 {
		c.PartLimit = DefaultPartLimit
	}
	if c.SplitThreshold == 0 {
		c.SplitThreshold = c.PartLimit
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	var err error
	if c.Layout, err = ParseLayout(string(c.Layout)); err != nil {
		return fmt.Errorf("%w: layout: %v", ErrConfig, err)
	}
	if c.Delta, err = ParseDeltaPolicy(string(c.Delta)); err != nil {
		return fmt.Errorf("%w: delta: %v", ErrConfig, err)
	}
	if err := plumbing.NewBranchReferenceName(c.Branch).Validate(); err != nil {
		return fmt.Errorf("%w: branch %q: %v", ErrConfig, c.Branch, err)
	}
	if c.BaseBranch != "" {
		if err := plumbing.NewBranchReferenceName(c.BaseBranch).Validate(); err != nil || c.BaseBranch == c.Branch {
			return fmt.Errorf("%w: base branch %q: not a valid branch name other than %q", ErrConfig, c.BaseBranch, c.Branch)
		}
	}
	if err := plumbing.NewTagReferenceName(c.TagPrefix + "000001").Validate(); err != nil {
		return fmt.Errorf("%w: tag prefix %q: %v", ErrConfig, c.TagPrefix, err)
	}
	if c.PartLimit < MinPartLimit || c.PartLimit > MaxPartLimit {
		return fmt.Errorf("%w: part limit %d outside [%d, %d]", ErrConfig, c.PartLimit, MinPartLimit, MaxPartLimit)
	}
	if c.SplitThreshold < 0 || c.SplitThreshold > MaxPartLimit {
		return fmt.Errorf("%w: split threshold %d outside [0, %d]", ErrConfig, c.SplitThreshold, MaxPartLimit)
	}
	if c.SigningKey != nil && len(c.SigningKey) != ed25519.PrivateKeySize {
		return fmt.Errorf("%w: signing key: not an Ed25519 private key", ErrConfig)
	}
	if strings.ContainsAny(c.AuthorName+c.AuthorEmail, "<>\n") {
		return fmt.Errorf("%w: author name/email must not contain <, > or newline", ErrConfig)
	}
	p := c.Path
	if path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "\\") {
		return fmt.Errorf("%w: path %q: want a clean relative slash-separated directory", ErrConfig, p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".git" || el == FileAttributes {
			return fmt.Errorf("%w: path %q: element %q not allowed", ErrConfig, p, el)
		}
	}
	return nil
}

// Generation names the files of one generation (paths on disk). WTXT is
// required; the others are optional and are removed from the tree when
// empty, so every file in a commit belongs to that commit's generation.
type Generation struct {
	WTXT  string // the WTXT (possibly age-armored: then Header must be set)
	Delta string // DELTA v2 against the previous generation
	WSUM  string // WSUM (required for a streaming WTXT with root_pending)
	Seal  string // .wseal sidecar
	// Picture is an SVG of the change from the previous generation
	// (snapshot/diffsvg), committed whole as FilePicture. It is not part
	// of the signed content nor of generation.txt.
	Picture string
	// Header overrides the values read from the WTXT (and WSUM).
	Header *Header
	// Skeleton, when set, is the generation's WTXT skeleton (its tensor
	// bytes are in an OCI registry): it is committed as FileSkeleton (split
	// into parts above SplitThreshold unless the layout is single) instead
	// of WTXT as FileWTXT, the layout recorded is LayoutSkeleton, no delta
	// is committed (it would carry the tensor bytes), and Header is
	// required. WTXT is then not read. OCI names the registry side
	// (recorded in generation.txt).
	Skeleton string
	OCI      *OCIRef
	// Resume, when set, declares that the run restarted from an earlier
	// generation (resume.go): the generations above it are first marked
	// abandoned by a signed resume record.
	Resume *Resume
}

// OCIRef names where a skeleton-layout generation's blobs are: the
// repository HOST[:PORT]/NAME and the digest of its manifest (tag
// gen-NNNNNN). Recorded in generation.txt as oci_repository and
// oci_manifest.
type OCIRef struct {
	Repository string
	Manifest   string
}

// Result describes a committed generation.
type Result struct {
	Gen          uint64
	Commit       plumbing.Hash // the generation's commit on Config.Branch
	Tag          string        // tag name, e.g. "gen-000123"
	TagObject    plumbing.Hash // the annotated tag object
	Layout       Layout        // LayoutSingle or LayoutSplit, as stored
	BlobsWritten int           // new blob objects written for this commit
	BytesWritten int64         // their uncompressed size
	Existing     bool          // the generation was already the branch head
}

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
	// checkPacks: every pack Commit writes is checked by git before it
	// is installed (EnvCheckPacks).
	checkPacks bool
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

// Commit trailer keys (git trailer syntax, see doc.go).
const (
	TrailerGen        = "Snapd-Gen"
	TrailerTS         = "Snapd-Ts"
	TrailerBuild      = "Snapd-Build"
	TrailerSHA256All  = "Snapd-Sha256-All"
	TrailerMerklePrev = "Snapd-Merkle-Prev"
	TrailerMerkleThis = "Snapd-Merkle-This"
	TrailerLayout     = "Snapd-Layout"
)

// ParseTrailers returns the "Key: value" lines of a commit or tag
// message's last paragraph.
func ParseTrailers(msg string) map[string]string {
	m := map[string]string{}
	paras := strings.Split(strings.TrimRight(msg, "\n"), "\n\n")
	for _, l := range strings.Split(paras[len(paras)-1], "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok && !strings.ContainsAny(k, " \t") {
			m[k] = v
		}
	}
	return m
}

func message(h *Header, layout Layout) string {
	var b strings.Builder
	b.WriteString("snapd: generation " + h.Root.Gen + "\n\n")
	for i, f := range h.Root.Fields() {
		b.WriteString(rootTrailers[i] + ": " + f.Value + "\n")
	}
	b.WriteString(TrailerLayout + ": " + string(layout) + "\n")
	return b.String()
}

// readHeader returns the generation's header values.
func readHeader(g Generation) (*Header, error) {
	if g.Skeleton != "" && g.Header == nil {
		return nil, fmt.Errorf("%w: a skeleton-layout Generation needs Header", ErrHeader)
	}
	if o := g.OCI; o != nil && (strings.ContainsAny(o.Repository+o.Manifest, "\n\r=") || o.Repository == "" || o.Manifest == "") {
		return nil, fmt.Errorf("%w: Generation.OCI needs a repository and a manifest digest without newlines", ErrHeader)
	}
	if g.Header != nil {
		h := *g.Header
		if h.Root.Gen == "" {
			h.Root.Gen = wtxt.FormatGen(h.Gen)
		}
		if h.Root.SHA256All == ([32]byte{}) || h.Root.MerkleThis == ([32]byte{}) || h.Root.TS == "" || h.Root.Build == "" {
			return nil, fmt.Errorf("%w: Generation.Header needs ts, build and the root hashes", ErrHeader)
		}
		return &h, nil
	}
	f, err := os.Open(g.WTXT)
	if err != nil {
		return nil, fmt.Errorf("gitops: %w", err)
	}
	defer f.Close()
	h, err := ParseHeader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", g.WTXT, err)
	}
	if h.Pending {
		if g.WSUM == "" {
			return nil, fmt.Errorf("%w: %s has root_pending and no WSUM was given", ErrHeader, g.WTXT)
		}
		w, err := os.Open(g.WSUM)
		if err != nil {
			return nil, fmt.Errorf("gitops: %w", err)
		}
		defer w.Close()
		if err := ParseWSUM(w, h); err != nil {
			return nil, fmt.Errorf("%s: %w", g.WSUM, err)
		}
	}
	return h, nil
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
	tagName := r.genTag(h.Root.Gen, head)
	if head != nil && !head.base {
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
	}
	if r.cfg.Verify != nil {
		if err := r.cfg.Verify(ctx, g, h); err != nil {
			return nil, fmt.Errorf("gitops: generation %s: verify: %w", h.Root.Gen, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	// The root .gitattributes (its blob is the base of the pack's literal
	// deltas, packw.go, so it is known before anything is stored).
	var prevRoot *object.Tree
	if head != nil {
		prevRoot = head.tree
	}
	attrText, err := r.attributes(prevRoot)
	if err != nil {
		return nil, err
	}
	b := &builder{st: r.r.Storer, ctx: ctx, objects: objectsDir(r.dir), knownSegs: r.segKeys}
	if b.objects != "" {
		b.pack = newPackWriter(b.objects)
		b.pack.setDeltaBase(plumbing.ComputeHash(plumbing.BlobObject, attrText), attrText)
		if r.checkPacks {
			b.pack.check = indexPackCheck(ctx, r.dir)
		}
		defer b.pack.abort()
	}
	var prevDir *object.Tree
	if head != nil && !head.base {
		if prevDir, err = head.tree.Tree(r.cfg.Path); errors.Is(err, object.ErrDirectoryNotFound) {
			prevDir = nil
		} else if err != nil {
			return nil, fmt.Errorf("gitops: previous tree %s: %w", r.cfg.Path, err)
		}
	}
	dir := newTreeBuilder(prevDir)

	// The WTXT (or its skeleton).
	src, name := g.WTXT, FileWTXT
	if g.Skeleton != "" {
		src, name = g.Skeleton, FileSkeleton
	}
	st, err := os.Stat(src)
	if err != nil {
		return nil, fmt.Errorf("gitops: %w", err)
	}
	stored := LayoutSingle
	big := r.cfg.Layout == LayoutAuto && st.Size() > r.cfg.SplitThreshold
	split := r.cfg.Layout == LayoutSplit || big
	if split {
		stored = LayoutSplit
	}
	var info fileInfo
	switch {
	case g.Skeleton != "":
		stored = LayoutSkeleton
		for _, n := range []string{FileWTXT, DirWTXTParts, DirWTXTSegs} {
			dir.remove(n)
		}
		info, err = b.storeFile(dir, prevDir, name, src, split, r.cfg.PartLimit)
	case (r.cfg.Layout == LayoutSegments || big) && layout.IsPlainWTXTFile(g.WTXT):
		// auto above SplitThreshold: segments (an armored WTXT has no
		// structure to cut into raw segments: split parts, below).
		stored = LayoutSegments
		dir.remove(FileSkeleton)
		dir.remove(FileSkeleton + partsSuffix)
		info, err = b.storeSkeletonFile(dir, prevDir, g.WTXT, r.cfg.SegmentSize, r.cfg.SegmentPiece)
	default:
		if r.cfg.Layout == LayoutSegments {
			stored, split = LayoutSplit, true // an armored WTXT has no structure to split by
		}
		dir.remove(FileSkeleton)
		dir.remove(FileSkeleton + partsSuffix)
		dir.remove(DirWTXTSegs)
		info, err = b.storeFile(dir, prevDir, name, src, split, r.cfg.PartLimit)
	}
	if err != nil {
		return nil, err
	}
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
	summary := sb.String()
	if g.OCI != nil {
		summary += fmt.Sprintf("oci_repository=%s\noci_manifest=%s\n", g.OCI.Repository, g.OCI.Manifest)
	}
	// Optional files.
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
			return nil, fmt.Errorf("gitops: %w", err)
		}
		split := r.cfg.Layout != LayoutSingle && st.Size() > r.cfg.SplitThreshold
		fi, err := b.storeFile(dir, prevDir, o.name, o.src, split, r.cfg.PartLimit)
		if err != nil {
			return nil, err
		}
		key := strings.TrimPrefix(path.Ext(o.name), ".")
		summary += fmt.Sprintf("%s_bytes=%d\n%s_sha256=%s\n", key, fi.size, key, fi.sha256)
	}
	if g.Picture == "" {
		dir.remove(FilePicture)
	} else if _, err := b.storeFile(dir, prevDir, FilePicture, g.Picture, false, r.cfg.PartLimit); err != nil {
		return nil, err
	}
	sum, err := b.blob([]byte(summary))
	if err != nil {
		return nil, err
	}
	dir.set(FileSummary, filemode.Regular, sum)
	dirHash, err := b.writeTree(dir)
	if err != nil {
		return nil, err
	}

	// The root tree: the previous root with .gitattributes and Path replaced.
	attrs, err := b.blob(attrText)
	if err != nil {
		return nil, err
	}
	rootHash, err := b.replacePath(prevRoot, strings.Split(r.cfg.Path, "/"), dirHash, func(t *treeBuilder) {
		t.set(FileAttributes, filemode.Regular, attrs)
	})
	if err != nil {
		return nil, err
	}

	if b.pack != nil {
		// Every new blob and tree is stored before a commit names them.
		added, err := b.pack.finish()
		if err != nil {
			return nil, err
		}
		if s, ok := r.r.Storer.(interface{ Reindex() }); ok && added {
			s.Reindex() // go-git lists packs once
		}
	}
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
	if r.cfg.SigningKey != nil {
		if c.PGPSignature, err = signObject(r.cfg.SigningKey, c.EncodeWithoutSignature); err != nil {
			return nil, err
		}
	}
	commitHash, err := b.encode(c.Encode)
	if err != nil {
		return nil, err
	}
	t := &object.Tag{Name: tagName, Tagger: sig, Message: msg, TargetType: plumbing.CommitObject, Target: commitHash}
	if r.cfg.SigningKey != nil {
		if t.PGPSignature, err = signObject(r.cfg.SigningKey, t.EncodeWithoutSignature); err != nil {
			return nil, err
		}
	}
	tagHash, err := b.encode(t.Encode)
	if err != nil {
		return nil, err
	}
	tagRef := plumbing.NewTagReferenceName(tagName)
	if old, err := r.r.Storer.Reference(tagRef); err == nil && old.Hash() != tagHash {
		return nil, fmt.Errorf("%w: tag %s already exists (%s) for another commit", ErrGenOrder, tagName, old.Hash())
	}
	// Branch first: a crash between the two leaves a head whose tag
	// existing() re-creates.
	newRef := plumbing.NewHashReference(plumbing.NewBranchReferenceName(r.cfg.Branch), commitHash)
	if err := r.r.Storer.CheckAndSetReference(newRef, oldRef); err != nil {
		return nil, fmt.Errorf("gitops: update branch %s: %w", r.cfg.Branch, err)
	}
	if err := r.r.Storer.SetReference(plumbing.NewHashReference(tagRef, tagHash)); err != nil {
		return nil, fmt.Errorf("gitops: set tag %s: %w", tagName, err)
	}
	if stored == LayoutSegments {
		r.segKeys = b.newSegKeys
	} else {
		r.segKeys = nil
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

// Signer signs Git objects with an SSHSIG signature (namespace "git") made
// with an Ed25519 key. It implements go-git's Signer interface, so it can be
// passed as CommitOptions.Signer or CreateTagOptions.Signer; Repo uses the
// same signature format.
type Signer struct {
	Key ed25519.PrivateKey
}

// Sign returns the armored SSHSIG signature of message.
func (s Signer) Sign(message io.Reader) ([]byte, error) {
	return sshsig.Sign(s.Key, sshsig.NamespaceGit, message)
}

var _ git.Signer = Signer{}

// signObject returns the SSHSIG (namespace "git") over the object encoded
// without signature, as git stores it in the gpgsig header / tag body.
func signObject(key ed25519.PrivateKey, encode func(plumbing.EncodedObject) error) (string, error) {
	o := &plumbing.MemoryObject{}
	if err := encode(o); err != nil {
		return "", fmt.Errorf("gitops: encode for signing: %w", err)
	}
	rd, err := o.Reader()
	if err != nil {
		return "", err
	}
	defer rd.Close()
	sig, err := Signer{Key: key}.Sign(rd)
	if err != nil {
		return "", fmt.Errorf("gitops: sign: %w", err)
	}
	return string(sig), nil
}

// builder writes objects, counting new blobs.
type builder struct {
	st  storer.EncodedObjectStorer
	ctx context.Context
	// objects, when set, is the loose objects directory blobs are written
	// to directly (writeLoose) instead of through go-git.
	objects string
	// pack, when set, collects new blobs and trees (packw.go).
	pack  *packWriter
	blobs int
	bytes int64
	// segsReused counts skeleton segments taken from the previous tree.
	segsReused int
	// knownSegs are the previous generation's segment keys (Repo.segKeys);
	// newSegKeys this generation's.
	knownSegs, newSegKeys map[wtxt.SegmentKey][32]byte
}

func (b *builder) encode(enc func(plumbing.EncodedObject) error) (plumbing.Hash, error) {
	o := b.st.NewEncodedObject()
	if err := enc(o); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("gitops: encode object: %w", err)
	}
	h, err := b.st.SetEncodedObject(o)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("gitops: write object: %w", err)
	}
	return h, nil
}

// blob stores data as a blob unless the repository already has it.
func (b *builder) blob(data []byte) (plumbing.Hash, error) { return b.blobAs(data, repr{}) }

// rawBlob is blob for a segment stored as one blob: in a pack it is a
// literal delta against the pack's default base (packw.go), which keeps
// git's delta search off it. (Pieces have their own bases: segment.)
func (b *builder) rawBlob(data []byte) (plumbing.Hash, error) {
	return b.blobAs(data, repr{literal: true})
}

// blobAs is blob, stored in a pack as r says.
func (b *builder) blobAs(data []byte, r repr) (plumbing.Hash, error) {
	h := plumbing.ComputeHash(plumbing.BlobObject, data)
	return h, b.blobHashed(h, data, r)
}

// blobHashed is blobAs for data whose blob ID h the caller computed.
func (b *builder) blobHashed(h plumbing.Hash, data []byte, r repr) error {
	if b.st.HasEncodedObject(h) == nil {
		return nil
	}
	if b.objects != "" {
		if b.pack != nil { // packw.go
			added, err := b.pack.add(plumbing.BlobObject, h, data, r)
			if err != nil {
				return fmt.Errorf("gitops: write blob: %w", err)
			}
			if !added {
				return nil
			}
		} else if err := writeLooseBytes(b.objects, plumbing.BlobObject, data, h); err != nil {
			return fmt.Errorf("gitops: write blob: %w", err)
		}
		b.blobs++
		b.bytes += int64(len(data))
		return nil
	}
	o := b.st.NewEncodedObject()
	o.SetType(plumbing.BlobObject)
	o.SetSize(int64(len(data)))
	w, err := o.Writer()
	if err == nil {
		_, err = w.Write(data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("gitops: blob: %w", err)
	}
	if _, err := b.st.SetEncodedObject(o); err != nil {
		return fmt.Errorf("gitops: write blob: %w", err)
	}
	b.blobs++
	b.bytes += int64(len(data))
	return nil
}

// fileObject streams a file into the object store without holding it.
type fileObject struct {
	path string
	size int64
	hash plumbing.Hash
}

func (o *fileObject) Hash() plumbing.Hash         { return o.hash }
func (o *fileObject) Type() plumbing.ObjectType   { return plumbing.BlobObject }
func (o *fileObject) SetType(plumbing.ObjectType) {}
func (o *fileObject) Size() int64                 { return o.size }
func (o *fileObject) SetSize(int64)               {}
func (o *fileObject) Reader() (io.ReadCloser, error) {
	f, err := os.Open(o.path)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(f, o.size), f}, nil
}
func (o *fileObject) Writer() (io.WriteCloser, error) {
	return nil, errors.New("gitops: file object is read-only")
}

// fileInfo is what generation.txt records of a stored file: its size
// and, except for the segments layout's WTXT, its SHA-256 (hex).
type fileInfo struct {
	size   int64
	sha256 string // "": not recorded
}

// storeFile stores src as name (single) or name.parts/ (split) in dir and
// removes the other form.
func (b *builder) storeFile(dir *treeBuilder, prevDir *object.Tree, name, src string, split bool, limit int64) (fileInfo, error) {
	f, err := os.Open(src)
	if err != nil {
		return fileInfo{}, fmt.Errorf("gitops: %w", err)
	}
	defer f.Close()
	if split {
		dir.remove(name)
		var prevParts *object.Tree
		if prevDir != nil {
			if t, err := prevDir.Tree(name + partsSuffix); err == nil {
				prevParts = t
			}
		}
		st, err := f.Stat()
		if err != nil {
			return fileInfo{}, fmt.Errorf("gitops: %w", err)
		}
		h, m, err := b.storeParts(f, st.Size(), prevParts, limit)
		if err != nil {
			return fileInfo{}, fmt.Errorf("gitops: split %s: %w", src, err)
		}
		dir.set(name+partsSuffix, filemode.Dir, h)
		return fileInfo{size: m.Bytes, sha256: m.SHA256}, nil
	}
	dir.remove(name + partsSuffix)
	if name == FileWTXT {
		dir.remove(DirWTXTSegs)
	}
	st, err := f.Stat()
	if err != nil {
		return fileInfo{}, fmt.Errorf("gitops: %w", err)
	}
	hasher := plumbing.NewHasher(plumbing.BlobObject, st.Size())
	s256 := sha256.New()
	n, err := io.Copy(io.MultiWriter(hasher, s256), formats.ContextReader(b.ctx, f))
	if err != nil {
		return fileInfo{}, fmt.Errorf("gitops: read %s: %w", src, err)
	}
	if n != st.Size() {
		return fileInfo{}, fmt.Errorf("gitops: %s changed size while read (%d, then %d bytes)", src, st.Size(), n)
	}
	obj := &fileObject{path: src, size: n, hash: hasher.Sum()}
	if b.st.HasEncodedObject(obj.hash) != nil && b.objects != "" {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fileInfo{}, fmt.Errorf("gitops: %w", err)
		}
		got, err := writeLoose(b.objects, n, formats.ContextReader(b.ctx, f))
		if err != nil {
			return fileInfo{}, fmt.Errorf("gitops: write blob %s: %w", src, err)
		}
		if got != obj.hash {
			return fileInfo{}, fmt.Errorf("gitops: %s changed while it was committed", src)
		}
		b.blobs++
		b.bytes += n
	} else if b.st.HasEncodedObject(obj.hash) != nil {
		if _, err := b.st.SetEncodedObject(obj); err != nil {
			return fileInfo{}, fmt.Errorf("gitops: write blob %s: %w", src, err)
		}
		// The store names the object by the bytes it read: if the file
		// changed since it was hashed, the expected object is missing.
		if err := b.st.HasEncodedObject(obj.hash); err != nil {
			return fileInfo{}, fmt.Errorf("gitops: %s changed while it was committed", src)
		}
		b.blobs++
		b.bytes += n
	}
	dir.set(name, filemode.Regular, obj.hash)
	return fileInfo{size: n, sha256: hex.EncodeToString(s256.Sum(nil))}, nil
}

// storePart returns the emit function of a parts or skeleton-pieces
// split: a part found in reuse (same name, size and SHA-256 as in the
// previous MANIFEST) points at the previous blob without being written
// again; any other part is written as a new blob. Either way it is entered
// into t under its name.
func (b *builder) storePart(t *treeBuilder, reuse map[Part]plumbing.Hash) func(Part, []byte) error {
	return func(p Part, data []byte) error {
		if h, ok := reuse[p]; ok {
			t.set(p.Name, filemode.Regular, h)
			return nil
		}
		h, err := b.blob(data)
		if err != nil {
			return err
		}
		t.set(p.Name, filemode.Regular, h)
		return nil
	}
}

// storeParts splits r into a parts tree. A part whose name, size and
// SHA-256 equal an entry of the previous MANIFEST reuses the previous blob
// without hashing or writing it again.
func (b *builder) storeParts(r io.ReaderAt, size int64, prev *object.Tree, limit int64) (plumbing.Hash, *Manifest, error) {
	reuse := map[Part]plumbing.Hash{}
	if prev != nil {
		if mf, err := prev.File(ManifestName); err == nil && mf.Size <= MaxManifestSize {
			if data, err := mf.Contents(); err == nil {
				if pm, err := ParseManifest([]byte(data)); err == nil {
					for _, p := range pm.Parts {
						if e, err := prev.FindEntry(p.Name); err == nil && e.Mode == filemode.Regular {
							reuse[p] = e.Hash
						}
					}
				}
			}
		}
	}
	t := newTreeBuilder(nil)
	m, err := Split(b.ctx, r, size, limit, b.storePart(t, reuse))
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	mh, err := b.blob(m.Encode())
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	t.set(ManifestName, filemode.Regular, mh)
	h, err := b.writeTree(t)
	return h, m, err
}

// treeBuilder edits the entries of one tree.
type treeBuilder struct {
	entries map[string]object.TreeEntry
}

func newTreeBuilder(base *object.Tree) *treeBuilder {
	t := &treeBuilder{entries: map[string]object.TreeEntry{}}
	if base != nil {
		for _, e := range base.Entries {
			t.entries[e.Name] = e
		}
	}
	return t
}

func (t *treeBuilder) set(name string, mode filemode.FileMode, h plumbing.Hash) {
	t.entries[name] = object.TreeEntry{Name: name, Mode: mode, Hash: h}
}

func (t *treeBuilder) remove(name string) { delete(t.entries, name) }

// writeTree stores the tree with entries in Git's order (a directory sorts
// as if its name ended in '/').
func (b *builder) writeTree(t *treeBuilder) (plumbing.Hash, error) {
	es := make([]object.TreeEntry, 0, len(t.entries))
	for _, e := range t.entries {
		es = append(es, e)
	}
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(es, func(i, j int) bool { return key(es[i]) < key(es[j]) })
	tree := &object.Tree{Entries: es}
	if b.objects == "" {
		return b.encode(tree.Encode)
	}
	return b.looseObject(tree.Encode) // loose.go: written only when new
}

// replacePath returns the hash of base with the directory at elems replaced
// by sub; edit (if not nil) is applied to the top-level tree.
func (b *builder) replacePath(base *object.Tree, elems []string, sub plumbing.Hash, edit func(*treeBuilder)) (plumbing.Hash, error) {
	t := newTreeBuilder(base)
	if edit != nil {
		edit(t)
	}
	if len(elems) == 1 {
		t.set(elems[0], filemode.Dir, sub)
		return b.writeTree(t)
	}
	var child *object.Tree
	if e, ok := t.entries[elems[0]]; ok && e.Mode == filemode.Dir && base != nil {
		c, err := object.GetTree(b.st, e.Hash)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("gitops: tree %s: %w", elems[0], err)
		}
		child = c
	}
	h, err := b.replacePath(child, elems[1:], sub, nil)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	t.set(elems[0], filemode.Dir, h)
	return b.writeTree(t)
}

// WriteWTXT writes the WTXT stored at revision rev (a tag such as
// "gen-000123", a branch, or a commit hash) to w, assembling it from its
// parts when the generation was stored split (with every size and SHA-256
// in the MANIFEST checked). On error, what was written must be discarded.
// It does not lock the repository against a concurrent Commit: call it
// where nothing commits (snapd checkout).
func (r *Repo) WriteWTXT(rev string, w io.Writer) error {
	dir, err := r.genDir(rev)
	if err != nil {
		return err
	}
	n, err := layout.Detect(layout.TreeHas(dir))
	if err != nil {
		return fmt.Errorf("gitops: %s:%s: %w", rev, r.cfg.Path, err)
	}
	// Blobs stream from their loose files or git cat-file (blobFS): go-git
	// would hold a whole blob (and its delta bases) in memory.
	ctx := context.Background()
	switch n {
	case layout.Single:
		if e, err := dir.FindEntry(FileWTXT); err != nil || !e.Mode.IsFile() {
			return fmt.Errorf("gitops: %s:%s/%s: not a regular file", rev, r.cfg.Path, FileWTXT)
		}
		fsys, done := r.blobFS(ctx, dir)
		defer done()
		return copyBlob(fsys, FileWTXT, w)
	case layout.Segments:
		t, err := dir.Tree(DirWTXTSegs)
		if err != nil {
			return fmt.Errorf("gitops: %s:%s/%s: %w", rev, r.cfg.Path, DirWTXTSegs, err)
		}
		fsys, done := GitTreeFS(ctx, r.dir, t)
		defer done()
		_, err = ReadSegments(ctx, fsys, w)
		return err
	case layout.Split:
		parts, err := dir.Tree(DirWTXTParts)
		if err != nil {
			return fmt.Errorf("gitops: %s:%s/%s: %w", rev, r.cfg.Path, DirWTXTParts, err)
		}
		fsys, done := r.blobFS(ctx, parts)
		defer done()
		return AssembleFS(fsys, ".", w)
	}
	return fmt.Errorf("gitops: %s:%s: the generation is in the %s layout (its tensor bytes are in an OCI registry: WriteSkeleton, then wtxt.Assemble)", rev, r.cfg.Path, n)
}

// blobFS is GitTreeFS over t whose big loose blobs are read from their
// files (openLoose), so neither this process nor git holds a whole one.
func (r *Repo) blobFS(ctx context.Context, t *object.Tree) (fsys fs.FS, done func()) {
	fsys, done = GitTreeFS(ctx, r.dir, t)
	if tf, ok := fsys.(treeFS); ok {
		fsys = looseFS{treeFS: tf, objects: objectsDir(r.dir)}
	}
	return fsys, done
}

// copyBlob copies the file name of fsys to w, with errors naming it.
func copyBlob(fsys fs.FS, name string, w io.Writer) error {
	rd, err := fsys.Open(name)
	if err != nil {
		return fmt.Errorf("gitops: %s: %w", name, err)
	}
	defer rd.Close()
	if _, err := io.Copy(w, rd); err != nil {
		return fmt.Errorf("gitops: %s: %w", name, err)
	}
	return nil
}

// ResolveGen returns the commit (hex) of generation gen: its tag when the
// repository has it (the newest, -rK, when a resumed run re-used the
// number), else the newest commit on the branch whose Snapd-Gen trailer
// names it (first parents from the head, as far as a shallow clone goes;
// a resume record, which reads as the generation it resumed from, is
// passed over).
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
		return "", fmt.Errorf("gitops: generation %s: no tag %s and no branch %s: %w", text, r.TagName(text), r.cfg.Branch, err)
	}
	h := ref.Hash()
	for {
		c, err := r.r.CommitObject(h)
		if err != nil {
			break // the shallow boundary (or a broken history)
		}
		if tr := ParseTrailers(c.Message); tr[TrailerGen] == text && tr[TrailerResumedFrom] == "" {
			return c.Hash.String(), nil
		}
		if len(c.ParentHashes) == 0 {
			break
		}
		h = c.ParentHashes[0]
	}
	return "", fmt.Errorf("gitops: generation %s is not in this repository (no tag %s; not on branch %s as fetched)", text, r.TagName(text), r.cfg.Branch)
}

// TreeFS returns a read-only fs.FS over the blobs of one Git tree, e.g. to
// AssembleFS a split file straight from a commit.
func TreeFS(t *object.Tree) fs.FS { return treeFS{t: t} }

// GitTreeFS is TreeFS whose blob contents come from `git cat-file
// --batch` in the repository at dir (catfile.go: git resolves deltas in
// C and does not re-hash; readers check chunk hashes anyway), or from
// go-git when git cannot be started. done ends the git child.
func GitTreeFS(ctx context.Context, dir string, t *object.Tree) (fsys fs.FS, done func()) {
	cf, err := startCatFile(ctx, dir)
	if err != nil {
		return treeFS{t: t}, func() {}
	}
	return treeFS{t: t, cat: cf}, func() { cf.Close() }
}

// treeFS is a read-only fs.FS over the blobs of one Git tree.
type treeFS struct {
	t *object.Tree
	// cat, when set, reads blob contents (catfile.go); go-git reads them
	// otherwise, and while cat is busy with another blob.
	cat *catFile
}

func (f treeFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if f.cat != nil {
		if e, err := f.t.FindEntry(name); err == nil && e.Mode.IsFile() {
			rc, size, busy, err := f.cat.open(e.Hash)
			if err == nil && !busy {
				return &treeFile{ReadCloser: rc, name: name, size: size}, nil
			}
		}
	}
	file, err := f.t.File(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	rd, err := file.Reader()
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &treeFile{ReadCloser: rd, name: name, size: file.Size}, nil
}

type treeFile struct {
	io.ReadCloser
	name string
	size int64
}

func (f *treeFile) Stat() (fs.FileInfo, error) { return treeFileInfo{f}, nil }

type treeFileInfo struct{ f *treeFile }

func (i treeFileInfo) Name() string       { return path.Base(i.f.name) }
func (i treeFileInfo) Size() int64        { return i.f.size }
func (i treeFileInfo) Mode() fs.FileMode  { return 0o444 }
func (i treeFileInfo) ModTime() time.Time { return time.Time{} }
func (i treeFileInfo) IsDir() bool        { return false }
func (i treeFileInfo) Sys() any           { return nil }
