package oci

import (
	"context"
	"io"

	"github.com/opencontainers/go-digest"

	"golang.org/x/sync/errgroup"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// Previous is what a push knows of the previous generation. The zero
// value knows nothing: every segment is read, decoded and checked.
type Previous struct {
	// Segments are the previous generation's segments by key
	// (wtxt.SkeletonKeys of its skeleton, or PushResult.Keys of its push).
	Segments map[wtxt.SegmentKey]wtxt.Segment
	// Manifest, when not "", names a manifest of this repository (a tag
	// such as gen-000041, or a digest): normally the previous
	// generation's. A registry keeps every blob a manifest it serves
	// references (it refuses a manifest whose blobs it lacks, and its
	// garbage collection keeps them), so a previous segment whose digest
	// and size that manifest lists is taken as present without a HEAD:
	// one GET instead of one HEAD per segment. Segments it does not list
	// are asked about one by one, as without it; a manifest that cannot
	// be fetched (gone, too large, not snapd's) only means HEADs for all.
	// Should a blob have been deleted from under its manifest all the
	// same (a blob DELETE), the push's manifest is refused with an error
	// wrapping ErrManifestBlobUnknown and a push without Manifest repairs
	// it.
	Manifest string
	// Cache, for PushSnapshot, takes the chunk sums of segments whose bytes
	// it proves unchanged from the previous skeleton instead of hashing
	// them with SHA-256 (wtxt.SegmentCache: built from that skeleton and
	// the cache file the previous push left; it learns this generation's
	// tags for the next one). PushWTXTAt does not use it.
	Cache *wtxt.SegmentCache
}

// PushWTXTAt is PushWTXT for a WTXT that can be read at offsets (a file):
// the structure comes from wtxt.ReadIndex, and a segment whose chunks'
// ch lines (array, off, len, sha256, crc32c) are those of a segment of
// prev, and whose blob the registry has with that digest and size (HEAD:
// prev's blobs are asked about in parallel while the split runs, which
// waits only for the answer it needs), is neither
// read, decoded nor hashed: its seg line takes prev's digest
// (wtxt.SplitIndexed). Every other segment is read, each chunk's base64
// lines decoded and checked against its sha256 and crc32c, and uploaded
// when the registry lacks it, as PushWTXT does. The skeleton and manifest
// are byte-identical to PushWTXT's for the same WTXT when prev is right;
// prev comes from this repository's previous push (a wrong one can only
// give a skeleton whose blobs fail its ch lines, which assemble and
// verify-repo reject). The result's Keys are this generation's, for the
// next push.
func (r *Repository) PushWTXTAt(ctx context.Context, in io.ReaderAt, size int64, name string, skel io.Writer, segSize int64, prev Previous) (*PushResult, error) {
	gen, st, keys, err := r.UploadSegmentsAt(ctx, in, size, name, skel, segSize, prev)
	if err != nil {
		return nil, err
	}
	res, err := r.finishPush(ctx, gen, st)
	if err != nil {
		return nil, err
	}
	res.Keys = keys
	res.Keys.Manifest = res.Manifest.Digest.String()
	return res, nil
}

// UploadSegmentsAt is PushWTXTAt without the manifest (see UploadSegments).
func (r *Repository) UploadSegmentsAt(ctx context.Context, in io.ReaderAt, size int64, name string, skel io.Writer, segSize int64, prev Previous) (Generation, PushStats, Previous, error) {
	return r.uploadKnown(ctx, name, skel, segSize, prev, func(ctx context.Context, skel io.Writer, sink wtxt.SegmentSink, known wtxt.KnownSegment, opts wtxt.SplitOptions) ([]wtxt.Segment, []wtxt.SegmentKey, error) {
		return wtxt.SplitIndexed(ctx, in, size, skel, sink, known, opts)
	})
}

// PushSnapshot is PushWTXTAt for a snapshot not yet written as WTXT: the
// skeleton and the segments come straight from its arrays
// (wtxt.EncodeSkeleton, with opts as wtxt.Encode takes them), so no
// WTXT text is produced, written or decoded. The skeleton, the blobs and
// the manifest are byte-identical to PushWTXTAt's for the WTXT
// wtxt.Encode(s, opts) writes. Segments prev knows (and the registry
// holds) are not read or hashed again. The WTXT's Result (root values,
// array hashes) comes back beside the push's.
func (r *Repository) PushSnapshot(ctx context.Context, s *snapshot.Snapshot, opts wtxt.EncodeOptions, name string, skel io.Writer, segSize int64, prev Previous) (*PushResult, *wtxt.Result, error) {
	var enc *wtxt.Result
	gen, st, keys, err := r.uploadKnown(ctx, name, skel, segSize, prev, func(ctx context.Context, skel io.Writer, sink wtxt.SegmentSink, known wtxt.KnownSegment, sopts wtxt.SplitOptions) (segs []wtxt.Segment, keys []wtxt.SegmentKey, err error) {
		sopts.Cache = prev.Cache
		enc, segs, keys, err = wtxt.EncodeSkeleton(ctx, skel, s, opts, sopts, known, sink)
		return segs, keys, err
	})
	if err != nil {
		return nil, nil, err
	}
	if prev.Cache != nil {
		st.CacheHits = prev.Cache.Hits()
	}
	res, err := r.finishPush(ctx, gen, st)
	if err != nil {
		return nil, nil, err
	}
	res.Keys = keys
	res.Keys.Manifest = res.Manifest.Digest.String()
	return res, enc, nil
}

// skeletonSplit writes a generation's skeleton to skel and hands every
// segment known does not recognise to sink, in file order (SplitIndexed
// or EncodeSkeleton).
type skeletonSplit func(ctx context.Context, skel io.Writer, sink wtxt.SegmentSink, known wtxt.KnownSegment, opts wtxt.SplitOptions) ([]wtxt.Segment, []wtxt.SegmentKey, error)

// uploadKnown runs split with prev's segments as the known ones (those
// the registry confirms holding) and uploads the others the registry
// lacks.
func (r *Repository) uploadKnown(ctx context.Context, name string, skel io.Writer, segSize int64, prev Previous, split skeletonSplit) (Generation, PushStats, Previous, error) {
	if segSize <= 0 {
		segSize = wtxt.DefaultSegmentSize
	}
	heads := r.headAll(ctx, prev)
	defer heads.wait()
	var reused, reusedBytes int64
	known := func(k wtxt.SegmentKey) ([32]byte, bool) {
		s, ok := prev.Segments[k]
		if !ok || !heads.present(ctx, s.Digest) {
			return [32]byte{}, false
		}
		reused++
		reusedBytes += s.Size
		return s.Digest, true
	}
	head := &headCapture{max: 64 << 10}
	u := r.newUploader(ctx)
	segs, keys, serr := split(u.gctx, io.MultiWriter(skel, head), u.sink, known, wtxt.SplitOptions{SegmentSize: segSize, File: name})
	st, err := u.wait(ctx, serr)
	if err != nil {
		return Generation{}, st, Previous{}, err
	}
	st.Reused = int(reused)
	st.Skipped += int(reused)
	st.SkippedBytes += reusedBytes
	gen, st, err := r.generation(head, name, segSize, segs, st)
	if err != nil {
		return gen, st, Previous{}, err
	}
	next := Previous{Segments: make(map[wtxt.SegmentKey]wtxt.Segment, len(segs))}
	for i, s := range segs {
		next.Segments[keys[i]] = s
	}
	return gen, st, next, nil
}

// blobHeads learns which of the previous generation's blobs the registry
// has while the split runs: from prev.Manifest's layers when it can be
// fetched, by a HEAD for each of the others. The split asks about a blob
// (present) only when it reaches a segment whose key the previous
// generation had, and waits for that one answer.
type blobHeads struct {
	res     map[[32]byte]*headResult
	g       *errgroup.Group
	cancel  context.CancelFunc
	spawned chan struct{}
}

type headResult struct {
	done chan struct{}
	ok   bool // the registry has the blob with the segment's size
}

// headAll starts learning about the distinct non-empty blobs of prev: one
// GET of prev.Manifest, then HEAD requests (Options.Concurrency, at least
// 8, at once) for those it does not list.
func (r *Repository) headAll(ctx context.Context, prev Previous) *blobHeads {
	ctx, cancel := context.WithCancel(ctx)
	h := &blobHeads{res: map[[32]byte]*headResult{}, g: &errgroup.Group{}, cancel: cancel, spawned: make(chan struct{})}
	h.g.SetLimit(max(r.jobs, 8))
	var want []wtxt.Segment
	for _, s := range prev.Segments {
		if s.Size > 0 && h.res[s.Digest] == nil {
			h.res[s.Digest] = &headResult{done: make(chan struct{})}
			want = append(want, s)
		}
	}
	go func() {
		defer close(h.spawned)
		listed := r.manifestLayers(ctx, prev.Manifest, len(want))
		for _, s := range want {
			res := h.res[s.Digest]
			if size, ok := listed[SegmentDescriptor(s).Digest]; ok && size == s.Size {
				res.ok = true
				close(res.done)
				continue
			}
			h.g.Go(func() error {
				defer close(res.done)
				if ctx.Err() != nil {
					return nil
				}
				// A blob the registry lacks, has with another size, or
				// cannot tell about is not reused: the segment is then
				// read, checked and uploaded as any changed one.
				desc, err := r.repo.Blobs().Resolve(ctx, SegmentDescriptor(s).Digest.String())
				res.ok = err == nil && desc.Size == s.Size
				return nil
			})
		}
	}()
	return h
}

// manifestLayers returns the segment layers (digest to size) of the
// manifest ref names, nil when ref is "", there is nothing to ask about
// (want 0) or the manifest cannot be fetched (then every blob is HEADed:
// the reason is logged at debug level).
func (r *Repository) manifestLayers(ctx context.Context, ref string, want int) map[digest.Digest]int64 {
	if ref == "" || want == 0 {
		return nil
	}
	_, m, _, err := r.FetchManifest(ctx, ref)
	if err != nil {
		r.log.Debug("oci push: previous manifest not read, HEADing its blobs", "repository", r.name, "manifest", ref, "err", err)
		return nil
	}
	out := make(map[digest.Digest]int64, len(m.Layers))
	for _, l := range m.Layers {
		if l.MediaType == SegmentMediaType {
			out[l.Digest] = l.Size
		}
	}
	return out
}

// present reports whether the registry has blob d (one of prev's), waiting
// for its HEAD.
func (h *blobHeads) present(ctx context.Context, d [32]byte) bool {
	res := h.res[d]
	if res == nil {
		return false
	}
	select {
	case <-res.done:
		return res.ok
	case <-ctx.Done():
		return false
	}
}

// wait cancels the HEADs not yet answered and waits for every goroutine
// (none outlives the push).
func (h *blobHeads) wait() {
	h.cancel()
	<-h.spawned
	h.g.Wait()
}
