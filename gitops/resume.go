package gitops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/atomicfile"
)

// Trailers of a resume record (docs/FORMAT.md "Resumed runs").
const (
	// TrailerResumedFrom: the generation the run restarted from (R, as
	// written in its meta, e.g. "000002").
	TrailerResumedFrom = "Snapd-Resumed-From"
	// TrailerResumedCommit: R's generation commit.
	TrailerResumedCommit = "Snapd-Resumed-Commit"
	// TrailerAbandoned: the generations of the live chain above R that the
	// record abandons, "FIRST..LAST" (meta text, e.g. "000003..000004").
	TrailerAbandoned = "Snapd-Abandoned"
)

// ErrResume reports a resume that cannot be recorded: the generation it
// names is not on the branch's live chain, or its merkle_this is not the
// resuming generation's merkle_prev.
var ErrResume = errors.New("gitops: resume")

// Resume declares, on a Generation, that the run restarted from generation
// From: the generation chains to From's merkle_this, and Commit first
// records the generations of the branch above From as abandoned (a signed
// resume record, see ResumeRecord) unless the branch head is From, or
// already a record of this resume, or the generation itself.
type Resume struct {
	From uint64
}

// ResumeRecord is a parsed resume record: a commit on the generations
// branch whose parent is the abandoned head and whose tree and root
// trailers are those of generation From's commit (so the branch head
// reads as From), plus TrailerResumedFrom, TrailerResumedCommit and
// TrailerAbandoned. Abandoned generations keep their commits and tags;
// they stay in the history below the record.
type ResumeRecord struct {
	From           uint64
	FromText       string
	FromCommit     plumbing.Hash
	AbandonedFirst string // meta text of the lowest abandoned generation
	AbandonedLast  string // ... and of the highest (the record's parent's)
}

// ParseResumeRecord reads c's resume trailers: ok is false for a commit
// that carries none (an ordinary generation); err reports a commit that
// carries some but not a consistent set (the trailers are present but
// malformed, or Snapd-Gen is not the resumed-from generation).
func ParseResumeRecord(c *object.Commit) (rec *ResumeRecord, ok bool, err error) {
	return parseResumeTrailers(ParseTrailers(c.Message))
}

// ParseResumeMessage is ParseResumeRecord for a commit message read
// elsewhere (e.g. through git log).
func ParseResumeMessage(msg string) (rec *ResumeRecord, ok bool, err error) {
	return parseResumeTrailers(ParseTrailers(msg))
}

func parseResumeTrailers(tr map[string]string) (*ResumeRecord, bool, error) {
	from, fc, ab := tr[TrailerResumedFrom], tr[TrailerResumedCommit], tr[TrailerAbandoned]
	if from == "" && fc == "" && ab == "" {
		return nil, false, nil
	}
	r := &ResumeRecord{FromText: from}
	var err error
	if r.From, err = parseGenTrailer(from); err != nil || r.From == 0 {
		return nil, true, fmt.Errorf("%w: trailer %s %q is not a generation", ErrResume, TrailerResumedFrom, from)
	}
	if tr[TrailerGen] != from {
		return nil, true, fmt.Errorf("%w: trailer %s %q differs from %s %q (a record reads as the generation it resumes from)", ErrResume, TrailerGen, tr[TrailerGen], TrailerResumedFrom, from)
	}
	if !plumbing.IsHash(fc) || strings.ToLower(fc) != fc {
		return nil, true, fmt.Errorf("%w: trailer %s %q is not a commit id", ErrResume, TrailerResumedCommit, fc)
	}
	r.FromCommit = plumbing.NewHash(fc)
	lo, hi, okr := strings.Cut(ab, "..")
	l, err1 := parseGenTrailer(lo)
	h, err2 := parseGenTrailer(hi)
	if !okr || err1 != nil || err2 != nil || l <= r.From || h < l {
		return nil, true, fmt.Errorf("%w: trailer %s %q: want FIRST..LAST above %s", ErrResume, TrailerAbandoned, ab, from)
	}
	r.AbandonedFirst, r.AbandonedLast = lo, hi
	return r, true, nil
}

