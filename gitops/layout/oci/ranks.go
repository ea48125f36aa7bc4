package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"

	"github.com/snapd-ml/snapd/formats/wtxt"
	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
)

// Registry types and annotation keys of a rank manifest (docs/FORMAT.md
// section 7).
const (
	RankArtifactType  = "application/vnd.snapd.wtxt.rank.v1"
	SkeletonMediaType = "application/vnd.snapd.wtxt.skeleton.v1"
	AnnRank           = "snapd.rank"
	AnnWorldSize      = "snapd.world_size"
	AnnChain          = "snapd.chain"
	AnnSkeleton       = "snapd.skeleton"

	rankTagInfix       = ".rank-"
	rankHeadJobs       = 8 // parallel HEADs of a committer checking a rank's segments
	defaultRankSegment = wtxt.DefaultSegmentSize
)

// ErrRankMissing: the rank manifest's tag does not exist (yet).
var ErrRankMissing = errors.New("rank manifest not in the registry")

// RankTag is the tag of rank r's manifest of generation gen (DEC6).
func RankTag(gen string, r int) string { return "gen-" + gen + rankTagInfix + strconv.Itoa(r) }

// ParseRankTag returns the gen and rank of a rank tag; ok is false for any
// other tag.
func ParseRankTag(tag string) (gen string, rank int, ok bool) {
	rest, ok := strings.CutPrefix(tag, "gen-")
	if !ok {
		return "", 0, false
	}
	gen, rs, ok := strings.Cut(rest, rankTagInfix)
	if !ok {
		return "", 0, false
	}
	if _, ok := wranks.ParseGen(gen); !ok {
		return "", 0, false
	}
	r, err := strconv.Atoi(rs)
	if err != nil || r < 0 || r >= wranks.MaxWorldSize || strconv.Itoa(r) != rs {
		return "", 0, false
	}
	return gen, r, true
}

// RankPushed is what PushRankPart uploaded.
type RankPushed struct {
	Tag      string
	Manifest ocispec.Descriptor
	Part     wranks.Part
	Skeleton []byte
	Stats    PushStats
}

// PushRankPart uploads the rank part read from in (a WTXT written by
// wranks.EncodePart) as rank r of a world of size world: the segments the
// registry lacks, then the config, the skeleton blob and the rank manifest
// tagged gen-NNNNNN.rank-R. The part's gen and chain are checked first.
// The push is idempotent (the same part gives the same manifest); a tag
// that already names a different manifest is not moved (ErrTagTaken:
// two shards claim one rank).
func PushRankPart(ctx context.Context, repo *Repository, in io.Reader, name string, r, world int, chain [32]byte, segSize int64) (*RankPushed, error) {
	var skel bytes.Buffer
	g, st, err := repo.UploadSegments(ctx, in, name, &skel, segSize)
	if err != nil {
		return nil, err
	}
	if segSize <= 0 {
		segSize = defaultRankSegment
	}
	g.SegmentSize = segSize
	h, err := wranks.SkeletonHeader(skel.Bytes(), name)
	if err != nil {
		return nil, err
	}
	p := wranks.PartFromHeader(r, h)
	if err := wranks.CheckPart(name, p, h.Gen, world, chain); err != nil {
		return nil, err
	}
	tag := RankTag(h.Gen, r)
	ref := rankRef(tag, r, world, chain, skel.Bytes())
	desc, err := repo.PushManifestRef(ctx, g, ref, true)
	if err != nil {
		if errors.Is(err, ErrTagTaken) {
			return nil, wranks.Fail(tag, 0, r, wranks.CheckRank, "rank %d of generation %s is already claimed by another shard (%v)", r, h.Gen, err)
		}
		return nil, err
	}
	p.Skeleton = wranks.SkeletonName(r)
	p.SkeletonSHA256 = sha256.Sum256(skel.Bytes())
	p.Manifest = desc.Digest.String()
	st.Manifest, st.Tag = desc, tag
	return &RankPushed{Tag: tag, Manifest: desc, Part: p, Skeleton: skel.Bytes(), Stats: st}, nil
}

func rankRef(tag string, r, world int, chain [32]byte, skel []byte) ManifestRef {
	sd := Descriptor(SkeletonMediaType, skel)
	return ManifestRef{
		Tag:          tag,
		ArtifactType: RankArtifactType,
		Annotations: map[string]string{
			AnnRank:      strconv.Itoa(r),
			AnnWorldSize: strconv.Itoa(world),
			AnnChain:     hex.EncodeToString(chain[:]),
			AnnSkeleton:  sd.Digest.String(),
		},
		Extra: []ExtraBlob{{MediaType: SkeletonMediaType, Title: wranks.SkeletonName(r), Data: skel}},
	}
}

