package pipeline

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/chunkdiff"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/internal/safeopen"
	"github.com/snapd-ml/snapd/pipeline/ring"
)

// The registry layout's direct path. With an OCIPublisher, a generation
// above its threshold is encoded straight to the skeleton and the segments
// (oci.Repository.PushSnapshotFile, as `snapd oci push CHECKPOINT` does:
// no base64, no WTXT written, read back and split), its new segments
// uploaded to the registry and its manifest pushed during the build; the
// ring keeps the skeleton (ExtSkeleton) and the record of the manifest
// (ExtOCI) instead of a WTXT, and the resend queue's job only commits the
// skeleton and pushes the commit. Unchanged segments are recognised by
// the segment cache (OCISegmentCacheFile, keyed from the HMAC or signing
// key) against the previous ring skeleton, so their chunks are not hashed
// again, and by the previous manifest, so they are not uploaded again.
//
// Order and durability: the skeleton is written (atomically) only once
// the manifest is in the registry, the record after it, then the request
// record and the chain state, as for a WTXT; a crash before the chain
// state leaves a half-written entry that the next start removes, and the
// redelivered request pushes the same manifest again (the registry
// already holds its blobs). When the registry cannot take the push (down,
// refusing, stalled), or an earlier generation still waits in the queue
// for it, the generation is built the usual way (ring WTXT, uploaded by
// the queue job, which retries), so an outage loses nothing and keeps the
// order.
//
// While updates are dense (OCIPublisher.wholeArray), each array of up to
// wholeArrayMax bytes is one segment, streamed from the snapshot with the
// array's sha256 as its digest (oci.FilePush.WholeArray), and whether
// updates are dense is judged chunk by chunk against the previous ring
// skeleton (wtxt.PrevSkeleton.ChangedChunks), whatever the cut.
//
// What the direct path leaves out: a DELTA and a diff picture (the
// skeleton layout commits neither), the segment cache while dense updates
// leave it idle (OCIPublisher.useSegmentCache), a HEAD before uploading a
// segment the previous manifest does not confirm (oci.FilePush.
// UploadChanged), and the element-by-element NaN/Inf
// comparison of arrays holding NaN/Inf in both generations (there is no
// local copy of the previous generation's tensor bytes): such an array is
// reported when its counts grew (nonFiniteDirect).

// OCISegmentCacheFile (in the state directory) is the direct path's
// segment cache (wtxt.SegmentCache), rewritten after every push.
const OCISegmentCacheFile = "oci-segments.cache"

// ociRecordMax bounds an ExtOCI record read back.
const ociRecordMax = 1 << 20

// ociRecord is a ring generation's ExtOCI file, written once its manifest
// is in the registry: with its skeleton it stands in the ring for the
// generation's WTXT.
type ociRecord struct {
	Repository string `json:"repository"`
	Manifest   string `json:"manifest"`
	// Tag: the manifest's tag when it is not gen-NNNNNN (ociState.Tag).
	Tag string `json:"tag,omitempty"`
	// Header holds the values the ledger records (root, metadata).
	Header *gitops.Header `json:"header"`
	// WTXTBytes is the size of the WTXT the skeleton and segments stand
	// for; SegmentSize the size they were cut at. (The upload's byte
	// counts are OCIStatsFile's.)
	WTXTBytes   int64 `json:"wtxt_bytes"`
	SegmentSize int64 `json:"segment_size"`
}

// ref returns where the generation's blobs are.
func (r *ociRecord) ref() *gitops.OCIRef {
	return &gitops.OCIRef{Repository: r.Repository, Manifest: r.Manifest, Tag: r.Tag}
}

// readOCIRecord reads the ExtOCI record at path (bounded, no symlink
// followed); an incomplete record is an error naming the file.
func readOCIRecord(path string) (*ociRecord, error) {
	b, err := safeopen.ReadFile(path, ociRecordMax, safeopen.NoFollow)
	if err != nil {
		return nil, err
	}
	var r ociRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Header == nil || r.Repository == "" || r.Manifest == "" {
		return nil, fmt.Errorf("%s: the record names no header, repository or manifest", path)
	}
	return &r, nil
}

// ringOCIRecord returns generation gen's ExtOCI record in the ring in
// ringDir, nil when it has none (a WTXT generation) or it cannot be read.
func ringOCIRecord(ringDir string, gen uint64) *ociRecord {
	r, err := readOCIRecord(ringPath(ringDir, gen, ring.ExtOCI))
	if err != nil {
		return nil
	}
	return r
}

