package verify

import (
	"bufio"
	"os"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
)

// Verification after retention (docs/LAYOUT.md "Retention"): `snapd gc
// --remote --keep K` deletes the manifests of all but the newest K
// generations and the registry's garbage collection then frees the blobs
// only they referenced. Such a generation's signed skeleton is still in
// Git; its tensor bytes are not in the registry any more.

// Generation.Content values.
const (
	// ContentPresent: the content was found (in Git, or the registry's
	// gen-NNNNNN manifest for the skeleton layout) and checked; its
	// failures, if any, are the generation's.
	ContentPresent = "present"
	// ContentCollected: skeleton layout, the registry answered 404 for
	// the gen-NNNNNN manifest and a later generation of the walk has its
	// content present, as retention leaves it. The skeleton is checked
	// alone (VerifySkeleton); not a failure unless
	// Options.RequireContent.
	ContentCollected = "collected"
	// ContentMissing: the manifest is not found (404) but no later
	// generation of the walk has its content present. Retention always
	// keeps the newest generation's, so this is not retention: a failure
	// (CheckRegistry).
	ContentMissing = "missing"
)

// VerifySkeleton is the Generation.Verification of a collected
// generation: every skeleton line (every ch line present and
// well-formed, every seg line against the ch lines it covers), the
// header's Merkle value and its signature by a trusted key; no tensor
// byte is read. The commit and tag signatures, the trailers,
// generation.txt and the chain are checked as for every generation.
const VerifySkeleton = "skeleton"

// collectedInfo is what a collected generation's failure needs should no
// later generation's content turn up.
type collectedInfo struct {
	file string // the skeleton's repository path
	err  error  // the registry's answer
}

// collectedSkeleton checks a generation whose gen-NNNNNN manifest the
// registry does not have (manifestErr wraps oci.ErrManifestNotFound): the
// skeleton alone, as VerifySkeleton says. With Options.RequireContent it
// is a failure; otherwise holder decides between ContentCollected and
// ContentMissing once the walk shows whether a later generation's content
// is present.
func (v *verifier) collectedSkeleton(x *gv, name, skelPath string, h *wtxt.Header, manifestErr error) {
	g := x.g
	g.Verification, g.Content = VerifySkeleton, ContentCollected
	if f, err := os.Open(skelPath); err != nil {
		x.fail(name, 0, CheckObject, "working copy: %v", err)
	} else {
		segs, _, err := wtxt.CheckSkeletonSample(v.ctx, bufio.NewReaderSize(f, 1<<20), name, v.o.Registry, func(int, wtxt.Segment) bool { return false })
		f.Close()
		if err != nil {
			v.failWTXT(x, name, err, 0)
		}
		g.Segments = len(segs)
	}
	v.checkHeaderOnly(x, name, h)
	if v.o.RequireContent {
		x.fail(name, 0, CheckRegistry, "%v: the content was collected (retention) and --require-content asks for it", manifestErr)
		return
	}
	g.collected = &collectedInfo{file: x.fileOf(name), err: manifestErr}
	x.note("content collected: %s is not in the registry (retention); the signed skeleton was checked alone (every line and ch hash, the header's Merkle value and signature), no tensor byte was read", oci.Tag(h.Gen))
}

// holder hands generations to the Report (and Options.OnGeneration) in
// walk order, holding back a collected generation, and every one after
// it, until a later generation's content is present — then they are
// final — or the walk ends, when the collected ones become
// ContentMissing failures.
type holder struct {
	rep  *Report
	on   func(*Generation)
	held []*Generation
}

func (h *holder) add(g *Generation) {
	h.held = append(h.held, g)
	if g.Content == ContentPresent || g.collected == nil && len(h.held) == 1 {
		h.flush()
	}
}

// end resolves what is still held: no later content is present.
func (h *holder) end() {
	for _, g := range h.held {
		if g.collected == nil {
			continue
		}
		g.Content = ContentMissing
		g.Failures = append(g.Failures, Failure{Commit: g.Commit, Gen: g.Gen, File: g.collected.file, Check: CheckRegistry,
			Message: g.collected.err.Error() + ", and no later generation's content is in the registry: retention keeps the newest generations' content, so this is not retention"})
	}
	h.flush()
}

func (h *holder) flush() {
	for _, g := range h.held {
		g.collected = nil
		switch g.Content {
		case ContentPresent:
			h.rep.ContentPresent++
		case ContentCollected:
			h.rep.ContentCollected++
		}
		h.rep.Generations = append(h.rep.Generations, g)
		h.rep.Failures += len(g.Failures)
		if h.on != nil {
			h.on(g)
		}
	}
	h.held = h.held[:0]
}
