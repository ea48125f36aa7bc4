package review

import (
	"testing"
)

func TestIsRankSkeleton(t *testing.T) {
	for p, want := range map[string]bool{
		"snapshots/ranks/rank-00000.skel":  true,
		"snapshots/ranks/rank-01023.skel":  true,
		"ranks/rank-123456.skel":           true,
		"snapshots/ranks/index.ranks":      false,
		"snapshots/ranks/rank-0001.skel":   false,
		"snapshots/ranks/rank-0000x.skel":  false,
		"snapshots/other/rank-00000.skel":  false,
		"snapshots/ranks/rank-00000.skelx": false,
	} {
		if IsRankSkeleton(p) != want || reviewed(p) != (want || p == "snapshots/ranks/index.ranks") {
			t.Errorf("IsRankSkeleton(%q) = %v, reviewed %v, want %v", p, IsRankSkeleton(p), reviewed(p), want)
		}
	}
}
