package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/chunkdiff"
	"github.com/snapd-ml/snapd/pipeline/ring"
)

// The NaN/±Inf check: it.res.NonFinite lists the float arrays in which
// the generation just written makes elements NaN or ±Inf that the chain
// head did not have (chunkdiff's "introduced": element by element).
//
// The encoder counts every float array's NaN and ±Inf elements as it
// hashes them (wtxt.ArrayInfo); the chain state keeps the head's counts
// (ChainState.Held). From the two sets of counts
// (chunkdiff.NonFiniteFromCounts) the check needs no file for an array
// that holds NaN/Inf in one generation only — a healthy run's, and the
// first NaN of a diverging one, whatever the model's size. Only arrays
// holding some in both, and every array when the head's counts are not
// known (a state file from before they were kept, a resume's base), are
// compared by reading the changed chunks of both plaintext WTXT files
// (chunkdiff.NonFiniteIntroducedIn, within nonFiniteBudget), beside the
// delta once the WTXT is committed.

// nonFiniteBudget bounds the raw bytes of changed chunks the file
// comparison decodes per generation (a sparse update is checked whole; a
// dense update of a large model in part, in file order: NaN from a
// diverging run is everywhere, so the first 64 MiB see it).
const nonFiniteBudget = 64 << 20

// maxHeldBytes bounds the NaN/Inf counts kept in the chain state (about
// their JSON size: the state file is read whole, at most maxStateBytes).
const maxHeldBytes = 256 << 10

// maxNonFiniteBytes bounds the list of arrays in which the chain head
// introduced NaN/Inf kept in the chain state (ChainState.NonFinite, about
// its indented JSON size), as maxHeldBytes bounds the counts: together
// they stay well within maxStateBytes.
const maxNonFiniteBytes = 256 << 10

// nonFiniteEntryBytes is the most an entry of ChainState.NonFinite takes
// in the state file besides its array name (indented JSON, two int64s).
const nonFiniteEntryBytes = 112

// capNonFinite returns the first arrays of nf that fit maxNonFiniteBytes
// and how many were left out.
func capNonFinite(nf []chunkdiff.NonFiniteArray) (kept []chunkdiff.NonFiniteArray, more int) {
	n := 0
	for i, a := range nf {
		if n += len(a.Array) + nonFiniteEntryBytes; n > maxNonFiniteBytes {
			return nf[:i:i], len(nf) - i
		}
	}
	return nf, 0
}

// rereadNonFinite is chunkdiff.NonFiniteIntroducedIn's signature: the
// NaN/Inf check that reads both WTXT files. Deps.rereadNonFinite (tests)
// replaces it to see whether, and for which arrays, it ran.
type rereadNonFinite func(ctx context.Context, base, head string, arrays []string, maxBytes int64) (*chunkdiff.NonFiniteReport, error)

// heldNonFinite is what the chain state keeps of an encode's counts: the
// arrays holding NaN/Inf, or nil (not known) when their list would be
// longer than maxHeldBytes.
func heldNonFinite(arrays []wtxt.ArrayInfo) *HeldNonFinite {
	held := chunkdiff.HeldNonFinite(arrays)
	n := 0
	for _, a := range held {
		if n += len(a.Array) + 64; n > maxHeldBytes {
			return nil
		}
	}
	return &HeldNonFinite{Arrays: held}
}

// nonFiniteFromCounts sets it.res.NonFinite from the encoder's counts
// (res) against the chain head's (head.Held; head.Gen 0: no base) and
// returns the arrays left to the file comparison. ok is false when the
// head's counts are not known: then every array is.
func nonFiniteFromCounts(it *item, head *ChainState, res *wtxt.Result) (recheck []string, ok bool) {
	it.res.NonFinite = nil // a retried build starts over
	if head.Gen != 0 && head.Held == nil {
		return nil, false
	}
	var base []chunkdiff.NonFiniteCount
	if head.Gen != 0 {
		base = head.Held.Arrays
	}
	it.res.NonFinite, recheck = chunkdiff.NonFiniteFromCounts(base, chunkdiff.HeldNonFinite(res.Arrays))
	return recheck, true
}

// checkNonFinite compares the generation just written (plaintext target)
// with the chain head (plaintext base) for arrays (nil: every array),
// decoding only changed chunks, at most nonFiniteBudget bytes, and adds
// what it finds to it.res.NonFinite (in WTXT order). A failure is
// logged, not fatal: the generation itself is fine.
func (d *Daemon) checkNonFinite(ctx context.Context, it *item, base, target string, arrays []string) {
	reread := d.deps.rereadNonFinite
	if reread == nil {
		reread = chunkdiff.NonFiniteIntroducedIn
	}
	rep, err := reread(ctx, base, target, arrays, nonFiniteBudget)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("could not check the generation for new NaN/Inf", "gen", it.rec.Gen, "error", err)
		}
		return
	}
	if rep.Partial() {
		d.log.Info("NaN/Inf check of the changed chunks was partial", "gen", it.rec.Gen, "checked_bytes", rep.CheckedBytes, "changed_bytes", rep.ChangedBytes)
	}
	if len(rep.Arrays) == 0 {
		return
	}
	nf := append(it.res.NonFinite, rep.Arrays...)
	slices.SortFunc(nf, func(a, b chunkdiff.NonFiniteArray) int { return strings.Compare(a.Array, b.Array) })
	it.res.NonFinite = nf
}

// checkNonFiniteAsync runs checkNonFinite of g's plaintext WTXT against
// base for arrays in a goroutine once g's WTXT is committed (a failed
// commit skips it: the generation fails anyway), so that it overlaps the
// delta. The returned func waits for it; it.res.NonFinite is complete
// when it returns. The goroutine writes only it.res.NonFinite.
func (d *Daemon) checkNonFiniteAsync(ctx context.Context, it *item, g *ring.Gen, base string, arrays []string) (wait func()) {
	done := make(chan struct{})
	committed, commitErr := g.CommitDone()
	target := g.PlainPath()
	go func() {
		defer close(done)
		select {
		case <-committed:
		case <-ctx.Done():
			return
		}
		if commitErr() == nil {
			d.checkNonFinite(ctx, it, base, target, arrays)
		}
	}()
	return func() { <-done }
}

// nonFiniteSummary is "w (3 NaN, 0 Inf), b (0 NaN, 1 Inf)", at most 8
// arrays.
func nonFiniteSummary(nf []chunkdiff.NonFiniteArray) string {
	return nonFiniteSummaryMore(nf, 0)
}

// nonFiniteSummary is the summary of the arrays in which the chain head
// introduced NaN/Inf, counting those the state file left out.
func (c *ChainState) nonFiniteSummary() string {
	return nonFiniteSummaryMore(c.NonFinite, c.NonFiniteMore)
}

// nonFiniteSummaryMore is nonFiniteSummary of nf and more arrays not
// listed: "w (3 NaN, 0 Inf), … and 12 more (13 arrays in all)".
func nonFiniteSummaryMore(nf []chunkdiff.NonFiniteArray, more int) string {
	const shown = 8
	var parts []string
	for i, a := range nf {
		if i == shown {
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%d NaN, %d Inf)", a.Array, a.NewNaN, a.NewInf))
	}
	if all := len(nf) + max(more, 0); all > len(parts) {
		parts = append(parts, fmt.Sprintf("… and %d more (%d arrays in all)", all-len(parts), all))
	}
	return strings.Join(parts, ", ")
}
