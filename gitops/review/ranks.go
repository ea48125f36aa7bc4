package review

import (
	"path"
	"strings"
)

// Multi-rank generations (store/oci/ranks, docs/FORMAT.md §7): the
// generation commit holds snapshots/ranks/index.ranks and one skeleton per
// rank, snapshots/ranks/rank-RRRRR.skel. Each rank skeleton is reviewed as
// a skeleton (skeleton.go): changed chunks and rows per array from its ch
// lines, element numbers when Options.Registry is set, line comments on
// its changed ch lines. A rank part's merkle_prev is the job's chain id,
// not the previous generation's part, so the per-file chain check is
// skipped for rank skeletons; the generation's chain lives in the index.

// IsRankSkeleton reports whether a repository path is a rank skeleton of a
// multi-rank generation: a file named rank-NNNNN.skel (five or more
// decimal digits) in a directory named ranks.
func IsRankSkeleton(p string) bool {
	dir, file := path.Split(p)
	if path.Base(strings.TrimSuffix(dir, "/")) != "ranks" {
		return false
	}
	digits, ok := strings.CutPrefix(file, "rank-")
	if !ok {
		return false
	}
	digits, ok = strings.CutSuffix(digits, ".skel")
	if !ok || len(digits) < 5 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
