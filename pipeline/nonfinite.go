package pipeline

import (
	"context"
	"fmt"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt/chunkdiff"
	"github.com/snapd-ml/snapd/pipeline/ring"
)

// nonFiniteBudget bounds the raw bytes of changed chunks checkNonFinite
// decodes per generation (a sparse update is checked whole; a dense update
// of a large model in part, in file order: NaN from a diverging run is
// everywhere, so the first 64 MiB see it).
const nonFiniteBudget = 64 << 20

// checkNonFinite records in it.res.NonFinite the float arrays in which the
// generation just written (plaintext target) makes elements NaN or ±Inf
// that the chain head (plaintext base) did not have. Only the chunks that
// changed are decoded, at most nonFiniteBudget bytes. A failure is
// logged, not fatal: the generation itself is fine.
func (d *Daemon) checkNonFinite(ctx context.Context, it *item, base, target string) {
	rep, err := chunkdiff.NonFiniteIntroduced(ctx, base, target, nonFiniteBudget)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("could not check the generation for new NaN/Inf", "gen", it.rec.Gen, "error", err)
		}
		return
	}
	if rep.Partial() {
		d.log.Info("NaN/Inf check of the changed chunks was partial", "gen", it.rec.Gen, "checked_bytes", rep.CheckedBytes, "changed_bytes", rep.ChangedBytes)
	}
	it.res.NonFinite = rep.Arrays
}

// checkNonFiniteAsync runs checkNonFinite of g's plaintext WTXT against
// base in a goroutine once g's WTXT is committed (a failed commit skips
// it: the generation fails anyway), so that it overlaps the delta. The
// returned func waits for it; it.res.NonFinite is set when it returns. The
// goroutine writes only it.res.NonFinite.
func (d *Daemon) checkNonFiniteAsync(ctx context.Context, it *item, g *ring.Gen, base string) (wait func()) {
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
			d.checkNonFinite(ctx, it, base, target)
		}
	}()
	return func() { <-done }
}

// nonFiniteSummary is "w (3 NaN, 0 Inf), b (0 NaN, 1 Inf)", at most 8
// arrays.
func nonFiniteSummary(nf []chunkdiff.NonFiniteArray) string {
	var parts []string
	for i, a := range nf {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("… %d arrays in all", len(nf)))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%d NaN, %d Inf)", a.Array, a.NewNaN, a.NewInf))
	}
	return strings.Join(parts, ", ")
}
