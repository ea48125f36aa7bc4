package oci

import (
	"context"
	"fmt"
	"io"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// Previous is what a push knows of the previous generation: its segments
// by key (wtxt.SkeletonKeys of its skeleton, or PushResult.Keys of its
// push). nil means nothing: every segment is read, decoded and checked.
type Previous map[wtxt.SegmentKey]wtxt.Segment

// PushWTXTAt is PushWTXT for a WTXT that can be read at offsets (a file):
// the structure comes from wtxt.ReadIndex, and a segment whose chunks'
// ch lines (array, off, len, sha256, crc32c) are those of a segment of
// prev, and whose blob the registry has with that digest and size (HEAD,
// all of prev's blobs at once in parallel before the split), is neither
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
	desc, err := r.PushManifest(ctx, gen)
	if err != nil {
		return nil, err
	}
	st.Manifest, st.Tag = desc, Tag(gen.Gen)
	r.log.Info("oci push", "repository", r.name, "tag", st.Tag, "segments", st.Segments, "reused", st.Reused,
		"uploaded", st.Uploaded, "uploaded_bytes", st.UploadedBytes, "mounted", st.Mounted, "skipped", st.Skipped, "skipped_bytes", st.SkippedBytes)
	return &PushResult{PushStats: st, Generation: gen, Keys: keys}, nil
}

// UploadSegmentsAt is PushWTXTAt without the manifest (see UploadSegments).
func (r *Repository) UploadSegmentsAt(ctx context.Context, in io.ReaderAt, size int64, name string, skel io.Writer, segSize int64, prev Previous) (Generation, PushStats, Previous, error) {
	if segSize <= 0 {
		segSize = wtxt.DefaultSegmentSize
	}
	present, err := r.present(ctx, prev)
	if err != nil {
		return Generation{}, PushStats{}, nil, err
	}
	var reused, reusedBytes int64
	known := func(k wtxt.SegmentKey) ([32]byte, bool) {
		s, ok := prev[k]
		if !ok || !present[s.Digest] {
			return [32]byte{}, false
		}
		reused++
		reusedBytes += s.Size
		return s.Digest, true
	}
	head := &headCapture{max: 64 << 10}
	u := r.newUploader(ctx)
	segs, keys, serr := wtxt.SplitIndexed(u.gctx, in, size, io.MultiWriter(skel, head), u.sink, known, wtxt.SplitOptions{SegmentSize: segSize, File: name})
	st, err := u.wait(ctx, serr)
	if err != nil {
		return Generation{}, st, nil, err
	}
	st.Reused = int(reused)
	st.Skipped += int(reused)
	st.SkippedBytes += reusedBytes
	gen, st, err := r.generation(head, name, segSize, segs, st)
	if err != nil {
		return gen, st, nil, err
	}
	next := make(Previous, len(segs))
	for i, s := range segs {
		next[keys[i]] = s
	}
	return gen, st, next, nil
}

// present HEADs the distinct non-empty blobs of prev in parallel and
// returns those the registry has with the segment's size.
func (r *Repository) present(ctx context.Context, prev Previous) (map[[32]byte]bool, error) {
	want := map[[32]byte]wtxt.Segment{}
	for _, s := range prev {
		if s.Size > 0 {
			want[s.Digest] = s
		}
	}
	out := make(map[[32]byte]bool, len(want))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(r.jobs, 8))
	for d, s := range want {
		g.Go(func() error {
			desc, err := r.repo.Blobs().Resolve(gctx, SegmentDescriptor(s).Digest.String())
			if err != nil {
				if isNotFound(err) {
					return nil
				}
				return fmt.Errorf("oci %s: HEAD blob %s (previous generation's array %s, chunk %d): %w", r.name, SegmentDescriptor(s).Digest, s.Array, s.FirstChunk, err)
			}
			if desc.Size == s.Size {
				mu.Lock()
				out[d] = true
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
