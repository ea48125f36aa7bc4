package gitops

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout"
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
	// (FileSkeleton; formats/wtxt Split, gitops/layout/oci).
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

// Limits and defaults of the layouts (gitops/layout owns them), as
// Config takes them.
const (
	DirWTXTSegs         = layout.DirWTXTSegs         // segments layout
	DefaultSegmentSize  = layout.DefaultSegmentSize  // Config.SegmentSize
	DefaultSegmentPiece = layout.DefaultSegmentPiece // Config.SegmentPiece
	MinPartLimit        = layout.MinPartLimit        // Config.PartLimit
	MaxPartLimit        = layout.MaxPartLimit
	DefaultPartLimit    = layout.DefaultPartLimit
)

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
	// ErrChainBreak means merkle_prev differs from the head's merkle_this;
	// it matches wtxt.ErrChain, the one chain check.
	ErrChainBreak = formats.Kind("gitops: merkle chain break", wtxt.ErrChain)
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
	// History, if set, fetches back from the remote what Retain cut from
	// this repository (a GitPusher). A resume from a generation Retain
	// cut uses it to reach that generation's commit (and the tags of the
	// generations it abandons); without it such a resume fails with
	// ErrResume.
	History HistoryFetcher
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
