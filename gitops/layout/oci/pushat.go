package oci

import (
	"context"
	"fmt"
	"io"
	"sync"

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
	// such as gen-000041, or a digest): the previous generation's. Then
	// Segments are claims to check, not facts: a previous segment is
	// reused only when that manifest's config lists it at the same place
	// (array, first chunk, chunk count) with the same size and digest and
	// its layers reference that blob with that size (a registry keeps
	// every blob a manifest it serves references): one GET of the
	// manifest and one of its config instead of a HEAD per segment. A
	// segment it does not confirm is read, checked and uploaded like a
	// changed one (PushStats.Unproven counts them); a manifest that
	// cannot be fetched (gone, too large, not snapd's) confirms nothing.
	// Segments that come from a file (--prev-skeleton) must always be
	// given with Manifest. Their ch lines (the keys) are taken as they
	// are: only their seg lines are checked against the registry.
	// Should a blob have been deleted from under its manifest all the
	// same (a blob DELETE), the push's manifest is refused with an error
	// wrapping ErrManifestBlobUnknown and a push without Manifest repairs
	// it.
	//
	// Without Manifest, Segments must come from this process's own
	// previous push (PushResult.Keys, whose digests it computed): a
	// segment is then reused when the registry has its blob with its size
	// (HEAD).
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
// prev, and that the registry confirms (see Previous.Manifest; learnt
// while the split runs, which waits only for the answer it needs), is
// neither read, decoded nor hashed: its seg line takes prev's digest
// (wtxt.SplitIndexed). Every other segment is read, each chunk's base64
// lines decoded and checked against its sha256 and crc32c, and uploaded
// when the registry lacks it, as PushWTXT does. The skeleton and manifest
// are byte-identical to PushWTXT's for the same WTXT; a prev whose seg
// lines disagree with the registry's previous manifest costs only the
// reading of the segments it got wrong. The result's Keys are this
// generation's, for the next push.
//
// A streamed WTXT (root_pending) fails with ErrStreamed before its
// manifest is pushed: use PushStreamedWTXTAt.
func (r *Repository) PushWTXTAt(ctx context.Context, in io.ReaderAt, size int64, name string, skel io.Writer, segSize int64, prev Previous) (*PushResult, error) {
	return r.PushStreamedWTXTAt(ctx, in, size, name, skel, segSize, prev, nil)
}

// PushStreamedWTXTAt is PushWTXTAt for a streamed WTXT (root_pending)
// and its WSUM w, which the caller has verified against the WTXT
// (wtxt.Verify with VerifyOptions.WSUM): the manifest's snapd.sha256_all
// and snapd.merkle_this annotations are w's, the skeleton keeps the
// WTXT's header as written. With w nil it is PushWTXTAt.
func (r *Repository) PushStreamedWTXTAt(ctx context.Context, in io.ReaderAt, size int64, name string, skel io.Writer, segSize int64, prev Previous, w *wtxt.WSUM) (*PushResult, error) {
	gen, st, keys, err := r.UploadSegmentsAt(ctx, in, size, name, skel, segSize, prev)
	if err != nil {
		return nil, err
	}
	switch {
	case gen.Pending && w != nil:
		gen = gen.WithWSUM(w)
	case gen.Pending:
		return nil, fmt.Errorf("%s: %w: its sha256_all and merkle_this are in the WSUM", name, ErrStreamed)
	case w != nil:
		return nil, fmt.Errorf("%s: a WSUM was given for a WTXT that is not streamed (it has a root line)", name)
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
	return r.uploadKnown(ctx, name, skel, segSize, prev, pushOptions{}, func(ctx context.Context, skel io.Writer, sink wtxt.SegmentSink, known wtxt.KnownSegment, opts wtxt.SplitOptions) ([]wtxt.Segment, []wtxt.SegmentKey, error) {
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
	return r.pushSnapshot(ctx, s, opts, name, skel, segSize, prev, pushOptions{})
}

// pushOptions are FilePush's SegmentsFirst, UploadChanged, Progress and
// WholeArray.
type pushOptions struct {
	segmentsFirst, uploadChanged bool
	progress                     func(n int64)
	// wholeArray: FilePush.WholeArray.
	wholeArray int64
	// split, when set, is given the generation as soon as the split is
	// done, while its last segments may still be uploading.
	split func(Generation)
}

// pushSnapshot is PushSnapshot with po.
func (r *Repository) pushSnapshot(ctx context.Context, s *snapshot.Snapshot, opts wtxt.EncodeOptions, name string, skel io.Writer, segSize int64, prev Previous, po pushOptions) (*PushResult, *wtxt.Result, error) {
	var enc *wtxt.Result
	// The config blob and the tag lookup go ahead as soon as the
	// segments are known: the last segments' uploads (the registry
	// hashes and fsyncs each) are then the only wait before the manifest.
	var early *manifestStart
	po.split = func(g Generation) { early = r.startManifest(ctx, g) }
	gen, st, keys, err := r.uploadKnown(ctx, name, skel, segSize, prev, po, func(ctx context.Context, skel io.Writer, sink wtxt.SegmentSink, known wtxt.KnownSegment, sopts wtxt.SplitOptions) (segs []wtxt.Segment, keys []wtxt.SegmentKey, err error) {
		sopts.Cache, sopts.SegmentsFirst, sopts.WholeArray = prev.Cache, po.segmentsFirst, po.wholeArray
		enc, segs, keys, err = wtxt.EncodeSkeleton(ctx, skel, s, opts, sopts, known, sink)
		return segs, keys, err
	})
	if err != nil {
		early.abandon()
		return nil, nil, err
	}
	if prev.Cache != nil {
		st.CacheHits = prev.Cache.Hits()
	}
	if early == nil {
		early = r.startManifest(ctx, gen)
	}
	res, err := r.finishStarted(ctx, gen, early, st)
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
// lacks; with po.uploadChanged and prev.Manifest, those are uploaded
// without a HEAD first (FilePush.UploadChanged); po.progress is told of
// every segment (FilePush.Progress).
func (r *Repository) uploadKnown(ctx context.Context, name string, skel io.Writer, segSize int64, prev Previous, po pushOptions, split skeletonSplit) (Generation, PushStats, Previous, error) {
	if segSize <= 0 {
		segSize = wtxt.DefaultSegmentSize
	}
	heads := r.headAll(ctx, prev)
	defer heads.wait()
	// known runs on the split's goroutines, reuse on the stream sink's:
	// mu guards the counts.
	var mu sync.Mutex
	var reused, reusedBytes, unproven int64
	count := func(s wtxt.Segment, ok bool) bool {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case ok:
			reused++
			reusedBytes += s.Size
		case heads.byManifest && s.Size > 0:
			unproven++
		}
		return ok
	}
	known := func(k wtxt.SegmentKey) ([32]byte, bool) {
		s, ok := prev.Segments[k]
		if !ok {
			return [32]byte{}, false
		}
		if !count(s, heads.present(ctx, s)) {
			return [32]byte{}, false
		}
		if po.progress != nil {
			po.progress(s.Size)
		}
		return s.Digest, true
	}
	// A whole-array segment is reused by place and digest (its key needs
	// its chunk sums, which come after its upload has started).
	byPlace := make(map[segPlace]wtxt.Segment, len(prev.Segments))
	for _, s := range prev.Segments {
		byPlace[segPlace{s.Array, s.FirstChunk, s.Chunks}] = s
	}
	reuse := func(s wtxt.Segment) bool {
		p, ok := byPlace[segPlace{s.Array, s.FirstChunk, s.Chunks}]
		if !ok || p.Digest != s.Digest || p.Size != s.Size {
			return false
		}
		return count(p, heads.present(ctx, p))
	}
	head := &headCapture{max: 64 << 10}
	u := r.newUploader(ctx)
	u.noHead = po.uploadChanged && prev.Manifest != ""
	u.progress = po.progress
	u.reuse = reuse
	segs, keys, serr := split(u.gctx, io.MultiWriter(skel, head), u.sink, known, wtxt.SplitOptions{SegmentSize: segSize, File: name, StreamSink: u.stream})
	var gen Generation
	var gerr error
	if serr == nil {
		// The skeleton's header and every segment are known.
		if gen, _, gerr = r.generation(head, name, segSize, segs, PushStats{}); gerr == nil && po.split != nil {
			po.split(gen)
		}
	}
	st, err := u.wait(ctx, serr)
	if err != nil {
		return Generation{}, st, Previous{}, err
	}
	st.Reused = int(reused)
	st.Unproven = int(unproven)
	if unproven > 0 {
		r.log.Warn("oci push: previous segments the registry's previous manifest does not confirm were read and checked instead (an edited or foreign previous skeleton?)",
			"repository", r.name, "manifest", prev.Manifest, "segments", unproven)
	}
	st.Skipped += int(reused)
	st.SkippedBytes += reusedBytes
	st.Segments = len(segs)
	if gerr != nil {
		return gen, st, Previous{}, gerr
	}
	next := Previous{Segments: make(map[wtxt.SegmentKey]wtxt.Segment, len(segs))}
	for i, s := range segs {
		next.Segments[keys[i]] = s
	}
	return gen, st, next, nil
}

// blobHeads learns which of the previous generation's segments may be
// reused while the split runs. With prev.Manifest, only what that
// manifest proves: its config must list the segment at the same place
// (array, first chunk, chunk count) with the same size and digest, and
// its layers the blob with that size (a registry keeps every blob a
// manifest it serves references). Without prev.Manifest, a HEAD per
// blob (prev then comes from this process's own push). The split asks
// (present) only when it reaches a segment whose key the previous
// generation had, and waits for that one answer.
type blobHeads struct {
	// byManifest: prev.Manifest was given; confirmed is ready once
	// manifestDone is closed (nil: nothing proven).
	byManifest   bool
	manifestDone chan struct{}
	confirmed    map[segPlace]segClaim

	res     map[[32]byte]*headResult
	g       *errgroup.Group
	cancel  context.CancelFunc
	spawned chan struct{}
}

// segPlace is where a segment is: array and chunk range.
type segPlace struct {
	array         string
	first, chunks int64
}

// segClaim is what is stored there.
type segClaim struct {
	size   int64
	digest digest.Digest
}

type headResult struct {
	done chan struct{}
	ok   bool // the registry has the blob with the segment's size
}

// headAll starts learning about prev's segments: one GET of prev.Manifest
// and its config, or (without prev.Manifest) HEAD requests
// (Options.Concurrency, at least 8, at once) for the distinct non-empty
// blobs.
func (r *Repository) headAll(ctx context.Context, prev Previous) *blobHeads {
	ctx, cancel := context.WithCancel(ctx)
	h := &blobHeads{res: map[[32]byte]*headResult{}, g: &errgroup.Group{}, cancel: cancel, spawned: make(chan struct{}),
		byManifest: prev.Manifest != "", manifestDone: make(chan struct{})}
	h.g.SetLimit(max(r.jobs, 8))
	if h.byManifest {
		go func() {
			defer close(h.spawned)
			defer close(h.manifestDone)
			if len(prev.Segments) > 0 {
				h.confirmed = r.previousSegments(ctx, prev.Manifest)
			}
		}()
		return h
	}
	close(h.manifestDone)
	var want []wtxt.Segment
	for _, s := range prev.Segments {
		if s.Size > 0 && h.res[s.Digest] == nil {
			h.res[s.Digest] = &headResult{done: make(chan struct{})}
			want = append(want, s)
		}
	}
	go func() {
		defer close(h.spawned)
		for _, s := range want {
			res := h.res[s.Digest]
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

// previousSegments returns what the manifest ref names proves about the
// previous generation: every segment its config lists whose blob its
// layers reference with the same size, by place. It is nil when the
// manifest or its config cannot be fetched or is not a snapd
// generation's: then nothing is reused (the reason is logged).
func (r *Repository) previousSegments(ctx context.Context, ref string) map[segPlace]segClaim {
	fail := func(err error) map[segPlace]segClaim {
		r.log.Warn("oci push: the previous generation's manifest proves nothing: every segment is read and checked", "repository", r.name, "manifest", ref, "err", err)
		return nil
	}
	_, m, _, err := r.FetchManifest(ctx, ref)
	if err != nil {
		return fail(err)
	}
	if m.ArtifactType != ArtifactType || m.Config.MediaType != ConfigMediaType {
		return fail(fmt.Errorf("not a %s manifest with a %s config", ArtifactType, ConfigMediaType))
	}
	cb, err := r.FetchBlob(ctx, m.Config, maxConfigBytes)
	if err != nil {
		return fail(err)
	}
	cfg, err := ParseConfig(cb)
	if err != nil {
		return fail(err)
	}
	layers := make(map[digest.Digest]int64, len(m.Layers))
	for _, l := range m.Layers {
		if l.MediaType == SegmentMediaType {
			layers[l.Digest] = l.Size
		}
	}
	out := make(map[segPlace]segClaim, len(cfg.Segments))
	for _, c := range cfg.Segments {
		d, err := digest.Parse(c.Digest)
		if err != nil {
			continue
		}
		if size, ok := layers[d]; ok && size == c.Size {
			out[segPlace{c.Array, c.FirstChunk, c.Chunks}] = segClaim{c.Size, d}
		}
	}
	return out
}

// present reports whether prev's segment s may be reused: the previous
// manifest proves it (byManifest), or the registry has its blob with its
// size (HEAD).
func (h *blobHeads) present(ctx context.Context, s wtxt.Segment) bool {
	if h.byManifest {
		select {
		case <-h.manifestDone:
		case <-ctx.Done():
			return false
		}
		c, ok := h.confirmed[segPlace{s.Array, s.FirstChunk, s.Chunks}]
		return ok && c.size == s.Size && c.digest == SegmentDescriptor(s).Digest
	}
	res := h.res[s.Digest]
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

// wait cancels the requests not yet answered and waits for every
// goroutine (none outlives the push).
func (h *blobHeads) wait() {
	h.cancel()
	<-h.spawned
	h.g.Wait()
}
