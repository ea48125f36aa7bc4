package gitops

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/gittest"
)

// TestResumeBelowRetainedHistory: Retain has cut the local repository to
// the newest K pushed generations; a run resumes from an older one, which
// only the remote (a file and an HTTP remote) still has. With
// Config.History (GitPusher: git fetch --deepen, and the abandoned
// generations' tags) LiveGeneration and the resumed commit reach it: the record names its commit and
// abandons everything above it, the push lands, git fsck is clean on both
// sides, and the next Retain cuts again; the numbers the run re-uses
// next take -r1 although Retain cut the abandoned ones' tags here. Without
// History the resume fails with ErrResume and nothing is fetched.
func TestResumeBelowRetainedHistory(t *testing.T) {
	for _, kind := range []string{"file", "http"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const keep, n = 2, 6
			dir := t.TempDir()
			chain := retainChain(t, dir, n)
			repoDir := filepath.Join(dir, "local.git")
			var url, remoteDir string
			if kind == "file" {
				remoteDir = filepath.Join(t.TempDir(), "r.git")
				gitCmd(t, filepath.Dir(remoteDir), "init", "-q", "--bare", remoteDir)
				url = "file://" + remoteDir
			} else {
				hr := gittest.NewHTTPRemote(t)
				url, remoteDir = hr.URL, hr.Dir
			}
			gp, err := NewPusher(repoDir, Remote{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			key, _ := testKey(t)
			r, err := OpenRepo(repoDir, Config{SigningKey: key, History: gp})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var first []*Result
			for g := 1; g <= n; g++ {
				res, err := r.Commit(ctx, Generation{WTXT: chain.paths[g-1]})
				if err != nil {
					t.Fatalf("commit gen %d: %v", g, err)
				}
				first = append(first, res)
				if err := gp.Push(ctx, req(r, res)); err != nil {
					t.Fatalf("push gen %d: %v", g, err)
				}
				if _, err := r.Retain(ctx, res.Commit, keep, nil); err != nil {
					t.Fatalf("retain after gen %d: %v", g, err)
				}
			}
			if got := strings.TrimSpace(gitCmd(t, repoDir, "rev-list", "--count", "snapshots")); got != "2" {
				t.Fatalf("kept %s commits, want %d", got, keep)
			}

			// Without the hook: the generation is not reachable.
			bare, err := OpenRepo(repoDir, Config{SigningKey: key})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bare.LiveGeneration(ctx, 2); !errors.Is(err, ErrResume) || !strings.Contains(err.Error(), "not on the live chain") {
				t.Fatalf("without History: %v", err)
			}
			if got := strings.TrimSpace(gitCmd(t, repoDir, "rev-list", "--count", "snapshots")); got != "2" {
				t.Fatalf("without History the history grew to %s commits", got)
			}

			h, err := r.LiveGeneration(ctx, 2)
			if err != nil {
				t.Fatalf("LiveGeneration(2) below the retained history: %v", err)
			}
			if h.Gen != 2 || h.Root.Gen != "000002" {
				t.Fatalf("header %+v", h)
			}
			data, _ := genWTXT(3, hex.EncodeToString(h.Root.MerkleThis[:]), []testArray{{name: "w", data: pseudo(777, 60_000), chunk: 1024}})
			res3, err := r.Commit(ctx, Generation{WTXT: writeFile(t, dir, "g3r.wtxt", data), Resume: &Resume{From: 2}})
			if err != nil {
				t.Fatalf("resumed commit: %v", err)
			}
			if res3.Tag != "gen-000003-r1" {
				t.Fatalf("tag %s", res3.Tag)
			}
			if err := gp.Push(ctx, req(r, res3)); err != nil {
				t.Fatalf("push the resumed generation: %v", err)
			}
			rec := strings.TrimSpace(gitCmd(t, remoteDir, "rev-parse", res3.Commit.String()+"^"))
			body := gitCmd(t, remoteDir, "log", "-1", "--format=%B", rec)
			for _, l := range []string{"Snapd-Resumed-From: 000002", "Snapd-Resumed-Commit: " + first[1].Commit.String(), "Snapd-Abandoned: 000003..000006"} {
				if !strings.Contains(body, l+"\n") {
					t.Fatalf("record lacks %q:\n%s", l, body)
				}
			}
			gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")
			gitCmd(t, remoteDir, "fsck", "--strict", "--no-dangling")
			if _, err := r.Retain(ctx, res3.Commit, keep, nil); err != nil {
				t.Fatalf("retain after the resume: %v", err)
			}
			gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")

			// The resumed run goes on re-using 4, 5, 6. Retain soon cuts
			// the record and the abandoned generations with their tags;
			// the remote still has gen-000004..6, so each re-used number
			// takes -r1 (a name the remote has would stop the pushes).
			prev := res3
			mt := mtOf(t, r, 3)
			for g := uint64(4); g <= n; g++ {
				data, m := genWTXT(g, mt, []testArray{{name: "w", data: pseudo(700+int(g), 60_000), chunk: 1024}})
				res, err := r.Commit(ctx, Generation{WTXT: writeFile(t, dir, fmt.Sprintf("g%dr.wtxt", g), data)})
				if err != nil {
					t.Fatalf("commit re-used gen %d: %v", g, err)
				}
				if want := fmt.Sprintf("gen-%06d-r1", g); res.Tag != want {
					t.Fatalf("re-used gen %d tagged %s, want %s", g, res.Tag, want)
				}
				if err := gp.Push(ctx, req(r, res)); err != nil {
					t.Fatalf("push re-used gen %d: %v", g, err)
				}
				if _, err := r.Retain(ctx, res.Commit, keep, nil); err != nil {
					t.Fatalf("retain after re-used gen %d: %v", g, err)
				}
				prev, mt = res, m
			}
			gitCmd(t, repoDir, "fsck", "--strict", "--no-dangling")
			gitCmd(t, remoteDir, "fsck", "--strict", "--no-dangling")
			if got := strings.TrimSpace(gitCmd(t, remoteDir, "rev-parse", "snapshots")); got != prev.Commit.String() {
				t.Fatalf("remote branch at %s, want %s", got, prev.Commit)
			}
		})
	}
}

// mtOf returns generation gen's merkle_this (hex) as the live chain has it.
func mtOf(t *testing.T, r *Repo, gen uint64) string {
	t.Helper()
	h, err := r.LiveGeneration(context.Background(), gen)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Root.MerkleThis[:])
}

func TestReuseTagNames(t *testing.T) {
	for _, c := range []struct {
		name, base string
		ok         bool
	}{
		{"gen-000003", "gen-000003", true}, {"gen-000003-r1", "gen-000003", true}, {"gen-000003-r12", "gen-000003", true},
		{"gen-000003-r0", "gen-000003", false}, {"gen-000003-r01", "gen-000003", false}, {"gen-000003-r", "gen-000003", false},
		{"gen-000003-rx", "gen-000003", false}, {"gen-000003-r1-r2", "gen-000003", false}, {"gen-0000031", "gen-000003", false},
		{"x-run-000003-r2", "x-run-000003", true},
	} {
		if got := reuseOf(c.name, c.base); got != c.ok {
			t.Errorf("reuseOf(%q, %q) = %v", c.name, c.base, got)
		}
	}
	if reuseTag("gen-000003", 0) != "gen-000003" || reuseTag("gen-000003", 2) != "gen-000003-r2" {
		t.Fatal(reuseTag("gen-000003", 2))
	}
}
