package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/pipeline/ring"
	"github.com/snapd-ml/snapd/snapshot"
)

// repeated judges a request for generation gen at or below the chain head
// that the ring holds. It reports done when the request is the one the
// generation was made from (a redelivery whose outcome a crash lost) or
// names the same source with the same content (a duplicate): its result
// is then filled from the ring and nothing is rewritten. It returns
// ErrReused when the source or the content differs. A request that
// declares a resume is done only when it is the very request the
// generation was made from.
func (d *Daemon) repeated(ctx context.Context, it *item, head *ChainState) (done bool, err error) {
	gen := it.rec.Gen
	if !fileExists(ringPath(d.ringDir, gen, ExtWTXT)) && !fileExists(ringPath(d.ringDir, gen, ring.ExtOCI)) {
		return false, nil
	}
	req, rerr := readGenRequest(ringPath(d.ringDir, gen, ring.ExtRequest))
	if rerr != nil {
		// A generation made before request records existed: only the
		// same request (its ts is the WTXT's meta ts) is recognized.
		if errors.Is(rerr, fs.ErrNotExist) && it.rec.ResumedFrom == 0 && ringTS(d.ringDir, gen) == wtxt.FormatTS(it.rec.Time) {
			it.fromRing(d.ring, head)
			return true, nil
		}
		if it.rec.ResumedFrom != 0 {
			return false, nil
		}
		return false, permanent{fmt.Errorf("%w: gen %d is already in the chain and its request record cannot be read (%v): the request cannot be told from a re-use; a resumed run declares it (--resumed-from)", ErrReused, gen, rerr)}
	}
	if req.Pos == it.rec.Pos.String() && req.RequestedNS == it.rec.Time.UnixNano() {
		it.fromRing(d.ring, head)
		return true, nil
	}
	if it.rec.ResumedFrom != 0 {
		return false, nil
	}
	hint := fmt.Sprintf("a run restarted from an earlier checkpoint declares it: snapd request-snapshot --resumed-from R, or request_snapshot(..., resumed_from=R); the chain head is gen %d", d.Head().Gen)
	if req.Source != it.rec.Source {
		return false, permanent{fmt.Errorf("%w: gen %d was snapshotted from %s (sha256_all %s); this request names %s (%s)", ErrReused, gen, req.Source, req.SHA256All, it.rec.Source, hint)}
	}
	if fp := sourceFingerprint(it.rec.Source); fp != "" && fp == req.SourceFingerprint {
		it.fromRing(d.ring, head)
		return true, nil
	}
	// The same path, changed files: compare the content itself.
	if it.snap == nil {
		return false, permanent{fmt.Errorf("%w: gen %d: %s changed since it was snapshotted and cannot be read to compare", ErrReused, gen, it.rec.Source)}
	}
	cfg := d.config()
	s := it.snap
	s.Meta = snapshot.Meta{Schema: cfg.Schema, Gen: gen, TS: it.rec.Time.UTC().Truncate(time.Second), Build: cfg.Build, Host: cfg.Host, Cuda: cfg.Cuda}
	s.UserMeta = it.rec.Meta
	res, err := wtxt.Encode(ctx, io.Discard, s, wtxt.EncodeOptions{Workers: cfg.Workers})
	if err != nil {
		if ctx.Err() != nil || transient(err) {
			return false, err
		}
		return false, permanent{fmt.Errorf("gen %d: compare with the snapshotted content: %w", gen, err)}
	}
	if id := contentID(res.Arrays); id != req.Content {
		return false, permanent{fmt.Errorf("%w: gen %d was snapshotted from %s with other content (content %s, now %s) (%s)", ErrReused, gen, req.Source, short(req.Content), short(id), hint)}
	}
	it.fromRing(d.ring, head)
	return true, nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// ringTS returns the meta ts of generation gen's plaintext WTXT (or of
// its ExtOCI record's header) in the ring in ringDir ("" when
// unreadable).
func ringTS(ringDir string, gen uint64) string {
	if rec := ringOCIRecord(ringDir, gen); rec != nil {
		return rec.Header.Root.TS
	}
	f, err := os.Open(ringPath(ringDir, gen, ExtWTXT))
	if err != nil {
		return ""
	}
	defer f.Close()
	h, err := wtxt.ReadHeader(f)
	if err != nil {
		return ""
	}
	return h.Root.TS
}

// fromRing fills the result of a request for a generation already in the
// ring (a redelivery or duplicate) from the ring; nothing is rewritten.
func (it *item) fromRing(rw *ring.Writer, head *ChainState) {
	gen := it.rec.Gen
	r := &it.res
	if rec := ringOCIRecord(rw.Dir(), gen); rec != nil {
		// Pushed by the build (ocidirect.go).
		r.Redelivered, r.Skeleton, r.OCI, r.WTXTBytes = true, rw.Path(gen, ring.ExtSkeleton), rec.ref(), rec.WTXTBytes
		root := rec.Header.Root
		r.SHA256All, r.MerklePrev, r.MerkleThis = hexs(root.SHA256All), hexs(root.MerklePrev), hexs(root.MerkleThis)
		if gen == head.Gen {
			r.BaseGen = head.PrevGen
		}
		return
	}
	p := rw.Path(gen, ExtWTXT)
	st, err := os.Stat(p)
	if err != nil {
		return
	}
	r.Redelivered, r.WTXT, r.WTXTBytes = true, p, st.Size()
	if gen == head.Gen {
		r.SHA256All, r.MerklePrev, r.MerkleThis, r.BaseGen = head.SHA256All, head.MerklePrev, head.MerkleThis, head.PrevGen
	} else if sb, err := os.ReadFile(armor.SealPath(p)); err == nil {
		if s, err := armor.ParseSeal(sb); err == nil {
			r.SHA256All, r.MerklePrev, r.MerkleThis = hexs(s.SHA256All), hexs(s.MerklePrev), hexs(s.MerkleThis)
		}
	} else if f, err := os.Open(p); err == nil {
		if h, err := wtxt.ReadHeader(f); err == nil && !h.Pending {
			r.SHA256All, r.MerklePrev, r.MerkleThis = hexs(h.SHA256All), hexs(h.MerklePrev), hexs(h.MerkleThis)
		}
		f.Close()
	}
	fl := rw.Lookup(gen)
	r.Delta, r.DeltaBytes, r.WSUM, r.Seal = fl.Delta, fl.DeltaBytes, fl.WSUM, fl.Seal
}