// directOCI returns the OCI publisher when generations may take the direct
// path: the daemon publishes through an OCIPublisher, in plaintext and not
// streamed (the skeleton layout supports neither).
func (d *Daemon) directOCI(cfg *Config) *OCIPublisher {
	p, ok := d.deps.Publisher.(*OCIPublisher)
	if !ok || len(cfg.Recipients) > 0 || cfg.Stream {
		return nil
	}
	return p
}

// buildDirect builds generation it.rec.Gen on the direct path and
// persists the new chain head (see buildOnce). ok is false, with err nil,
// when the generation takes the usual path instead: at or below the
// publisher's threshold, earlier generations waiting for the registry in
// the queue, or a push the registry did not take (logged; the usual path
// then encodes again and the queue job uploads, retrying). Any failure
// leaves no file visible under a final name except complete ones of this
// generation, which the caller removes.
func (d *Daemon) buildDirect(ctx context.Context, it *item, head *ChainState, rs *ResumeState, fp string, cfg *Config, opts wtxt.EncodeOptions, p *OCIPublisher) (next *ChainState, ok bool, err error) {
	gen := it.rec.Gen
	size, err := wtxt.EncodedSize(it.snap, opts)
	if err != nil || size <= p.cfg.Threshold {
		return nil, false, nil // the usual encode reports a bad snapshot
	}
	if q := d.deps.Queue; q != nil {
		if st, err := q.Status(); err != nil || st.PublishPendingBytes > 0 {
			d.log.Info("earlier generations wait for the registry: this one is uploaded by the resend queue after them", "gen", gen)
			return nil, false, nil
		}
	}
	t := d.now()
	it.stageStart("encode")
	skel := ringPath(d.ringDir, gen, ring.ExtSkeleton)
	prevSkel := p.lastSkeleton(head)
	if prevSkel == nil {
		prevSkel = ringPrevSkeleton(ctx, d.ringDir, head.Gen)
	}
	prev := p.previous()
	if len(prev.Segments) == 0 && prevSkel != nil {
		// The first push since a start: the head's ring skeleton, its
		// segments claims that the head's manifest must confirm.
		if rec := ringOCIRecord(d.ringDir, head.Gen); rec != nil && rec.Repository == p.reg.Name() {
			prev = oci.Previous{Segments: prevSkel.Keys(), Manifest: rec.Manifest}
			p.resumeSegments(rec.SegmentSize)
		}
	}
	// Segments first: the registry stores (and hashes) what it receives
	// on the other cores while the header is hashed here.
	// Changed segments are uploaded without a HEAD first (a training run
	// rarely changes a segment back to older bytes).
	push := oci.FilePush{Skeleton: skel, SegmentSize: p.segmentSize(), Previous: prev, Logger: d.log, SegmentsFirst: true, UploadChanged: true,
		WholeArray: p.wholeArray()}
	if it.meter != nil {
		// The progress line counts the tensors' raw bytes here (no WTXT
		// is written).
		it.meter.SetTotal(rawBytes(it.snap))
		push.Progress = it.meter.Add
	}
	cache := (len(opts.HMACKey) > 0 || opts.SignKey != nil) && p.useSegmentCache(gen)
	if cache {
		push.SegmentCache = filepath.Join(cfg.StateDir, OCISegmentCacheFile)
		push.PrevSkeleton = prevSkel
	}
	res, enc, segSize, err := p.reg.PushSnapshotFile(ctx, it.snap, opts, push)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		if errors.Is(err, oci.ErrManifestBlobUnknown) {
			p.forgetPrevious()
		}
		d.log.Warn("registry push from the build failed: the generation is written to the ring and uploaded by the resend queue", "gen", gen, "error", err)
		return nil, false, nil
	}
	// This generation's skeleton, parsed once: for the chunk count here
	// and as the next build's previous skeleton.
	var change *chunkChange
	cur := ringPrevSkeleton(ctx, d.ringDir, gen)
	if prevSkel != nil && cur != nil {
		c, t := prevSkel.ChangedChunks(cur)
		change = &chunkChange{changed: c, total: t}
	}
	p.keepSkeleton(cur)
	p.pushed(gen, res, segSize, change)
	if cache && prevSkel != nil {
		p.cacheUsed(res)
	}
	it.stage1("encode", d.now().Sub(t))

	t = d.now()
	h := &gitops.Header{Gen: gen, Root: enc.Root, Meta: it.rec.Meta}
	rec := ociRecord{Repository: p.reg.Name(), Manifest: res.Manifest.Digest.String(), Tag: reusedTag(enc.Root.Gen, res.Tag), Header: h, WTXTBytes: enc.Written, SegmentSize: segSize}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, false, permanent{err}
	}
	if err := d.ring.Put(ringPath(d.ringDir, gen, ring.ExtOCI), append(b, '\n'), 0o644); err != nil {
		return nil, false, err
	}
	d.nonFiniteDirect(it, head, enc)
	next, from, err := d.persistHead(it, head, rs, fp, cfg, enc)
	if err != nil {
		return nil, false, err
	}
	it.stage1("state", d.now().Sub(t))
	it.res.WTXT, it.res.WTXTBytes = "", enc.Written
	it.res.Skeleton, it.res.OCI = skel, rec.ref()
	it.res.BaseGen = head.Gen
	it.res.ResumedFrom = from
	it.res.SHA256All, it.res.MerklePrev, it.res.MerkleThis = next.SHA256All, next.MerklePrev, next.MerkleThis
	return next, true, nil
}

