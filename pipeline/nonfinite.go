package pipeline

import (
	"context"
	"fmt"
	"strings"

	"github.com/snapd-ml/snapd/gitops/review"
)

// checkNonFinite records in it.res.NonFinite the float arrays in which the
// generation just written (plaintext target) makes elements NaN or ±Inf
// that the chain head (plaintext base) did not have. Only the chunks the
// delta found changed are decoded. A failure is logged, not fatal: the
// generation itself is fine.
func (d *Daemon) checkNonFinite(ctx context.Context, it *item, base, target string) {
	nf, err := review.NonFiniteIntroduced(ctx, base, target)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("could not check the generation for new NaN/Inf", "gen", it.rec.Gen, "error", err)
		}
		return
	}
	it.res.NonFinite = nf
}

// nonFiniteSummary is "w (3 NaN, 0 Inf), b (0 NaN, 1 Inf)", at most 8
// arrays.
func nonFiniteSummary(nf []review.NonFiniteArray) string {
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
