package oci

import (
	"context"
	"slices"
	"sort"

	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
)

// GCRanks deletes the rank manifests (tags gen-NNNNNN.rank-R) of every
// generation older than the oldest of the newest keep committed
// generations (committed: the ledger's generation numbers). Rank tags of
// that generation and newer — kept, pending or not yet committed — are
// never touched; older ones (committed, skipped or abandoned) are. The
// registry's own garbage collection then frees the blobs. With dryRun
// nothing is deleted. It returns the tags removed (or that would be),
// oldest first.
func GCRanks(ctx context.Context, repo *Repository, committed []uint64, keep int, dryRun bool) ([]string, error) {
	if keep < 1 {
		return nil, wranks.Fail("", 0, -1, wranks.CheckGen, "keep must be >= 1 (got %d)", keep)
	}
	c := slices.Clone(committed)
	slices.Sort(c)
	if len(c) <= keep {
		return nil, nil
	}
	cutoff := c[len(c)-keep]
	tags, err := repo.Tags(ctx)
	if err != nil {
		return nil, err
	}
	type old struct {
		gen  uint64
		rank int
		tag  string
	}
	var del []old
	for _, t := range tags {
		g, r, ok := ParseRankTag(t)
		if !ok {
			continue
		}
		if n, _ := wranks.ParseGen(g); n < cutoff {
			del = append(del, old{n, r, t})
		}
	}
	sort.Slice(del, func(i, j int) bool {
		if del[i].gen != del[j].gen {
			return del[i].gen < del[j].gen
		}
		return del[i].rank < del[j].rank
	})
	var out []string
	for _, d := range del {
		if !dryRun {
			if err := repo.DeleteManifest(ctx, d.tag); err != nil {
				return out, err
			}
		}
		out = append(out, d.tag)
	}
	return out, nil
}
