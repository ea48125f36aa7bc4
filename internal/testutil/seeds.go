package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// Seeds returns the contents of the files matching glob (a
// filepath.Glob pattern, e.g. "testdata/golden-*.wtxt"), in the glob's
// order, for a fuzz target's corpus. It fails tb when none matches or
// one cannot be read: a fuzz target without seeds explores nothing
// useful in a smoke run's few executions.
func Seeds(tb testing.TB, glob string) [][]byte {
	tb.Helper()
	paths, err := filepath.Glob(glob)
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no seeds in %s", glob)
	}
	out := make([][]byte, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}
