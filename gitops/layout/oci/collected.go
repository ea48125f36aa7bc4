package oci

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// ErrManifestNotFound: the registry answered 404 for a generation's
// manifest tag gen-NNNNNN. Retention (GC, then the registry's own garbage
// collection) leaves exactly that: the manifest is deleted first, the
// blobs only it referenced go later. It wraps ErrNotFound.
var ErrManifestNotFound = fmt.Errorf("generation manifest %w", ErrNotFound)

// Collected reports whether generation gen's content was removed from the
// repository by retention: its manifest tag is not there (404). tag is
// the generation's tag as its generation.txt records it (oci_tag), ""
// when unknown: then gen-NNNNNN, and, since a number a resumed run
// re-used has gen-NNNNNN-rK tags too and which one the generation is
// cannot be told, any tag of the number still there means "not
// collected". A manifest that is there gives false; any other answer
// (401, 5xx, a registry that cannot be reached) is an error, never
// "collected".
func (r *Repository) Collected(ctx context.Context, gen, tag string) (bool, error) {
	exact := tag != ""
	if !exact {
		tag = Tag(gen)
	}
	_, err := r.repo.Resolve(ctx, tag)
	switch {
	case err == nil:
		return false, nil
	case !isNotFound(err):
		return false, fmt.Errorf("oci %s: resolve %s: %w", r.name, tag, err)
	case exact:
		return true, nil
	}
	// Tags sort after gen-NNNNNN from gen-NNNNNN-r1 on: list from there.
	other := false
	err = r.repo.Tags(ctx, tag, func(tags []string) error {
		for _, t := range tags {
			if IsTagOf(t, gen) {
				other = true
			}
			if !strings.HasPrefix(t, tag) {
				return errStopTags
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopTags) {
		return false, fmt.Errorf("oci %s: list tags after %s: %w", r.name, tag, err)
	}
	return !other, nil
}

// errStopTags ends a tag listing early.
var errStopTags = errors.New("stop listing tags")

// CollectedError is an assembly of a generation whose content retention
// removed (Collected): a blob was not found and neither is the
// generation's manifest. It is not damage: the signed skeleton stays in
// the ledger (snapd verify-repo verifies it), only the tensor bytes are
// gone. It wraps the assembler's error (wtxt.ErrBlobNotFound).
type CollectedError struct {
	Repository string // HOST[:PORT]/NAME
	Gen        string // the skeleton's gen, as written (DEC6)
	// Skeleton, when set, says what was established about the skeleton
	// (e.g. "its signed skeleton verifies"); it ends the message.
	Skeleton string
	Err      error
}

func (e *CollectedError) Error() string {
	n, ok := GenNumber(e.Gen)
	gen := e.Gen
	if ok {
		gen = fmt.Sprint(n)
	}
	msg := fmt.Sprintf("content collected: generation %s's tensor bytes were removed from %s by retention (its manifest %s is gone and a blob with it)", gen, e.Repository, Tag(e.Gen))
	if e.Skeleton != "" {
		msg += "; " + e.Skeleton
	}
	return msg
}

func (e *CollectedError) Unwrap() error { return e.Err }

// ExplainMissing returns err as a *CollectedError when it is an assembly
// of generation gen (tag: its recorded oci_tag, or "") that stopped at a
// blob the registry does not have (wtxt.ErrBlobNotFound) and the
// generation's manifest is gone too (Collected); otherwise err unchanged
// (a blob missing under a manifest that is still there is damage, not
// retention). A failure to ask is joined to err.
func (r *Repository) ExplainMissing(ctx context.Context, gen, tag string, err error) error {
	if err == nil || gen == "" || !errors.Is(err, wtxt.ErrBlobNotFound) {
		return err
	}
	gone, qerr := r.Collected(ctx, gen, tag)
	if qerr != nil {
		return errors.Join(err, qerr)
	}
	if !gone {
		return err
	}
	return &CollectedError{Repository: r.name, Gen: gen, Err: err}
}