// resumeMessage is a resume record's message: from's message with its
// subject replaced, followed by the resume trailers.
func resumeMessage(fromTrail map[string]string, rec *ResumeRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "snapd: resume from generation %s (abandons %s..%s)\n\n", rec.FromText, rec.AbandonedFirst, rec.AbandonedLast)
	for _, k := range rootTrailers {
		b.WriteString(k + ": " + fromTrail[k] + "\n")
	}
	b.WriteString(TrailerLayout + ": " + fromTrail[TrailerLayout] + "\n")
	b.WriteString(TrailerResumedFrom + ": " + rec.FromText + "\n")
	b.WriteString(TrailerResumedCommit + ": " + rec.FromCommit.String() + "\n")
	b.WriteString(TrailerAbandoned + ": " + rec.AbandonedFirst + ".." + rec.AbandonedLast + "\n")
	return b.String()
}

// liveGen walks the live chain from c (first parents; a resume record
// continues at the commit it resumed from) and returns the commit of
// generation gen with the generations above it it passed (their meta
// text, newest first), or nil when gen is not on the live chain.
func (r *Repo) liveGen(c *object.Commit, gen uint64) (*object.Commit, []string, error) {
	found, above, _, err := r.liveGenCut(c, gen)
	return found, above, err
}

// maxDeepens bounds the fetches liveGenFetch makes for one generation.
const maxDeepens = 6

// liveGenFetch is liveGen, except that when the walk ends at the
// repository's shallow boundary above gen (Retain cut the generation
// after it was pushed) and Config.History is set, it fetches the history
// between from the remote and walks again: first as many commits as
// generations lie between the boundary and gen, then twice as many each
// time (resume records are commits too), at most maxDeepens times.
// A failed fetch is returned as it is (not ErrResume: the remote may
// answer next time).
func (r *Repo) liveGenFetch(ctx context.Context, c *object.Commit, gen uint64) (*object.Commit, []string, error) {
	n := 0
	for try := 0; ; try++ {
		found, above, lowest, err := r.liveGenCut(c, gen)
		if err != nil || found != nil || lowest == 0 || r.cfg.History == nil || try == maxDeepens {
			return found, above, err
		}
		if n == 0 {
			n = int(min(lowest-gen, 1<<20))
		} else {
			n *= 2
		}
		if err := r.cfg.History.Deepen(ctx, r.cfg.Branch, n); err != nil {
			return nil, nil, fmt.Errorf("gitops: generation %06d is below the history the local repository keeps (from generation %06d); fetching it from the remote: %w", gen, lowest, err)
		}
		r.reindex()
	}
}

// tagsCut reports whether a generation of above (gen texts) has no tag
// here: Retain deleted it with the generation's commit (which a fetch
// brought back since).
func (r *Repo) tagsCut(above []string) bool {
	for _, g := range above {
		if _, ok := r.tagTarget(r.TagName(g)); !ok {
			return true
		}
	}
	return false
}

// fetchAbandonedTags fetches the remote's tags of the generations a
// resume abandons (above: their gen texts), which Retain deleted with
// their commits, so that genTag passes over those names again.
func (r *Repo) fetchAbandonedTags(ctx context.Context, above []string) error {
	names := map[string]bool{}
	for _, g := range above {
		names[r.TagName(g)] = true
	}
	return r.cfg.History.FetchTags(ctx, func(name string) bool {
		if names[name] {
			return true
		}
		i := strings.LastIndex(name, "-r")
		return i > 0 && names[name[:i]] && reuseOf(name, name[:i])
	})
}

