package gitops

import (
	"fmt"
	"os"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

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
// repository HOST[:PORT]/NAME, the digest of its manifest and, when it is
// not gen-NNNNNN, the manifest's tag (gen-NNNNNN-rK: a number a resumed
// run re-used). Recorded in generation.txt as oci_repository,
// oci_manifest and (when set) oci_tag.
type OCIRef struct {
	Repository string
	Manifest   string
	Tag        string
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

// Commit trailer keys (git trailer syntax, see doc.go).
const (
	TrailerGen        = "Snapd-Gen"
	TrailerTS         = "Snapd-Ts"
	TrailerBuild      = "Snapd-Build"
	TrailerSHA256All  = "Snapd-Sha256-All"
	TrailerMerklePrev = "Snapd-Merkle-Prev"
	TrailerMerkleThis = "Snapd-Merkle-This"
	TrailerLayout     = "Snapd-Layout"
	// A multi-rank generation's (ranks.go): its world size, and one line
	// per generation skipped since the previous commit.
	TrailerWorldSize = "Snapd-World-Size"
	TrailerSkipped   = "Snapd-Skipped"
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
	if len(h.Meta) > 0 {
		b.WriteString(TrailerMeta + ": " + h.Meta.String() + "\n")
	}
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
