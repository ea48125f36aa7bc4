package testutil

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// SourceTexts returns the constant texts an error message of the Go
// packages in dirs can spell out: the pieces of every string literal in
// their non-test files, cut at format verbs, that hold a byte EchoedRun
// counts as hostile and are at least 6 bytes long. Given to EchoedRun as
// fixed texts, they keep a fuzz input that happens to spell part of a
// message template (a line shape such as "key=<hex64>") from being taken
// for file content echoed; shorter pieces (a lone quote or bracket) are
// left in, so an echo that contains them is still found. Longest first.
func SourceTexts(tb testing.TB, dirs ...string) []string {
	tb.Helper()
	seen := map[string]bool{}
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			tb.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(name)
			if err != nil {
				tb.Fatal(err)
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.SkipObjectResolution)
			if err != nil {
				tb.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				for _, p := range splitVerbs(s) {
					if len(p) >= 6 && hasHostileByte([]byte(p)) {
						seen[p] = true
					}
				}
				return true
			})
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) > len(out[j])
		}
		return out[i] < out[j]
	})
	return out
}

// splitVerbs cuts a format string at its verbs ("%q", "%-8d", "%%").
func splitVerbs(s string) []string {
	var out []string
	for {
		i := strings.IndexByte(s, '%')
		if i < 0 {
			return append(out, s)
		}
		out = append(out, s[:i])
		j := i + 1
		for j < len(s) && strings.IndexByte("+-# 0123456789.*[]", s[j]) >= 0 {
			j++
		}
		if j < len(s) {
			j++
		}
		s = s[j:]
	}
}
