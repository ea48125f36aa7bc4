package review

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// Reviews after retention (docs/FORMAT.md §6 "Retention"): `snapd gc
// --remote --keep K` deletes the manifests of all but the newest K
// generations and the registry's garbage collection frees the blobs only
// they referenced, so an older generation's skeleton no longer
// assembles. When the registry says so (Retention: the generation's
// manifest is gone), the version is "collected", not damaged: the review
// keeps every check the skeletons and the surviving bytes allow — the
// changed chunks and rows per array from the ch lines, the head's
// signature, Merkle value and chain from its header, the head's full
// verification when its content is present, the metadata where its
// document survives — says per array that the rows cannot be compared,
// and is a COMMENT (a note, never a problem by itself). An assembly that
// stops at a missing blob while the manifest is still there stays a
// failure, as before.

// Retention is implemented by a Registry (Options.Registry) that can tell
// content collected by retention from damage, as *oci.Repository does:
// Collected reports whether the manifest of generation gen (as written)
// is gone (404): the one tagged tag, or with tag "" gen-NNNNNN and every
// re-use tag of the number; any other answer is an error.
type Retention interface {
	Collected(ctx context.Context, gen, tag string) (bool, error)
}

// collectedSide is a version whose content retention collected.
type collectedSide struct {
	side string // "base" or "head"
	gen  string // its generation, as written
}

// collectedOf reports whether err, the assembly of the local skeleton src
// (side "base" or "head") of the file at path, failed because retention
// collected the generation: a blob is not found (wtxt.ErrBlobNotFound)
// and reg, a Retention, says the generation's manifest is gone. Any doubt
// (reg cannot tell, the skeleton's header does not parse, the registry's
// answer is an error) is false: the assembly failure is reported as it
// is. A rank part (IsRankSkeleton) is never taken as collected: its
// manifest is tagged per rank, not gen-NNNNNN.
func collectedOf(ctx context.Context, reg wtxt.BlobSource, path, src, side string, err error) (collectedSide, bool) {
	r, ok := reg.(Retention)
	if !ok || IsRankSkeleton(path) || !errors.Is(err, wtxt.ErrBlobNotFound) {
		return collectedSide{}, false
	}
	h, herr := skeletonHeader(src)
	if herr != nil {
		return collectedSide{}, false
	}
	if gone, qerr := r.Collected(ctx, h.Gen, ""); qerr != nil || !gone {
		return collectedSide{}, false
	}
	return collectedSide{side: side, gen: h.Gen}, true
}

// skeletonHeader reads the header of the local skeleton file p.
func skeletonHeader(p string) (*wtxt.Header, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	first, err := br.ReadString('\n')
	if err != nil || first != wtxt.SkeletonMagic+"\n" {
		return nil, fmt.Errorf("%s: not a skeleton", p)
	}
	return wtxt.ReadHeader(br)
}

// collectedWhy is the structure review's reason when a's collected sides
// could not be assembled; a present head is verified in full.
func collectedWhy(a *assembled) structureWhy {
	what := collectedWhat(a.collected)
	return structureWhy{
		noStats: "sha256 changed (content collected: " + what + ", so the rows cannot be compared)",
		tail:    "No element numbers and no thresholds: " + what + " (see below).",
		head:    a.asm.Head,
	}
}

// collectedWhat says which generations' content was collected.
func collectedWhat(cs []collectedSide) string {
	var gens []string
	for _, c := range cs {
		gens = append(gens, fmt.Sprintf("generation %s (%s)", c.gen, c.side))
	}
	return "the content of " + strings.Join(gens, " and of ") + " was collected by retention"
}

// collectedNote is the note of a review of a's collected sides: what
// retention did and what was checked from what remains.
func collectedNote(a *assembled) string {
	var tags []string
	for _, c := range a.collected {
		tags = append(tags, "gen-"+c.gen)
	}
	gone := "retention deleted manifest " + tags[0] + " and the registry freed its blobs"
	if len(tags) > 1 {
		gone = "retention deleted manifests " + strings.Join(tags, ", ") + " and the registry freed their blobs"
	}
	checked := "the head's signature, Merkle value and chain from its skeleton"
	if a.asm.Head != "" {
		checked = "the head in full, the chain from the skeletons"
	}
	return "content collected: " + gone + ". Checked from what remains: " + checked +
		", the changed chunks from the ch lines, the metadata where its document survives."
}

