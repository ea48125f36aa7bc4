package gitops

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestDeltaPolicy: with the default policy a split generation's delta is
// not committed (its parts already hold the changed chunks); a single
// file's is; "never" and "always" do what they say.
func TestDeltaPolicy(t *testing.T) {
	for _, tc := range []struct {
		layout Layout
		policy DeltaPolicy
		want   bool
	}{
		{LayoutSplit, "", false}, {LayoutSingle, "", true}, {LayoutSplit, DeltaAlways, true}, {LayoutSingle, DeltaNever, false},
	} {
		dir := t.TempDir()
		r, err := OpenRepo(filepath.Join(dir, "local.git"), Config{Layout: tc.layout, Delta: tc.policy, PartLimit: MinPartLimit, SplitThreshold: MinPartLimit})
		if err != nil {
			t.Fatal(err)
		}
		chain := genChain(t, dir, 2, []testArray{{name: "w", data: pseudo(1, 2000), chunk: 256}}, func(g int, a []testArray) { a[0].data[g*7] ^= byte(g) })
		if _, err := r.Commit(context.Background(), Generation{WTXT: chain.paths[0]}); err != nil {
			t.Fatal(err)
		}
		delta := writeFile(t, dir, "g2.wtxtdelta", []byte("DELTA stand-in\n"))
		res, err := r.Commit(context.Background(), Generation{WTXT: chain.paths[1], Delta: delta})
		if err != nil {
			t.Fatal(err)
		}
		out := gitCmd(t, r.Dir(), "ls-tree", "--name-only", res.Commit.String()+":snapshots")
		if got := strings.Contains(out, FileDelta); got != tc.want {
			t.Errorf("layout %s policy %q: delta committed %v, want %v (%s)", tc.layout, tc.policy, got, tc.want, out)
		}
		if _, err := OpenRepo(filepath.Join(dir, "x.git"), Config{Delta: "sometimes"}); err == nil {
			t.Fatal("bad policy accepted")
		}
	}
}
