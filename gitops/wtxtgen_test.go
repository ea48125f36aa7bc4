package gitops

import (
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

func gitCmd(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return gittest.Git(t, dir, args...)
}

func gitRun(dir string, args ...string) (string, error) { return gittest.GitRun(dir, args...) }

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	return gittest.WriteFile(t, dir, name, data)
}
