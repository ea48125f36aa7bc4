package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/pipeline/ring"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// Sentinel errors of re-used generation numbers and resumes.
var (
	// ErrReused: a request names a generation the chain already has, made
	// from another source or other content, and declares no resume. The
	// request fails; nothing is snapshotted or rewritten.
	ErrReused = errors.New("generation number re-used")
	// ErrResume: a declared resume (wal.Request.ResumedFrom) that cannot
	// be honoured: the generation it names is above the chain head or
	// cannot be found in the ring or the Git ledger.
	ErrResume = errors.New("resume")
)

// genRequest is STATE_DIR/ring/gen-NNNNNN.request: the request generation
// Gen was made from and the identity of its content, so that another
// request for the same number can be told apart from a redelivery.
type genRequest struct {
	Version   int    `json:"version"`
	Gen       uint64 `json:"gen"`
	Source    string `json:"source"`
	Requester string `json:"requester"`
	// RequestedNS is the request's ts (Unix nanoseconds) and Pos its WAL
	// position: a redelivery of the same request has both.
	RequestedNS int64  `json:"requested_ns"`
	Pos         string `json:"pos"`
	// SourceFingerprint: device, inode, size and mtime of the source (of
	// each regular file of a directory source, hashed) when it was read.
	SourceFingerprint string `json:"source_fingerprint,omitempty"`
	// Content is contentID of the generation's arrays; SHA256All its root.
	Content   string `json:"content_sha256"`
	SHA256All string `json:"sha256_all"`
	// ResumedFrom: the generation is the first of a run resumed from it.
	ResumedFrom uint64 `json:"resumed_from,omitempty"`
	// Meta: the request's metadata, stored inside the generation.
	Meta snapshot.UserMeta `json:"meta,omitempty"`
}

