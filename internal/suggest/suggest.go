// Package suggest finds the known name a mistyped one was probably meant
// to be, for "did you mean ...?" hints on flags and configuration keys.
package suggest

import "strings"

// Nearest returns the candidate closest to typed, or "" when none is close
// enough to be a plausible typo. A candidate that typed is a prefix of (or
// that is a prefix of typed) wins when it is the only such candidate;
// otherwise the candidate with the smallest edit distance wins if that
// distance is at most a third of typed's length (at least 1, at most 3).
// Ties go to the earlier candidate, so the result is deterministic for a
// given candidate order.
func Nearest(typed string, candidates []string) string {
	if typed == "" {
		return ""
	}
	best, bestD := "", -1
	limit := min(max(len(typed)/3, 1), 3)
	for _, c := range candidates {
		if c == typed || c == "" {
			continue
		}
		d := Distance(typed, c)
		if d <= limit && (bestD < 0 || d < bestD) {
			best, bestD = c, d
		}
	}
	if best != "" {
		return best
	}
	var prefix []string
	for _, c := range candidates {
		if c != typed && len(typed) >= 3 && (strings.HasPrefix(c, typed) || strings.HasPrefix(typed, c) && len(c) >= 3) {
			prefix = append(prefix, c)
		}
	}
	if len(prefix) == 1 {
		return prefix[0]
	}
	return ""
}

// Distance is the Levenshtein distance between a and b (insertions,
// deletions and substitutions of bytes each cost 1; a transposition of
// two adjacent bytes also costs 1).
func Distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
