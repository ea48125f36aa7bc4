package verify

import (
	"errors"
	"os"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/snapshot"
)

// The Snapd-Meta trailer (gitops.TrailerMeta) is a copy of the metadata
// inside the generation: the attributes document's "meta" member
// (docs/FORMAT.md §9), covered by the WTXT's hashes and signature. Both
// absent, or equal; a difference fails CheckTrailer naming the keys,
// never the values.

// checkMeta checks a plaintext generation's Snapd-Meta trailer against
// the metadata inside its WTXT (checkPlain verified the WTXT; the
// segments layout's WTXT is the one layout.ReadSegments rebuilt).
func (v *verifier) checkMeta(x *gv, name string, wf *materialized, tr map[string]string) {
	trailer, terr := trailerMeta(x, tr)
	f, err := os.Open(wf.path)
	if err != nil {
		x.fail(name, 0, CheckObject, "working copy: %v", err)
		return
	}
	defer f.Close()
	inside, err := wtxt.ReadUserMeta(v.ctx, name, f, wf.size)
	if err != nil {
		var we *wtxt.Error
		if errors.As(err, &we) {
			return // checkPlain reported the file's failures
		}
		x.fail(name, 0, CheckTrailer, "metadata: %v", err)
		return
	}
	if terr == nil {
		compareMeta(x, trailer, inside, "the metadata inside the WTXT")
	}
}

// checkSkeletonMeta checks a skeleton-layout generation's Snapd-Meta
// trailer against the metadata of the WTXT its skeleton was split from.
// The skeleton holds no chunk bytes: it proves whether there is an
// attributes document (its arr line) and the document's hashes, so
// without one the trailer must be absent, and with one the document is
// read from the registry through the skeleton
// (wtxt.ReadSkeletonUserMeta: only that array's blobs, every chunk hash
// and blob digest checked). For a collected generation (collected) whose
// document's blob the registry no longer has, the trailer is not checked
// (a note; retention, not a failure); a blob other generations share
// survives retention and is checked. A read failure the content checks already
// reported (same file, line and check) is not reported again.
func (v *verifier) checkSkeletonMeta(x *gv, name, skelPath string, tr map[string]string, collected bool) {
	trailer, terr := trailerMeta(x, tr)
	f, err := os.Open(skelPath)
	if err != nil {
		x.fail(name, 0, CheckObject, "working copy: %v", err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		x.fail(name, 0, CheckObject, "working copy: %v", err)
		return
	}
	inside, err := wtxt.ReadSkeletonUserMeta(v.ctx, name, f, st.Size(), v.o.Registry)
	var we *wtxt.Error
	switch {
	case err == nil:
	case v.ctx.Err() != nil:
		return // the walk ends with the cancellation
	case collected && errors.Is(err, wtxt.ErrBlobNotFound):
		x.note("metadata not checked (content collected): the attributes document's blob (array %s) is not in the registry, so the %s trailer cannot be compared with it",
			snapshot.AttrsArrayName, gitops.TrailerMeta)
		return
	case errors.As(err, &we):
		before := len(x.g.Failures)
		v.failWTXT(x, name, err, 0)
		if added := x.g.Failures[before:]; len(added) == 1 && x.reported(added[0], before) {
			x.g.Failures = x.g.Failures[:before]
		}
		return
	default:
		v.failWTXT(x, name, err, 0)
		return
	}
	if terr == nil {
		compareMeta(x, trailer, inside, "the metadata of the generation (its attributes document, read through the skeleton)")
	}
}

// trailerMeta parses the Snapd-Meta trailer, failing CheckTrailer when it
// is malformed.
func trailerMeta(x *gv, tr map[string]string) (snapshot.UserMeta, error) {
	m, err := gitops.MetaOfTrailers(tr)
	if err != nil {
		x.fail("", 0, CheckTrailer, "%v", err)
	}
	return m, err
}

// compareMeta fails CheckTrailer when the trailer's metadata is not
// inside's, naming the keys that differ, never a value.
func compareMeta(x *gv, trailer, inside snapshot.UserMeta, what string) {
	if trailer.Equal(inside) {
		return
	}
	x.fail("", 0, CheckTrailer, "trailer %s disagrees with %s (keys %s)", gitops.TrailerMeta, what, metaDiffKeys(trailer, inside))
}

// metaDiffKeys lists the keys in which the trailer's metadata and
// inside's differ ("a, b"), never a value.
func metaDiffKeys(trailer, inside snapshot.UserMeta) string {
	return strings.Join(snapshot.DiffUserMetaKeys(inside, trailer), ", ")
}

// reported reports whether one of the first n failures has f's file,
// line and check.
func (x *gv) reported(f Failure, n int) bool {
	for _, e := range x.g.Failures[:n] {
		if e.File == f.File && e.Line == f.Line && e.Check == f.Check {
			return true
		}
	}
	return false
}