// liveGenCut is liveGen; when the walk ends at a shallow boundary commit
// of a generation above gen, lowest is that generation (else 0).
func (r *Repo) liveGenCut(c *object.Commit, gen uint64) (*object.Commit, []string, uint64, error) {
	shallow := r.shallowSet()
	var above []string
	seen := map[plumbing.Hash]bool{}
	for c != nil && !seen[c.Hash] {
		seen[c.Hash] = true
		tr := ParseTrailers(c.Message)
		rec, isRec, err := parseResumeTrailers(tr)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("commit %s: %w", c.Hash, err)
		}
		if isRec {
			if c, err = r.r.CommitObject(rec.FromCommit); err != nil {
				return nil, nil, 0, fmt.Errorf("%w: resume record names commit %s: %v", ErrResume, rec.FromCommit, err)
			}
			continue
		}
		g, err := parseGenTrailer(tr[TrailerGen])
		if err != nil {
			return nil, nil, 0, nil // not a generation commit (a base branch)
		}
		switch {
		case g == gen:
			return c, above, 0, nil
		case g < gen:
			return nil, nil, 0, nil
		}
		above = append(above, tr[TrailerGen])
		if len(c.ParentHashes) > 0 && shallow[c.Hash] {
			return nil, nil, g, nil
		}
		if len(c.ParentHashes) == 0 {
			return nil, nil, 0, nil
		}
		if _, ok := BaseOf(c); ok {
			return nil, nil, 0, nil
		}
		if c, err = r.r.CommitObject(c.ParentHashes[0]); err != nil {
			return nil, nil, 0, fmt.Errorf("gitops: parent of %s: %w", c.Hash, err)
		}
	}
	return nil, nil, 0, nil
}

// resume returns the head h's generation is to be committed on: head
// itself when nothing is abandoned (head is res.From, or the generation
// itself, or already this resume's record), else a new signed resume
// record on top of head.
func (r *Repo) resume(ctx context.Context, head *headInfo, h *Header, res Resume) (*headInfo, error) {
	if head == nil || head.base {
		return head, nil
	}
	tr := head.trail
	if tr[TrailerGen] == h.Root.Gen && tr[TrailerSHA256All] == h.trailer(TrailerSHA256All) {
		return head, nil // committed already
	}
	if rec, ok, err := parseResumeTrailers(tr); err != nil {
		return nil, fmt.Errorf("branch %s head %s: %w", r.cfg.Branch, head.commit.Hash, err)
	} else if ok && rec.From == res.From {
		return head, nil // recorded already (a crash before the generation's commit)
	}
	pg, err := parseGenTrailer(tr[TrailerGen])
	if err != nil {
		return nil, fmt.Errorf("gitops: branch %s head %s has no %s trailer", r.cfg.Branch, head.commit.Hash, TrailerGen)
	}
	if pg == res.From {
		return head, nil
	}
	if pg > h.Gen {
		// Committed already, with later generations on top (a restart
		// recommits the ring): Commit then finds it not newer.
		if c, _, err := r.liveGen(head.commit, h.Gen); err == nil && c != nil && ParseTrailers(c.Message)[TrailerSHA256All] == h.trailer(TrailerSHA256All) {
			return head, nil
		}
	}
	if pg < res.From {
		return nil, fmt.Errorf("%w: generation %s resumes from generation %d, but the branch %s head is generation %s", ErrResume, h.Root.Gen, res.From, r.cfg.Branch, tr[TrailerGen])
	}
	from, above, err := r.liveGenFetch(ctx, head.commit, res.From)
	if err != nil {
		return nil, err
	}
	if from != nil && r.cfg.History != nil && r.tagsCut(above) {
		if err := r.fetchAbandonedTags(ctx, above); err != nil {
			return nil, fmt.Errorf("gitops: the tags of the generations resuming from %06d abandons: %w", res.From, err)
		}
	}
	if from == nil {
		return nil, fmt.Errorf("%w: generation %s resumes from generation %d, which is not on the live chain of branch %s", ErrResume, h.Root.Gen, res.From, r.cfg.Branch)
	}
	ft := ParseTrailers(from.Message)
	if mt, mp := ft[TrailerMerkleThis], h.trailer(TrailerMerklePrev); mt != mp {
		return nil, fmt.Errorf("%w: generation %s merkle_prev %s, but generation %s (commit %s), which it resumes from, has merkle_this %s", ErrChainBreak, h.Root.Gen, mp, ft[TrailerGen], from.Hash, mt)
	}
	rec := &ResumeRecord{From: res.From, FromText: ft[TrailerGen], FromCommit: from.Hash, AbandonedFirst: above[len(above)-1], AbandonedLast: above[0]}
	fromTree, err := from.Tree()
	if err != nil {
		return nil, fmt.Errorf("gitops: tree of %s: %w", from.Hash, err)
	}
	// The record's time is the resuming generation's, so it is
	// reproducible from its inputs like a generation commit.
	when, err := wtxt.ParseTS(h.Root.TS)
	if err != nil {
		when = r.cfg.Now().UTC()
	}
	sig := object.Signature{Name: r.cfg.AuthorName, Email: r.cfg.AuthorEmail, When: when}
	c := &object.Commit{Author: sig, Committer: sig, Message: resumeMessage(ft, rec), TreeHash: from.TreeHash, ParentHashes: []plumbing.Hash{head.commit.Hash}}
	if r.cfg.SigningKey != nil {
		if c.PGPSignature, err = signObject(r.cfg.SigningKey, c.EncodeWithoutSignature); err != nil {
			return nil, err
		}
	}
	b := &builder{st: r.r.Storer, ctx: ctx}
	hash, err := b.encode(c.Encode)
	if err != nil {
		return nil, err
	}
	name := plumbing.NewBranchReferenceName(r.cfg.Branch)
	if err := r.r.Storer.CheckAndSetReference(plumbing.NewHashReference(name, hash), plumbing.NewHashReference(name, head.commit.Hash)); err != nil {
		return nil, fmt.Errorf("gitops: update branch %s: %w", r.cfg.Branch, err)
	}
	c.Hash = hash
	return &headInfo{commit: c, tree: fromTree, trail: ParseTrailers(c.Message)}, nil
}

