package layout

import (
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/internal/gittest"
)

type testArray struct {
	name  string
	data  []byte
	chunk int
}

func genWTXT(gen uint64, merklePrev string, arrays []testArray) ([]byte, string) {
	as := make([]gittest.Array, len(arrays))
	for i, a := range arrays {
		as[i] = gittest.Array{Name: a.name, Data: a.data, Chunk: a.chunk}
	}
	return gittest.WTXT(gen, merklePrev, as)
}

func pseudo(seed, n int) []byte { return gittest.Pseudo(seed, n) }

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	return gittest.WriteFile(t, dir, name, data)
}

// requireSeeds fails a fuzz target whose seed corpus in testdata is empty.
func requireSeeds(f *testing.F, target string) {
	f.Helper()
	if m, _ := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*")); len(m) == 0 {
		f.Fatalf("no seeds in testdata/fuzz/%s (SNAPD_WRITE_FUZZ_SEEDS=1 go test -run TestWriteFuzzSeeds ./gitops writes them)", target)
	}
}
