package oci

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/jsonerr"
)

// Media and artifact types of the layout (doc.go).
const (
	ArtifactType     = "application/vnd.snapd.wtxt.generation.v1"
	ConfigMediaType  = "application/vnd.snapd.wtxt.segments.v1+json"
	SegmentMediaType = "application/vnd.snapd.wtxt.segment.v1"
	ConfigSchema     = "snapd.wtxt.segments/v1"
)

// Annotation keys of a generation manifest.
const (
	AnnGen        = "snapd.gen"
	AnnTS         = "snapd.ts"
	AnnMerkleThis = "snapd.merkle_this"
	AnnSHA256All  = "snapd.sha256_all"
	AnnKeyID      = "snapd.keyid"
)

// Tag returns the tag of generation gen: gen-NNNNNN.
func Tag(gen string) string { return "gen-" + gen }

// maxReuses bounds the re-use tags tried for one generation number.
const maxReuses = 10000

// ReusedTag returns the tag of generation number gen's k-th re-use by a
// resumed run (k >= 1): gen-NNNNNN-rK, as its Git tag is named; k = 0 is
// Tag(gen). A manifest is pushed under the first of these that is free or
// already names it (Repository.PushManifest), and a tag other than
// Tag(gen) is recorded in the generation's generation.txt (oci_tag).
func ReusedTag(gen string, k int) string {
	if k == 0 {
		return Tag(gen)
	}
	return Tag(gen) + "-r" + strconv.Itoa(k)
}

// IsTagOf reports whether tag is one of generation gen's tags (gen as
// written): Tag(gen) or a re-use tag ReusedTag(gen, k).
func IsTagOf(tag, gen string) bool {
	if tag == Tag(gen) {
		return true
	}
	rest, ok := strings.CutPrefix(tag, Tag(gen)+"-r")
	if !ok {
		return false
	}
	_, ok = ParseTag(tag)
	return ok && rest != ""
}

// ParseTag returns the generation number a generation tag names:
// gen-NNNNNN or gen-NNNNNN-rK (ReusedTag; a rank tag is not one).
func ParseTag(t string) (uint64, bool) {
	g, ok := strings.CutPrefix(t, "gen-")
	if !ok {
		return 0, false
	}
	if i := strings.Index(g, "-r"); i >= 0 {
		k := g[i+2:]
		if k == "" || len(k) > 9 || strings.TrimLeft(k, "0123456789") != "" || k[0] == '0' {
			return 0, false
		}
		g = g[:i]
	}
	if strings.TrimLeft(g, "0123456789") != "" {
		return 0, false
	}
	return GenNumber(g)
}

// Generation is what a manifest records about one WTXT generation.
type Generation struct {
	Gen         string // meta gen as written (DEC6)
	TS          string // meta ts as written
	MerkleThis  string // hex
	SHA256All   string // hex
	KeyID       string // sign line keyid; "" when unsigned
	SegmentSize int64  // the split's target segment size
	Segments    []wtxt.Segment
	// Manifest is the digest ("sha256:<hex>") of the manifest the tag
	// resolved to (Repository.CheckGeneration); "" when not fetched.
	Manifest string
	// Pending: the WTXT is streamed (root_pending) and MerkleThis and
	// SHA256All are its header's zeros; no manifest is built for it
	// (ErrStreamed) until its WSUM completes them (WithWSUM).
	Pending bool
}

// ErrStreamed is returned for a manifest of a streamed WTXT whose WSUM
// was not given: its root values (sha256_all, merkle_this) are in the
// WSUM, and a manifest with the header's zeros would be a lie.
var ErrStreamed = errors.New("streamed WTXT (root_pending) without its WSUM")

// WithWSUM completes a Pending generation with the root values of its
// WSUM w (which the caller has verified against the WTXT): MerkleThis and
// SHA256All become w's.
func (g Generation) WithWSUM(w *wtxt.WSUM) Generation {
	g.MerkleThis = hex.EncodeToString(w.MerkleThis[:])
	g.SHA256All = hex.EncodeToString(w.SHA256All[:])
	g.Pending = false
	return g
}