// FetchRankPart reads and checks rank r's manifest of generation gen for a
// world of size world and the job's chain: artifact type, annotations
// (rank, world size, chain, gen), the skeleton blob (digest, size bound)
// and its header, and that the manifest is exactly the one its skeleton
// and config produce (so layers, config and annotations all agree); every
// segment blob must exist (HEAD). A missing tag wraps ErrNotFound;
// every other failure is an *Error naming the tag, the rank and the check.
func FetchRankPart(ctx context.Context, repo *Repository, gen string, r, world int, chain [32]byte) (wranks.Part, []byte, error) {
	tag := RankTag(gen, r)
	desc, m, raw, err := repo.FetchManifest(ctx, tag)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return wranks.Part{}, nil, fmt.Errorf("%w: %w", ErrRankMissing, err)
		}
		return wranks.Part{}, nil, err
	}
	bad := func(check wtxt.Check, format string, a ...any) (wranks.Part, []byte, error) {
		return wranks.Part{}, nil, wranks.Fail(tag, 0, r, check, format, a...)
	}
	if m.ArtifactType != RankArtifactType {
		return bad(wranks.CheckManifest, "artifactType is not %s", RankArtifactType)
	}
	if w := m.Annotations[AnnWorldSize]; w != strconv.Itoa(world) {
		return bad(wranks.CheckWorldSize, "manifest is for world size %.12q, this job has %d", w, world)
	}
	if rr := m.Annotations[AnnRank]; rr != strconv.Itoa(r) {
		return bad(wranks.CheckRank, "manifest under this tag says rank %.12q", rr)
	}
	if m.Annotations[AnnChain] != hex.EncodeToString(chain[:]) {
		return bad(wranks.CheckChain, "manifest is of another chain (snapd.chain is not this job's chain id)")
	}
	if m.Annotations[AnnGen] != gen {
		return bad(wranks.CheckGen, "manifest is of another generation (snapd.gen %.24q)", m.Annotations[AnnGen])
	}
	if len(m.Layers) == 0 || m.Layers[len(m.Layers)-1].MediaType != SkeletonMediaType {
		return bad(wranks.CheckManifest, "last layer is not a %s", SkeletonMediaType)
	}
	sl := m.Layers[len(m.Layers)-1]
	if sl.Digest.String() != m.Annotations[AnnSkeleton] {
		return bad(wranks.CheckManifest, "skeleton layer is not the snapd.skeleton annotation's digest")
	}
	skel, err := repo.FetchBlob(ctx, sl, wranks.MaxSkeletonBytes)
	if errors.Is(err, ErrNotFound) {
		return bad(wranks.CheckManifest, "skeleton blob %s is missing", sl.Digest)
	}
	if err != nil {
		return wranks.Part{}, nil, fmt.Errorf("%s: rank %d: skeleton: %w", tag, r, err)
	}
	h, err := wranks.SkeletonHeader(skel, tag+" skeleton")
	if err != nil {
		return wranks.Part{}, nil, err
	}
	p := wranks.PartFromHeader(r, h)
	if err := wranks.CheckPart(tag, p, gen, world, chain); err != nil {
		return wranks.Part{}, nil, err
	}
	segs, err := wtxt.SkeletonSegments(ctx, bytes.NewReader(skel), tag+" skeleton")
	if err != nil {
		return wranks.Part{}, nil, err
	}
	if m.Config.MediaType != ConfigMediaType {
		return bad(wranks.CheckManifest, "config is not a %s", ConfigMediaType)
	}
	cb, err := repo.FetchBlob(ctx, m.Config, 64<<20)
	if errors.Is(err, ErrNotFound) {
		return bad(wranks.CheckManifest, "config blob %s is missing", m.Config.Digest)
	}
	if err != nil {
		return wranks.Part{}, nil, fmt.Errorf("%s: rank %d: config: %w", tag, r, err)
	}
	cfg, err := ParseConfig(cb)
	if err != nil {
		return wranks.Part{}, nil, fmt.Errorf("%s: rank %d: %w", tag, r, err)
	}
	g := GenerationFromHeader(h)
	g.SegmentSize, g.Segments = cfg.SegmentSize, segs
	want, err := BuildManifestRef(g, mustRankConfig(g), rankRef(tag, r, world, chain, skel))
	if err != nil {
		return wranks.Part{}, nil, err
	}
	if !bytes.Equal(want, raw) {
		return bad(wranks.CheckManifest, "manifest is not the one its skeleton and config make (layers, config or annotations disagree with the skeleton)")
	}
	// Every segment blob must exist: HEADs, at most rankHeadJobs at once (the
	// sequential round trips would dominate the commit latency of a big
	// model on a distant registry).
	seen := map[[32]byte]bool{}
	eg, gctx := errgroup.WithContext(ctx)
	eg.SetLimit(rankHeadJobs)
	var missing atomic.Pointer[wtxt.Segment]
	for _, s := range segs {
		if s.Size == 0 || seen[s.Digest] {
			continue
		}
		seen[s.Digest] = true
		eg.Go(func() error {
			ok, err := repo.Exists(gctx, SegmentDescriptor(s))
			if err != nil {
				return fmt.Errorf("%s: rank %d: %w", tag, r, err)
			}
			if !ok {
				missing.CompareAndSwap(nil, &s)
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return wranks.Part{}, nil, err
	}
	if s := missing.Load(); s != nil {
		return bad(wranks.CheckManifest, "references missing blob %s (array %s, chunk %d)", s.DigestString(), s.Array, s.FirstChunk)
	}
	p.Skeleton = wranks.SkeletonName(r)
	p.SkeletonSHA256 = sha256.Sum256(skel)
	p.Manifest = desc.Digest.String()
	return p, skel, nil
}

func mustRankConfig(g Generation) []byte {
	b, _ := BuildConfig(g) // json.Marshal of plain strings and ints cannot fail
	return b
}