// genTag returns the tag name for generation genText committed on head: the
// first of TagPrefix+genText, then -r1, -r2, ... that is free or already
// names head (a repeated Commit). A name held by a commit of head's
// history (an abandoned generation of that number, see Resume) is passed
// over; any other holder returns that name, which Commit then refuses.
func (r *Repo) genTag(ctx context.Context, genText string, head *headInfo) string {
	base := r.TagName(genText)
	remote := r.remoteTaken(ctx, genText, head)
	var history map[plumbing.Hash]bool
	for k := 0; ; k++ {
		name := reuseTag(base, k)
		if c, ok := remote[name]; ok && (head == nil || c != head.commit.Hash) {
			continue // the remote's, for a generation Retain cut here
		}
		target, ok := r.tagTarget(name)
		if !ok || head == nil || target == head.commit.Hash {
			return name
		}
		if history == nil {
			history = r.firstParents(head.commit)
		}
		if !history[target] {
			return name
		}
	}
}

// genHighName is the git directory's file holding the highest generation
// number this repository has committed, abandoned ones included: a number
// at or below it may have a tag already. Written unsynced (a crash may
// lose the last commits' update; their tags are still here then).
const genHighName = "snapd-gen-high"

// genHighPath returns genHighName's path ("" without a git directory).
func (r *Repo) genHighPath() string {
	objs := objectsDir(r.dir)
	if objs == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(objs), genHighName)
}