// lastSkeleton returns the skeleton the last direct push of this process
// wrote, parsed, when it is head's (its merkle_this, which covers the
// generation number); nil otherwise.
func (p *OCIPublisher) lastSkeleton(head *ChainState) *wtxt.PrevSkeleton {
	p.prevMu.Lock()
	defer p.prevMu.Unlock()
	s := p.lastSkel
	if s == nil || s.Header == nil || hex.EncodeToString(s.Header.MerkleThis[:]) != head.MerkleThis {
		return nil
	}
	return s
}

// keepSkeleton remembers a pushed generation's parsed skeleton (nil
// forgets).
func (p *OCIPublisher) keepSkeleton(s *wtxt.PrevSkeleton) {
	p.prevMu.Lock()
	defer p.prevMu.Unlock()
	p.lastSkel = s
}

// ringPrevSkeleton returns generation gen's ring skeleton, parsed for the
// segment cache and the previous segments; nil when there is none (gen 0, a WTXT generation) or it
// does not parse (the cache then only learns).
func ringPrevSkeleton(ctx context.Context, ringDir string, gen uint64) *wtxt.PrevSkeleton {
	if gen == 0 {
		return nil
	}
	path := ringPath(ringDir, gen, ring.ExtSkeleton)
	b, err := safeopen.ReadFile(path, maxSkeletonBytes, safeopen.NoFollow)
	if err != nil {
		return nil
	}
	ps, err := wtxt.ParsePrevSkeleton(ctx, b, path)
	if err != nil {
		return nil
	}
	return ps
}

// maxSkeletonBytes bounds a ring skeleton read back (a skeleton holds one
// ch line per chunk: about 200 bytes per MiB of tensors at the default
// chunking).
const maxSkeletonBytes = 256 << 20

// nonFiniteDirect sets it.res.NonFinite from the encoder's counts
// (nonFiniteFromCounts). An array holding NaN/±Inf in both generations is
// reported when its counts grew, by how much (the elements that turned
// non-finite are at least that many): the direct path keeps no copy of
// the previous generation's bytes to compare element by element.
func (d *Daemon) nonFiniteDirect(it *item, head *ChainState, enc *wtxt.Result) {
	recheck, counted := nonFiniteFromCounts(it, head, enc)
	if !counted {
		if len(chunkdiff.HeldNonFinite(enc.Arrays)) > 0 {
			d.log.Info("NaN/Inf not compared with the previous generation: its counts are not known", "gen", it.rec.Gen)
		}
		return
	}
	if len(recheck) == 0 {
		return
	}
	counts := func(held []chunkdiff.NonFiniteCount) map[string]chunkdiff.NonFiniteCount {
		m := make(map[string]chunkdiff.NonFiniteCount, len(held))
		for _, c := range held {
			m[c.Array] = c
		}
		return m
	}
	base, cur := counts(head.Held.Arrays), counts(chunkdiff.HeldNonFinite(enc.Arrays))
	nf := it.res.NonFinite
	for _, name := range recheck {
		b, h := base[name], cur[name]
		if h.NaN > b.NaN || h.Inf > b.Inf {
			nf = append(nf, chunkdiff.NonFiniteArray{Array: name, NewNaN: max(0, h.NaN-b.NaN), NewInf: max(0, h.Inf-b.Inf)})
		}
	}
	slices.SortFunc(nf, func(a, b chunkdiff.NonFiniteArray) int { return strings.Compare(a.Array, b.Array) })
	it.res.NonFinite = nf
}
