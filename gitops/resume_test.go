package gitops

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// A resumed run re-uses generation numbers: the abandoned generations keep
// their commits and tags, a signed record marks them, and the re-used
// numbers get the next free tag.
func TestCommitResume(t *testing.T) {
	key, allowed := testKey(t)
	dir := t.TempDir()
	r, err := OpenRepo(filepath.Join(dir, "r.git"), Config{SigningKey: key})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	arrays := func(v byte) []testArray { a := pseudo(1, 3000); a[0] = v; return []testArray{{name: "w", data: a}} }
	mt := map[string]string{}
	commit := func(name string, gen uint64, prev string, v byte, res *Resume) (*Result, error) {
		data, m := genWTXT(gen, mt[prev], arrays(v))
		mt[name] = m
		return r.Commit(ctx, Generation{WTXT: writeFile(t, dir, name+".wtxt", data), Resume: res})
	}
	var first []*Result
	for g, prev := range []string{"", "g1", "g2"} {
		res, err := commit(fmt.Sprintf("g%d", g+1), uint64(g+1), prev, byte(g+1), nil)
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, res)
	}
	// Undeclared: generation 3 again, chained to 2.
	if _, err := commit("g3x", 3, "g2", 30, nil); !errors.Is(err, ErrGenOrder) {
		t.Fatalf("undeclared re-use: %v", err)
	}
	// Declared, but from a generation the branch does not have.
	if _, err := commit("g5x", 5, "g3", 50, &Resume{From: 4}); !errors.Is(err, ErrResume) {
		t.Fatalf("resume from above the head: %v", err)
	}
	// Declared, but chained to the wrong generation.
	if _, err := commit("g3y", 3, "g1", 31, &Resume{From: 2}); !errors.Is(err, ErrChainBreak) {
		t.Fatalf("resume with another merkle_prev: %v", err)
	}
	if got := strings.TrimSpace(gitCmd(t, r.Dir(), "rev-parse", "snapshots")); got != first[2].Commit.String() {
		t.Fatalf("a refused resume moved the branch to %s", got)
	}
	res3, err := commit("g3r", 3, "g2", 32, &Resume{From: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res3.Tag != "gen-000003-r1" {
		t.Fatalf("tag %s", res3.Tag)
	}
	again, err := r.Commit(ctx, Generation{WTXT: filepath.Join(dir, "g3r.wtxt"), Resume: &Resume{From: 2}})
	if err != nil || !again.Existing || again.Commit != res3.Commit || again.Tag != res3.Tag {
		t.Fatalf("repeated: %+v %v", again, err)
	}
	res4, err := commit("g4r", 4, "g3r", 40, nil)
	if err != nil || res4.Tag != "gen-000004" {
		t.Fatalf("gen 4 after the resume: %+v %v", res4, err)
	}
	// History: g1 g2 g3 record g3' g4'.
	log := gitCmd(t, r.Dir(), "log", "--format=%s", "snapshots")
	want := "snapd: generation 000004\nsnapd: generation 000003\nsnapd: resume from generation 000002 (abandons 000003..000003)\nsnapd: generation 000003\nsnapd: generation 000002\nsnapd: generation 000001\n"
	if log != want {
		t.Fatalf("log:\n%s", log)
	}
	rec := strings.TrimSpace(gitCmd(t, r.Dir(), "rev-parse", res3.Commit.String()+"^"))
	if trees := strings.Fields(gitCmd(t, r.Dir(), "rev-parse", rec+"^{tree}", first[1].Commit.String()+"^{tree}")); trees[0] != trees[1] {
		t.Fatalf("the record's tree is not generation 2's: %v", trees)
	}
	body := gitCmd(t, r.Dir(), "log", "-1", "--format=%B", rec)
	for _, l := range []string{"Snapd-Resumed-From: 000002", "Snapd-Resumed-Commit: " + first[1].Commit.String(), "Snapd-Abandoned: 000003..000003", "Snapd-Merkle-This: " + mt["g2"]} {
		if !strings.Contains(body, l+"\n") {
			t.Fatalf("record lacks %q:\n%s", l, body)
		}
	}
	gitCmd(t, r.Dir(), "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", rec)
	gitCmd(t, r.Dir(), "fsck", "--strict")
	for gen, want := range map[uint64]string{2: first[1].Commit.String(), 3: res3.Commit.String(), 4: res4.Commit.String()} {
		if got, err := r.ResolveGen(gen); err != nil || got != want {
			t.Fatalf("ResolveGen(%d) = %s, %v; want %s", gen, got, err, want)
		}
	}
	if got := strings.TrimSpace(gitCmd(t, r.Dir(), "rev-parse", "gen-000003^{commit}")); got != first[2].Commit.String() {
		t.Fatalf("the abandoned generation's tag moved: %s", got)
	}
}
