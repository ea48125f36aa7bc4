package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/gittest"
)

// TestCloneGenResumed: a run resumed from generation 2 re-used number 3,
// so the remote has gen-000003 (abandoned) and gen-000003-r1 (the run
// that continued). clone --gen 3 fetches the newest and names the other;
// a number the remote lacks is an error naming the tag.
func TestCloneGenResumed(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	sh := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, args, &out, &errb); code != 0 {
			t.Fatalf("snapd %v: exit %d: %s", args, code, errb.String())
		}
		return errb.String()
	}
	sh("keygen", filepath.Join(dir, "keys"))
	repo, err := gitops.OpenRepo(filepath.Join(dir, "remote.git"), gitops.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var wtxts []string
	commit := func(gen, content uint64, prev string, resume *gitops.Resume) string {
		t.Helper()
		var b bytes.Buffer
		if err := safetensors.New().Encode(ctx, &b, tinyGen(content), formats.EncodeOptions{}); err != nil {
			t.Fatal(err)
		}
		st := fmt.Sprintf("c%d.safetensors", content)
		gittest.WriteFile(t, dir, st, b.Bytes())
		w := filepath.Join(dir, fmt.Sprintf("c%d.wtxt", content))
		args := []string{"convert", filepath.Join(dir, st), w, "--gen", fmt.Sprint(gen), "--ts", "2026-01-01T00:00:00Z", "--sign-key", filepath.Join(dir, "keys", "sign_ed25519")}
		if prev != "" {
			args = append(args, "--prev", prev)
		}
		sh(args...)
		if _, err := repo.Commit(ctx, gitops.Generation{WTXT: w, Resume: resume}); err != nil {
			t.Fatal(err)
		}
		return w
	}
	for g := uint64(1); g <= 3; g++ {
		prev := ""
		if g > 1 {
			prev = wtxts[g-2]
		}
		wtxts = append(wtxts, commit(g, g, prev, nil))
	}
	resumed := commit(3, 30, wtxts[1], &gitops.Resume{From: 2})
	if tags := gittest.Git(t, repo.Dir(), "tag", "-l", "gen-000003*"); tags != "gen-000003\ngen-000003-r1\n" {
		t.Fatalf("remote tags %q", tags)
	}

	clone := filepath.Join(dir, "clone")
	msg := sh("clone", "--gen", "3", "file://"+repo.Dir(), clone)
	if !strings.Contains(msg, "cloning gen-000003-r1, the newest (also tagged: gen-000003;") {
		t.Errorf("clone --gen 3 does not say which tag it chose:\n%s", msg)
	}
	out := filepath.Join(dir, "out.wtxt")
	sh("checkout", "latest", out, "--repo", clone)
	want, _ := os.ReadFile(resumed)
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Fatal("clone --gen 3 did not fetch the resumed run's generation 3")
	}
	sh("checkout", "3", out, "--repo", clone)
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Fatal("checkout 3 in the clone of gen-000003-r1 differs")
	}

	// A number without any re-use: its one tag, no note.
	if msg := sh("clone", "--gen", "2", "file://"+repo.Dir(), filepath.Join(dir, "clone2")); strings.Contains(msg, "re-used") {
		t.Errorf("clone --gen 2 speaks of a re-use:\n%s", msg)
	}
	// A number the remote does not have.
	var errb bytes.Buffer
	if code := run(ctx, []string{"clone", "--gen", "9", "file://" + repo.Dir(), filepath.Join(dir, "clone9")}, &bytes.Buffer{}, &errb); code != exitUsage || !strings.Contains(errb.String(), "has no tag gen-000009") {
		t.Fatalf("clone --gen 9: exit %d: %s", code, errb.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "clone9")); err == nil {
		t.Error("clone of a missing generation left a directory")
	}
}
