package snapshot

import (
	"fmt"
	"strings"
)

// The formatting of a diff for people, shared by `snapd diff` (text and
// Markdown) and the GitHub review, so both say the same thing the same way.

// IsFloatDType reports whether dt (a DType's name) is a floating-point type,
// the ones whose changes get max/mean |Δ| and relative L2 statistics.
func IsFloatDType(dt string) bool {
	d, err := ParseDType(dt)
	return err == nil && d.IsFloat()
}

// FormatShape prints a shape as "(4096×64)"; "()" for a scalar.
func FormatShape(s []int64) string {
	p := make([]string, len(s))
	for i, d := range s {
		p[i] = fmt.Sprint(d)
	}
	return "(" + strings.Join(p, "×") + ")"
}

// FormatRows prints row ranges inclusively ("3-7,12"), at most limit ranges
// (limit <= 0: all), then "… (N ranges)".
func FormatRows(rs []RowRange, limit int) string {
	var parts []string
	for i, r := range rs {
		if limit > 0 && i == limit {
			parts = append(parts, fmt.Sprintf("… (%d ranges)", len(rs)))
			break
		}
		if r.End == r.Start+1 {
			parts = append(parts, fmt.Sprint(r.Start))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", r.Start, r.End-1))
		}
	}
	return strings.Join(parts, ",")
}

// FormatInts prints numbers (chunk indices) comma-separated, at most limit
// of them (limit <= 0: all), then "… N in all".
func FormatInts(c []int64, limit int) string {
	p := make([]string, 0, len(c))
	for i, x := range c {
		if limit > 0 && i == limit {
			p = append(p, fmt.Sprintf("… %d in all", len(c)))
			break
		}
		p = append(p, fmt.Sprint(x))
	}
	return strings.Join(p, ",")
}
