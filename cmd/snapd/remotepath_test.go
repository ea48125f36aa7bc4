package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A relative local-path remote means the path from where snapd was
// started (git pushes from inside the repository, where it would mean
// something else); URLs, scp-like remotes and absolute paths are kept.
func TestRunConfigRelativeRemote(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want string }{
		{"ledger.git", filepath.Join(wd, "ledger.git")},
		{"./remotes/ledger.git", filepath.Join(wd, "remotes/ledger.git")},
		{"../ledger.git", filepath.Join(filepath.Dir(wd), "ledger.git")},
		{"/srv/git/ledger.git", "/srv/git/ledger.git"},
		{"file:///srv/git/ledger.git", "file:///srv/git/ledger.git"},
		{"https://example.com/org/ledger.git", "https://example.com/org/ledger.git"},
		{"git@github.com:org/ledger.git", "git@github.com:org/ledger.git"},
		{"ssh://git@example.com:2222/org/ledger.git", "ssh://git@example.com:2222/org/ledger.git"},
	} {
		o := runOptions{remote: tc.in, changed: func(n string) bool { return n == "git-remote" }}
		c, err := loadRunConfig(&o)
		if err != nil {
			t.Fatalf("--git-remote %s: %v", tc.in, err)
		}
		if c.Git.Remote != tc.want {
			t.Errorf("--git-remote %s: remote %q, want %q", tc.in, c.Git.Remote, tc.want)
		}
	}
}
