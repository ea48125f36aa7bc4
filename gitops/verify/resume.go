package verify

import (
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
)

// Resumed runs (docs/FORMAT.md "Resumed runs").
const (
	// CheckResume: a resume record that is inconsistent with the history
	// (its generation not on the live chain, a wrong abandoned range, a
	// tree or root values other than the resumed generation's).
	CheckResume = "resume"
	// ChainResumed: the commit is a resume record; the next generation
	// chains to the generation it names.
	ChainResumed = "resumed"
)

// ResumeInfo describes a resume record in the Report.
type ResumeInfo struct {
	From       string `json:"from"`        // the generation the run restarted from
	FromCommit string `json:"from_commit"` // its commit
	// Abandoned lists the generations the record abandons, as the walk
	// found them (oldest first); their commits stay in the history.
	Abandoned []string `json:"abandoned"`
}

// liveGen is one generation of the live chain walked so far.
type liveGen struct {
	commit plumbing.Hash
	tree   plumbing.Hash
	st     genState
	g      *Generation
}

// forks tracks the live chain through the walk: a resume record pops the
// generations it abandons.
type forks struct {
	live      []liveGen
	abandoned map[plumbing.Hash]bool
}

// commitEntry checks one commit of the walk: a resume record or a
// generation.
func (v *verifier) commitEntry(c *object.Commit, prev *genState, anchor bool) (*Generation, *genState, error) {
	if v.forks == nil {
		v.forks = &forks{abandoned: map[plumbing.Hash]bool{}}
	}
	rec, isRec, perr := gitops.ParseResumeRecord(c)
	if !isRec {
		g, st, err := v.generation(c, prev, anchor)
		if err == nil && st != nil {
			v.forks.live = append(v.forks.live, liveGen{commit: c.Hash, tree: c.TreeHash, st: *st, g: g})
		}
		return g, st, err
	}
	return v.resumeRecord(c, rec, perr, prev)
}

// resumeRecord checks a resume record: signed by a trusted key, its
// resumed-from commit on the live chain walked so far, its abandoned range
// exactly the live generations above it, its tree and root trailers that
// generation's. The generations it abandons are marked in the Report; the
// walk continues from the resumed-from generation's chain values.
func (v *verifier) resumeRecord(c *object.Commit, rec *gitops.ResumeRecord, perr error, prev *genState) (*Generation, *genState, error) {
	tr := gitops.ParseTrailers(c.Message)
	g := &Generation{Commit: c.Hash.String(), Gen: tr[gitops.TrailerGen], Failures: []Failure{}, Delta: "none", CommitSignature: SigAbsent, TagSignature: SigAbsent, Signature: wtxt.SigAbsent, Chain: ChainBroken}
	x := &gv{g: g, dir: v.o.Path}
	if len(c.ParentHashes) != 1 {
		x.fail("", 0, CheckHistory, "resume record with %d parents: its one parent is the abandoned head", len(c.ParentHashes))
	}
	raw, err := readRaw(v.r.Storer, plumbing.CommitObject, c.Hash)
	if err != nil {
		return nil, nil, fmt.Errorf("verify: read commit %s: %w", c.Hash, err)
	}
	g.CommitSignature, g.Signer = v.objectSignature(x, CheckCommitSig, "resume record commit", raw, splitCommitSignature)
	if perr != nil {
		x.fail("", 0, CheckResume, "%v", perr)
		return g, nil, nil
	}
	g.Resume = &ResumeInfo{From: rec.FromText, FromCommit: rec.FromCommit.String(), Abandoned: []string{}}
	x.note("resume record: the run restarted from generation %s (commit %.12s); the generations above it are abandoned, their commits kept", rec.FromText, rec.FromCommit)
	fk := v.forks
	i := len(fk.live) - 1
	for i >= 0 && fk.live[i].commit != rec.FromCommit {
		i--
	}
	if i < 0 {
		x.fail("", 0, CheckResume, "resumes from generation %s at commit %s, which is not on the live chain verified before it (an undeclared fork, or a record naming an abandoned generation)", rec.FromText, rec.FromCommit)
		return g, nil, nil
	}
	from := fk.live[i]
	var abandoned []liveGen
	abandoned = append(abandoned, fk.live[i+1:]...)
	if len(abandoned) == 0 || prev == nil {
		x.fail("", 0, CheckResume, "abandons nothing: generation %s is the head it follows", rec.FromText)
		return g, nil, nil
	}
	if lo, hi := abandoned[0].st.genText, abandoned[len(abandoned)-1].st.genText; lo != rec.AbandonedFirst || hi != rec.AbandonedLast {
		x.fail("", 0, CheckResume, "trailer %s %s..%s, but the live generations above %s are %s..%s", gitops.TrailerAbandoned, rec.AbandonedFirst, rec.AbandonedLast, rec.FromText, lo, hi)
	}
	if c.TreeHash != from.tree {
		x.fail("", 0, CheckResume, "tree %s is not generation %s's tree %s (a record reads as the generation it resumes from)", c.TreeHash, rec.FromText, from.tree)
	}
	want := map[string]string{gitops.TrailerGen: from.st.genText, gitops.TrailerSHA256All: from.st.sha256All, gitops.TrailerMerkleThis: from.st.merkleThis}
	for k, w := range want {
		if tr[k] != w {
			x.fail("", 0, CheckTrailer, "trailer %s: %s, but generation %s has %s", k, tr[k], rec.FromText, w)
		}
	}
	for _, a := range abandoned {
		fk.abandoned[a.commit] = true
		a.g.Abandoned = true
		a.g.Notes = append(a.g.Notes, fmt.Sprintf("abandoned: the run resumed from generation %s (resume record %.12s)", rec.FromText, c.Hash))
		g.Resume.Abandoned = append(g.Resume.Abandoned, a.st.genText)
	}
	fk.live = fk.live[:i+1]
	g.TS, g.SHA256All, g.MerkleThis = tr[gitops.TrailerTS], from.st.sha256All, from.st.merkleThis
	if g.OK() {
		g.Chain = ChainResumed
	}
	st := from.st
	st.file, st.size = "", 0 // its working copy is gone; a delta on it is not applied
	return g, &st, nil
}

// tagFor returns the tag of generation genText's commit c: the plain name,
// or, for a number re-used after a resume, the -rK tag that names c when
// every earlier one names an abandoned generation of this walk.
func (v *verifier) tagFor(c *object.Commit, genText string) string {
	names := gitops.GenTags(func(n string) bool {
		_, err := v.r.Storer.Reference(plumbing.NewTagReferenceName(n))
		return err == nil
	}, v.o.TagPrefix, genText)
	for k, n := range names {
		if target, ok := v.tagTarget(n); ok && target == c.Hash {
			for _, earlier := range names[:k] {
				if t, ok := v.tagTarget(earlier); !ok || v.forks == nil || !v.forks.abandoned[t] {
					return names[0] // checkTag reports the plain name's holder
				}
			}
			return n
		}
	}
	return names[0]
}

func (v *verifier) tagTarget(name string) (plumbing.Hash, bool) {
	ref, err := v.r.Storer.Reference(plumbing.NewTagReferenceName(name))
	if err != nil {
		return plumbing.ZeroHash, false
	}
	t, err := object.GetTag(v.r.Storer, ref.Hash())
	if err != nil {
		return plumbing.ZeroHash, false
	}
	return t.Target, true
}