// verifyAssembledHead verifies the head WTXT assembled from the registry
// (path) in full when the base's content was collected: wtxt.Verify with
// every hash, opts.HMACKey's HMACs and the signature rules of reviewFile.
// The chain is sr's (skeletonReport's, from the base skeleton's header):
// its value and chain failures are kept.
func verifyAssembledHead(ctx context.Context, path, name string, opts Options, sr *wtxt.Report) (*wtxt.Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("review: %s: assembled head: %w", name, err)
	}
	defer f.Close()
	rep, verr := wtxt.Verify(ctx, bufio.NewReaderSize(f, 1<<20), wtxt.VerifyOptions{File: name, TrustedKeys: opts.TrustedKeys, HMACKey: opts.HMACKey,
		RequireSignature: opts.RequireSignature, AllowUnsigned: opts.AllowUnsigned})
	var werr *wtxt.Error
	if verr != nil && !errors.As(verr, &werr) {
		return nil, fmt.Errorf("review: %s: verify head: %w", name, verr)
	}
	if rep == nil {
		sr.Failures = append(sr.Failures, werr)
		return sr, nil
	}
	if verr != nil && len(rep.Failures) == 0 {
		rep.Failures = append(rep.Failures, werr)
	}
	rep.Chain = sr.Chain
	for _, fl := range sr.Failures {
		if fl.Check == wtxt.CheckChain {
			rep.Failures = append(rep.Failures, fl)
		}
	}
	return rep, nil
}

// collectedMeta records a's collected generations in fr (with
// collectedNote) and sets fr's metadata: a present version's from its assembled WTXT, a collected
// one's through its skeleton from the registry (a document blob a kept
// generation shares survives retention). When a version's document was
// collected too, a note says its metadata is not compared and no table
// is shown.
func collectedMeta(ctx context.Context, fr *FileResult, in FileInput, a *assembled, opts Options) error {
	fr.Notes = append(fr.Notes, collectedNote(a))
	gens := map[string]string{}
	for _, c := range a.collected {
		fr.Collected = append(fr.Collected, c.gen)
		gens[c.side] = c.gen
	}
	for _, side := range []struct {
		name, skel, wtxt string
		dst              *snapshot.UserMeta
	}{{"base", in.Base, a.asm.Base, &fr.BaseMeta}, {"head", in.Head, a.asm.Head, &fr.HeadMeta}} {
		if side.skel == "" {
			continue
		}
		name := in.Path + "@" + side.name
		var m snapshot.UserMeta
		var err error
		if side.wtxt != "" {
			m, err = readMeta(side.wtxt, func(f *os.File, size int64) (snapshot.UserMeta, error) {
				return wtxt.ReadUserMeta(ctx, name, f, size)
			})
		} else {
			m, err = readMeta(side.skel, func(f *os.File, size int64) (snapshot.UserMeta, error) {
				return wtxt.ReadSkeletonUserMeta(ctx, name, f, size, opts.Registry)
			})
		}
		switch {
		case err == nil:
			*side.dst = m
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, wtxt.ErrBlobNotFound) && gens[side.name] != "":
			fr.metaUnknown = true
			fr.Notes = append(fr.Notes, fmt.Sprintf("metadata of generation %s (%s) not compared: its attributes document was collected with its content", gens[side.name], side.name))
		default:
			fr.metaUnknown = true
			fr.Notes = append(fr.Notes, fmt.Sprintf("metadata of the %s version not read: %v", side.name, err))
		}
	}
	return nil
}

// readMeta opens the local file p and reads its metadata with read.
func readMeta(p string, read func(f *os.File, size int64) (snapshot.UserMeta, error)) (snapshot.UserMeta, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return read(f, st.Size())
}