// GenerationFromHeader fills the header values of a Generation.
func GenerationFromHeader(h *wtxt.Header) Generation {
	return Generation{
		Gen:        h.Gen,
		TS:         h.TS,
		MerkleThis: hex.EncodeToString(h.MerkleThis[:]),
		SHA256All:  hex.EncodeToString(h.SHA256All[:]),
		KeyID:      h.KeyID,
		Pending:    h.Pending,
	}
}

// Config is the config blob's JSON.
type Config struct {
	Schema      string          `json:"schema"`
	Gen         string          `json:"gen"`
	SegmentSize int64           `json:"segment_size"`
	Segments    []ConfigSegment `json:"segments"`
}

// ConfigSegment is one segment in file order.
type ConfigSegment struct {
	Array      string `json:"array"`
	FirstChunk int64  `json:"first_chunk"`
	Chunks     int64  `json:"chunks"`
	Size       int64  `json:"size"`
	Digest     string `json:"digest"`
}

// BuildConfig returns the config blob of g (deterministic JSON).
func BuildConfig(g Generation) ([]byte, error) {
	c := Config{Schema: ConfigSchema, Gen: g.Gen, SegmentSize: g.SegmentSize, Segments: make([]ConfigSegment, 0, len(g.Segments))}
	for _, s := range g.Segments {
		c.Segments = append(c.Segments, ConfigSegment{Array: s.Array, FirstChunk: s.FirstChunk, Chunks: s.Chunks, Size: s.Size, Digest: s.DigestString()})
	}
	return json.Marshal(c)
}

// ParseConfig parses and checks a config blob.
func ParseConfig(b []byte) (*Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("config blob: %w", jsonerr.Describe(err))
	}
	if c.Schema != ConfigSchema {
		return nil, fmt.Errorf("config blob: schema is not %s", ConfigSchema)
	}
	for i, s := range c.Segments {
		if _, err := digest.Parse(s.Digest); err != nil || s.Size < 0 || s.Chunks < 1 {
			return nil, fmt.Errorf("config blob: segment %d: bad digest, size or chunk count", i)
		}
	}
	return &c, nil
}

// Descriptor returns a content descriptor of b.
func Descriptor(mediaType string, b []byte) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(b), Size: int64(len(b))}
}

// SegmentDescriptor returns the descriptor of a segment blob.
func SegmentDescriptor(s wtxt.Segment) ocispec.Descriptor {
	return ocispec.Descriptor{
		MediaType: SegmentMediaType,
		Digest:    digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(s.Digest[:])),
		Size:      s.Size,
	}
}

// BuildManifest returns the manifest of g whose config blob is config.
// Layers are the distinct non-empty segment blobs in first-appearance
// order.
func BuildManifest(g Generation, config []byte) ([]byte, error) {
	if g.Pending {
		return nil, fmt.Errorf("oci manifest %s: %w", Tag(g.Gen), ErrStreamed)
	}
	seen := map[[32]byte]bool{}
	layers := []ocispec.Descriptor{}
	for _, s := range g.Segments {
		if s.Size == 0 || seen[s.Digest] {
			continue
		}
		seen[s.Digest] = true
		d := SegmentDescriptor(s)
		d.Annotations = map[string]string{ocispec.AnnotationTitle: "sha256-" + hex.EncodeToString(s.Digest[:]) + ".seg"}
		layers = append(layers, d)
	}
	ann := map[string]string{
		AnnGen:                    g.Gen,
		AnnTS:                     g.TS,
		AnnMerkleThis:             g.MerkleThis,
		AnnSHA256All:              g.SHA256All,
		ocispec.AnnotationCreated: g.TS,
	}
	if g.KeyID != "" {
		ann[AnnKeyID] = g.KeyID
	}
	m := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactType,
		Config:       Descriptor(ConfigMediaType, config),
		Layers:       layers,
		Annotations:  ann,
	}
	return json.Marshal(m)
}

// GenNumber parses a DEC6 gen for sorting; ok is false when it is not one.
func GenNumber(gen string) (uint64, bool) {
	if len(gen) < 6 {
		return 0, false
	}
	n, err := strconv.ParseUint(gen, 10, 64)
	return n, err == nil
}
