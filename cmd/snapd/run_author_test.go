package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/pipeline"
)

// TestRunCommitAuthor: git.author_name/author_email set the generation
// commits' author and committer (read back with git log); a config with
// "<" in the author is a usage error (exit 2) before anything is created.
func TestRunCommitAuthor(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := writeConfig(t, dir, "git: {author_name: ML Bot, author_email: ml-bot@example.org}\n")
	d := startDaemon(t, "--state-dir", state, "--config", cfg, "--metrics-addr", "off")
	requestTiny(t, state, 1)
	waitStatus(t, state, "generation 1 committed", func(s *pipeline.Status) bool { return s.Chain != nil && s.Chain.Gen == 1 && s.Done == 1 })
	d.stop(t)
	got := gittest.Git(t, filepath.Join(state, pipeline.RepoDir), "log", "--format=%an <%ae> / %cn <%ce>", "refs/heads/snapshots")
	if got != "ML Bot <ml-bot@example.org> / ML Bot <ml-bot@example.org>\n" {
		t.Fatalf("git log: %q", got)
	}

	bad := writeConfig(t, t.TempDir(), "git: {author_email: \"x> <y@z\"}\n")
	fresh := filepath.Join(dir, "fresh")
	code, _, errs := snapd(t, nil, "run", "--state-dir", fresh, "--config", bad, "--metrics-addr", "off")
	if code != exitUsage || !strings.Contains(errs, "git.author_email") {
		t.Fatalf("bad author: exit %d %s", code, errs)
	}
	if _, err := os.Stat(fresh); err == nil {
		t.Fatal("state dir created for a rejected config")
	}
}
