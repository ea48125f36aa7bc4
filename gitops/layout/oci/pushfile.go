package oci

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/safeopen"
	"github.com/snapd-ml/snapd/snapshot"
)

// ErrNoCacheKey: a segment cache was asked for without a key to derive
// its keys from (FilePush.SegmentCache needs EncodeOptions.HMACKey or
// SignKey).
var ErrNoCacheKey = errors.New("oci: a segment cache needs an HMAC key or a signing key")

// A FileError is a failure to create or replace a local file PushSnapshotFile
// writes (the skeleton, the segment cache), as opposed to the registry's
// or the snapshot's. Its message is Err's.
type FileError struct{ Err error }

func (e *FileError) Error() string { return e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// FilePush says where PushSnapshotFile writes and what it may reuse.
type FilePush struct {
	// Skeleton is the file the skeleton is written to, atomically, once
	// the manifest is in the registry. The WTXT's name in the push is its
	// base name without ".skel".
	Skeleton string
	// SegmentSize is the target segment blob size; 0: AutoSegmentSize of
	// the WTXT wtxt.Encode would write, so the segments are those a push
	// of that WTXT cuts.
	SegmentSize int64
	// Previous is the previous generation's segments and manifest tag
	// (its Cache is set from SegmentCache).
	Previous Previous
	// SegmentCache, when not "", is the segment cache file: read (with
	// PrevSkeleton, when it exists) to recognise unchanged segments by a
	// keyed BLAKE3, and rewritten atomically (mode 0600) after the push
	// for the next one. Its keys derive from the HMAC key, else the
	// signing key's seed (ErrNoCacheKey without either). A file that
	// cannot be read or used is logged and the push hashes every segment,
	// as without a cache.
	SegmentCache string
	// PrevSkeleton is the previous skeleton (wtxt.ParsePrevSkeleton)
	// whose segments the cache may prove unchanged; nil: the cache file
	// is not read, only written.
	PrevSkeleton *wtxt.PrevSkeleton
	// Logger receives the cache warnings; nil discards them.
	Logger *slog.Logger
	// SegmentsFirst: the encoder serves the segments (and so the uploads)
	// before the header's hashes (wtxt.SplitOptions.SegmentsFirst): for a
	// push whose new segments are many, the registry then stores them
	// while the header is hashed. The default, header first, suits a push
	// of few changed segments on several workers.
	SegmentsFirst bool
	// UploadChanged: with Previous.Manifest, a segment that manifest does
	// not confirm (it changed since the previous generation) is uploaded
	// without asking the registry first (HEAD) whether it has the blob. A
	// registry stores a blob it has already as that same blob, so only a
	// change back to older bytes costs an upload it could have skipped;
	// a dense update saves a HEAD per segment.
	UploadChanged bool
	// WholeArray, when > 0, makes every array of 1..WholeArray raw bytes
	// one segment whose blob is streamed from the snapshot, its digest
	// the array's sha256 (wtxt.SplitOptions.WholeArray): for dense
	// updates, one SHA-256 pass and the segment's copies fewer. A whole
	// array the previous generation had at the same place with the same
	// digest is not uploaded again.
	WholeArray int64
	// Progress, when set, is called with the raw bytes of each segment
	// as the encoder gets past it (known or new: their sum is the
	// snapshot's raw size), from the encoder's goroutines.
	Progress func(n int64)
}

// PushSnapshotFile is PushSnapshot with its skeleton written to the file
// p.Skeleton and the segment cache kept in p.SegmentCache: the skeleton,
// blobs and manifest are those of "convert to WTXT, then push it". It
// returns the push's result and the segment size used. A local file that
// cannot be written is a *FileError; nothing is written to p.Skeleton
// when the push fails. The WTXT's Result (root values, array hashes and
// NaN/Inf counts) comes back beside the push's. The config blob is
// uploaded and the tag looked up as soon as the skeleton is done, while
// the last segments may still upload; the manifest follows once every
// blob is in.
func (r *Repository) PushSnapshotFile(ctx context.Context, s *snapshot.Snapshot, opts wtxt.EncodeOptions, p FilePush) (*PushResult, *wtxt.Result, int64, error) {
	segSize := p.SegmentSize
	if segSize == 0 {
		n, err := wtxt.EncodedSize(s, opts)
		if err != nil {
			return nil, nil, 0, err
		}
		segSize = AutoSegmentSize(n)
	}
	prev := p.Previous
	if p.SegmentCache != "" {
		var err error
		if prev.Cache, err = openSegmentCache(p, opts); err != nil {
			return nil, nil, 0, err
		}
	}
	out, err := atomicfile.Create(p.Skeleton, 0o644)
	if err != nil {
		return nil, nil, 0, &FileError{err}
	}
	defer out.Abort()
	res, enc, err := r.pushSnapshot(ctx, s, opts, filepath.Base(strings.TrimSuffix(p.Skeleton, ".skel")), out, segSize, prev, pushOptions{segmentsFirst: p.SegmentsFirst, uploadChanged: p.UploadChanged, progress: p.Progress, wholeArray: p.WholeArray})
	if err != nil {
		return nil, nil, 0, err
	}
	if err := out.Commit(); err != nil {
		return nil, nil, 0, &FileError{err}
	}
	if prev.Cache != nil {
		if err := writeSegmentCache(p.SegmentCache, prev.Cache); err != nil {
			return nil, nil, 0, &FileError{err}
		}
	}
	return res, enc, segSize, nil
}

// openSegmentCache builds p.SegmentCache's cache: keyed from the HMAC key
// (else the signing key's seed), primed from the file (when it exists)
// with p.PrevSkeleton. A file that cannot be used is logged and the push
// goes on without it.
func openSegmentCache(p FilePush, opts wtxt.EncodeOptions) (*wtxt.SegmentCache, error) {
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	secret := opts.HMACKey
	if len(secret) == 0 && opts.SignKey != nil {
		secret = opts.SignKey.Seed()
	}
	if len(secret) == 0 {
		return nil, ErrNoCacheKey
	}
	var file []byte
	if p.PrevSkeleton != nil {
		b, err := safeopen.ReadFile(p.SegmentCache, wtxt.MaxSegmentCacheBytes, 0)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			log.Warn("segment cache not read: every segment is hashed", "file", p.SegmentCache, "err", err)
		default:
			file = b
		}
	}
	c, err := wtxt.NewSegmentCache(secret, p.PrevSkeleton, file)
	if err != nil && file != nil {
		log.Warn("segment cache not used: every segment is hashed", "file", p.SegmentCache, "err", err)
		c, err = wtxt.NewSegmentCache(secret, nil, nil)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// writeSegmentCache replaces the cache file atomically.
func writeSegmentCache(path string, c *wtxt.SegmentCache) error {
	f, err := atomicfile.Create(path, 0o600)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := c.WriteTo(f); err != nil {
		return err
	}
	return f.Commit()
}