// contentID identifies a generation's content independently of its meta
// (gen, ts, build) and keys: SHA-256 over each array's `arr` line up to
// " hmac=" (name, dtype, shape, order, bytes and the SHA-256 of its raw
// bytes), each followed by LF, in the WTXT's array order.
func contentID(arrays []wtxt.ArrayInfo) string {
	h := sha256.New()
	for _, a := range arrays {
		line := a.Line
		if i := strings.Index(line, " hmac="); i >= 0 {
			line = line[:i]
		}
		io.WriteString(h, line+"\n")
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sourceFingerprint describes the source's files as they are now (device,
// inode, size, mtime); "" when it cannot be read. Equal fingerprints are
// taken as equal content; different ones lead to a content comparison.
func sourceFingerprint(src string) string {
	st, err := os.Stat(src)
	if err != nil {
		return ""
	}
	one := func(rel string, fi fs.FileInfo) string {
		dev, ino, ok := fileID(fi)
		if !ok {
			return ""
		}
		return fmt.Sprintf("%s dev=%d ino=%d size=%d mtime=%d\n", rel, dev, ino, fi.Size(), fi.ModTime().UnixNano())
	}
	if !st.IsDir() {
		return "file " + strings.TrimSuffix(one(".", st), "\n")
	}
	h := sha256.New()
	err = filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !de.Type().IsRegular() {
			return nil
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		io.WriteString(h, one(rel, fi))
		return nil
	})
	if err != nil {
		return ""
	}
	return "dir " + hex.EncodeToString(h.Sum(nil))
}

func readGenRequest(p string) (*genRequest, error) {
	b, err := readStateFile(p)
	if err != nil {
		return nil, err
	}
	var r genRequest
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &r, nil
}

// writeRequest persists the request record of the item's generation into
// the ring (before the chain state, so a generation in the chain has one).
func (it *item) writeRequest(rw *ring.Writer, res *wtxt.Result, fingerprint string, resumedFrom uint64) error {
	rec := it.rec
	r := genRequest{Version: 1, Gen: rec.Gen, Source: rec.Source, Requester: rec.Requester, RequestedNS: rec.Time.UnixNano(),
		Pos: rec.Pos.String(), SourceFingerprint: fingerprint, Content: contentID(res.Arrays),
		SHA256All: hex.EncodeToString(res.Root.SHA256All[:]), ResumedFrom: resumedFrom, Meta: rec.Meta}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return rw.Put(rw.Path(rec.Gen, ring.ExtRequest), append(b, '\n'), 0o644)
}

// ringRoot returns generation gen's root values from the ring in ringDir:
// its seal (encrypted), or its WTXT header, or its WSUM (streamed), or
// the ExtOCI record of a generation the build pushed.
func ringRoot(ringDir string, gen uint64) (wtxt.Root, bool) {
	if rec := ringOCIRecord(ringDir, gen); rec != nil {
		return rec.Header.Root, true
	}
	p := ringPath(ringDir, gen, ExtWTXT)
	if sb, err := os.ReadFile(armor.SealPath(p)); err == nil {
		if s, err := armor.ParseSeal(sb); err == nil {
			return s.Root, true
		}
		return wtxt.Root{}, false
	}
	f, err := os.Open(p)
	if err != nil {
		return wtxt.Root{}, false
	}
	defer f.Close()
	h, err := gitops.ParseHeader(f)
	if err != nil {
		return wtxt.Root{}, false
	}
	if h.Pending {
		w, err := os.Open(ringPath(ringDir, gen, ExtWSUM))
		if err != nil {
			return wtxt.Root{}, false
		}
		defer w.Close()
		if gitops.ParseWSUM(w, h) != nil {
			return wtxt.Root{}, false
		}
	}
	return h.Root, true
}

// resumeBase prepares a declared resume (it.rec.ResumedFrom = R) and
// returns the state the request's generation chains to. R at the chain
// head (or at a pending resume's generation) needs nothing. R below it:
// once every earlier request is finished (committed to Git), R's chain
// values are taken from the ring or, failing that, from the Git ledger's
// live chain; the chain state records the pending resume (Resuming), and
// the ring entries above R are removed (they are in Git). Fails with
// ErrResume when R is above the head or cannot be found.
func (d *Daemon) resumeBase(ctx context.Context, it *item) (ChainState, error) {
	from, gen := it.rec.ResumedFrom, it.rec.Gen
	full := d.Head()
	eff := full.chainHead()
	switch {
	case from == eff.Gen:
		return eff, nil
	case from > eff.Gen:
		return eff, permanent{fmt.Errorf("%w: gen %d resumes from gen %d, which is above the chain head gen %d (never snapshotted here)", ErrResume, gen, from, eff.Gen)}
	}
	// The abandoned generations must reach Git before their ring files go.
	if err := d.fin.wait(ctx, it.rec.Pos); err != nil {
		return eff, err
	}
	root, ok := ringRoot(d.ringDir, from)
	where := "ring"
	if !ok && d.deps.Repo != nil {
		var h *gitops.Header
		err := d.retry(ctx, "build", gen, func() error {
			var err error
			if h, err = d.deps.Repo.LiveGeneration(ctx, from); err != nil && !errors.Is(err, gitops.ErrResume) {
				// Fetching history retention cut from the remote,
				// which may answer next time: retried, holding the line.
				return remoteUnavailable{fmt.Errorf("gen %d resumes from gen %d: %w", gen, from, err)}
			}
			return err
		})
		if err != nil && ctx.Err() == nil {
			return eff, permanent{fmt.Errorf("%w: gen %d resumes from gen %d: %v", ErrResume, gen, from, err)}
		}
		if err != nil {
			return eff, err
		}
		root, ok, where = h.Root, true, "git"
	}
	if !ok {
		return eff, permanent{fmt.Errorf("%w: gen %d resumes from gen %d, which is neither in the ring nor in a Git ledger", ErrResume, gen, from)}
	}
	base := newChainState(from, root, &ChainState{}, d.now().UTC())
	base.Generations = full.Generations
	next := full
	next.Resuming = &ResumeState{From: from, AbandonedLast: full.Gen, Base: base}
	next.Updated = d.now().UTC()
	if err := writeChainState(d.ring, d.config().StateDir, &next); err != nil {
		return eff, err
	}
	d.headMu.Lock()
	d.head = next
	d.headMu.Unlock()
	ents, err := d.ring.List()
	if err != nil {
		return eff, err
	}
	for _, e := range ents {
		if e.Gen > from {
			if err := d.ring.Remove(e.Gen); err != nil {
				d.log.Warn("resume: remove abandoned ring entry", "gen", e.Gen, "error", err)
			}
		}
	}
	d.log.Warn("run resumed from an earlier generation: the generations above it are abandoned", "gen", gen, "resumed_from", from,
		"abandoned_last", full.Gen, "merkle_prev", base.MerkleThis, "found_in", where)
	return *base, nil
}

// finished tracks how far the finish stage got in the WAL, so that a
// stage can wait for every earlier request to be completed.
type finished struct {
	mu  sync.Mutex
	pos wal.Pos
	ch  chan struct{}
}

// set records that every request before p is finished.
func (f *finished) set(p wal.Pos) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pos.Less(p) {
		f.pos = p
	}
	if f.ch != nil {
		close(f.ch)
		f.ch = nil
	}
}

// wait returns once every request before p is finished, or ctx's error.
func (f *finished) wait(ctx context.Context, p wal.Pos) error {
	for {
		f.mu.Lock()
		if !f.pos.Less(p) {
			f.mu.Unlock()
			return nil
		}
		if f.ch == nil {
			f.ch = make(chan struct{})
		}
		ch := f.ch
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