// readGenHigh returns the number in genHighName, false when there is none.
func (r *Repo) readGenHigh() (uint64, bool) {
	p := r.genHighPath()
	if p == "" {
		return 0, false
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// genHigh returns the highest generation number committed here:
// genHighName, or without it the highest of the local generation tags and
// head's (then written down).
func (r *Repo) genHigh(head *headInfo) uint64 {
	if n, ok := r.readGenHigh(); ok {
		return n
	}
	var n uint64
	if head != nil {
		n, _ = parseGenTrailer(head.trail[TrailerGen])
	}
	if it, err := r.r.Tags(); err == nil {
		it.ForEach(func(ref *plumbing.Reference) error {
			g, ok := strings.CutPrefix(ref.Name().Short(), r.cfg.TagPrefix)
			if i := strings.Index(g, "-r"); ok && i >= 0 && reuseOf(g, g[:i]) {
				g = g[:i]
			}
			if m, err := parseGenTrailer(g); ok && err == nil && m > n {
				n = m
			}
			return nil
		})
	}
	r.noteGen(n)
	return n
}

// noteGen records generation number n as committed here (genHighName,
// raised only; best effort: without the file genHigh derives it again).
func (r *Repo) noteGen(n uint64) {
	if old, ok := r.readGenHigh(); ok && old >= n {
		return
	}
	if p := r.genHighPath(); p != "" {
		atomicfile.WriteUnsynced(p, []byte(strconv.FormatUint(n, 10)+"\n"), 0o644)
	}
}

// remoteTaken returns the remote's tags of generation genText's number
// (name -> commit) when they may matter: the number is at or below the
// highest committed here (a resumed run re-uses it) and Retain has cut
// this repository (its tags of older generations are gone, the remote's
// are not). nil otherwise, and when the remote cannot be listed (the push
// then reports a tag taken, as it would have).
func (r *Repo) remoteTaken(ctx context.Context, genText string, head *headInfo) map[string]plumbing.Hash {
	if r.cfg.History == nil || len(r.shallowSet()) == 0 {
		return nil
	}
	n, err := parseGenTrailer(genText)
	if err != nil || n > r.genHigh(head) {
		return nil
	}
	tags, err := r.cfg.History.RemoteTags(ctx, r.TagName(genText))
	if err != nil {
		return nil
	}
	return tags
}

// tagTarget returns the commit the tag name points at.
func (r *Repo) tagTarget(name string) (plumbing.Hash, bool) {
	ref, err := r.r.Storer.Reference(plumbing.NewTagReferenceName(name))
	if err != nil {
		return plumbing.ZeroHash, false
	}
	if t, err := r.r.TagObject(ref.Hash()); err == nil {
		return t.Target, true
	}
	return ref.Hash(), true
}

// firstParents returns the commits of c's first-parent history.
func (r *Repo) firstParents(c *object.Commit) map[plumbing.Hash]bool {
	m := map[plumbing.Hash]bool{}
	for c != nil && !m[c.Hash] {
		m[c.Hash] = true
		if len(c.ParentHashes) == 0 {
			break
		}
		p, err := r.r.CommitObject(c.ParentHashes[0])
		if err != nil {
			break
		}
		c = p
	}
	return m
}

// GenTags returns the tag names generation genText may carry, in order:
// TagPrefix+genText, then -r1, -r2, ... as long as they exist (a number
// re-used after a resume gets the next free one). The last is the newest
// commit of that number.
func GenTags(exists func(name string) bool, prefix, genText string) []string {
	out := []string{prefix + genText}
	for k := 1; exists(reuseTag(prefix+genText, k)); k++ {
		out = append(out, reuseTag(prefix+genText, k))
	}
	return out
}

// reuseTag returns the k-th re-use name of tag base (k >= 1): base-rK;
// base itself for k = 0.
func reuseTag(base string, k int) string {
	if k == 0 {
		return base
	}
	return base + "-r" + strconv.Itoa(k)
}

// reuseOf reports whether name is base or one of its re-use names
// base-rK (reuseTag).
func reuseOf(name, base string) bool {
	if name == base {
		return true
	}
	k, ok := strings.CutPrefix(name, base+"-r")
	return ok && k != "" && k[0] != '0' && len(k) <= 9 && strings.TrimLeft(k, "0123456789") == ""
}

// LiveGeneration returns the header of generation gen as its commit on
// the branch's live chain records it (root trailers, checked with
// wtxt.Root.Check): the chain values a run resumed from gen continues
// from. ErrResume when gen is not on the live chain. A generation Retain
// cut from this repository is fetched from the remote first when
// Config.History is set (liveGenFetch).
func (r *Repo) LiveGeneration(ctx context.Context, gen uint64) (*Header, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	head, err := r.head()
	if err != nil {
		return nil, err
	}
	if head == nil {
		return nil, fmt.Errorf("%w: generation %06d: branch %s has no commits", ErrResume, gen, r.cfg.Branch)
	}
	c, _, err := r.liveGenFetch(ctx, head.commit, gen)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, fmt.Errorf("%w: generation %06d is not on the live chain of branch %s", ErrResume, gen, r.cfg.Branch)
	}
	tr := ParseTrailers(c.Message)
	var b strings.Builder
	for i, f := range (wtxt.Root{}).Fields() {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f.Key + "=" + tr[rootTrailers[i]])
	}
	root, err := wtxt.ParseRoot(b.String())
	if err == nil {
		err = root.Check()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: generation %06d, commit %s: trailers: %v", ErrResume, gen, c.Hash, err)
	}
	return &Header{Gen: gen, Root: root}, nil
}
