package gitops

import (
	"context"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/snapshot"
)

// LogEntry is one commit of the generations branch as Repo.Log lists it:
// a generation commit, or a resume record (Resume set; its Gen and TS
// are those of the generation it resumes from, as its trailers are).
type LogEntry struct {
	Commit  plumbing.Hash
	Gen     uint64
	GenText string // Snapd-Gen as written, e.g. "000123"
	TS      string // Snapd-Ts
	Layout  string // Snapd-Layout
	// Meta is the generation's metadata from its Snapd-Meta trailer
	// (which verify-repo checks against the metadata inside the
	// generation); MetaErr a malformed trailer.
	Meta    snapshot.UserMeta
	MetaErr error
	// Abandoned: a generation a later resume record abandoned (it is not
	// on the branch's live chain).
	Abandoned bool
	Resume    *ResumeRecord
	// Shallow: the repository holds nothing below this commit (a shallow
	// boundary, e.g. Retain's), though the commit has parents: the listing
	// ends here and older generations are only in a full clone.
	Shallow bool
}

// Log lists the branch's generation commits and resume records, newest
// first, following first parents from the branch head down to the first
// generation (or the base branch's tip, which is not listed); at most
// max entries when max > 0. It reads commit messages only, so it works on
// any clone; in a shallow repository (Retain) it ends at the boundary. A commit on the way that is neither a generation nor a
// resume record ends the listing.
func (r *Repo) Log(ctx context.Context, max int) ([]LogEntry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	head, err := r.head()
	if err != nil || head == nil {
		return nil, err
	}
	live, err := r.liveSet(ctx, head.commit)
	if err != nil {
		return nil, err
	}
	shallow := r.shallowSet()
	var out []LogEntry
	seen := map[plumbing.Hash]bool{}
	for c := head.commit; c != nil && !seen[c.Hash] && (max <= 0 || len(out) < max); {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		seen[c.Hash] = true
		tr := ParseTrailers(c.Message)
		rec, isRec, err := parseResumeTrailers(tr)
		if err != nil {
			return nil, fmt.Errorf("commit %s: %w", c.Hash, err)
		}
		gen, gerr := parseGenTrailer(tr[TrailerGen])
		if gerr != nil {
			break // not a generation commit (a base branch's)
		}
		e := LogEntry{Commit: c.Hash, Gen: gen, GenText: tr[TrailerGen], TS: tr[TrailerTS], Layout: tr[TrailerLayout]}
		if isRec {
			e.Resume = rec
		} else {
			e.Abandoned = !live[c.Hash]
			e.Meta, e.MetaErr = MetaOfTrailers(tr)
		}
		if len(c.ParentHashes) > 0 && shallow[c.Hash] {
			e.Shallow = true
		}
		out = append(out, e)
		if len(c.ParentHashes) == 0 || shallow[c.Hash] {
			break
		}
		if _, ok := BaseOf(c); ok {
			break
		}
		if c, err = r.r.CommitObject(c.ParentHashes[0]); err != nil {
			return nil, fmt.Errorf("gitops: parent of %s: %w", e.Commit, err)
		}
	}
	return out, nil
}

// liveSet returns the generation commits of the live chain from c (first
// parents; a resume record continues at the commit it resumed from).
func (r *Repo) liveSet(ctx context.Context, c *object.Commit) (map[plumbing.Hash]bool, error) {
	shallow := r.shallowSet()
	live := map[plumbing.Hash]bool{}
	seen := map[plumbing.Hash]bool{}
	for c != nil && !seen[c.Hash] {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		seen[c.Hash] = true
		tr := ParseTrailers(c.Message)
		rec, isRec, err := parseResumeTrailers(tr)
		if err != nil {
			return nil, fmt.Errorf("commit %s: %w", c.Hash, err)
		}
		if isRec {
			from, err := r.r.CommitObject(rec.FromCommit)
			if err != nil && len(shallow) > 0 {
				break // resumed from below the boundary Retain left
			}
			if err != nil {
				return nil, fmt.Errorf("%w: resume record names commit %s: %v", ErrResume, rec.FromCommit, err)
			}
			c = from
			continue
		}
		if _, err := parseGenTrailer(tr[TrailerGen]); err != nil {
			break
		}
		live[c.Hash] = true
		if len(c.ParentHashes) == 0 || shallow[c.Hash] {
			break
		}
		if _, ok := BaseOf(c); ok {
			break
		}
		child := c.Hash
		if c, err = r.r.CommitObject(c.ParentHashes[0]); err != nil {
			return nil, fmt.Errorf("gitops: parent of %s: %w", child, err)
		}
	}
	return live, nil
}
