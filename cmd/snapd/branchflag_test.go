package main

import (
	"testing"

	"github.com/spf13/pflag"
)

// The Git branch flag is --branch in every command that takes one; run's
// old spelling --git-branch stays as a hidden alias with the same effect.
func TestBranchFlagNamedOnce(t *testing.T) {
	e := &env{}
	root := newRootCommand(e)
	for _, name := range []string{"run", "clone", "checkout", "verify-repo"} {
		cmd, _, err := root.Find([]string{name})
		if err != nil || cmd.Name() != name {
			t.Fatalf("%s: %v", name, err)
		}
		if f := cmd.Flags().Lookup("branch"); f == nil || f.Hidden {
			t.Errorf("%s has no visible --branch", name)
		}
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "branch" && !f.Hidden && (f.Name == "git-branch" || f.Name == "snapshot-branch") {
				t.Errorf("%s: visible --%s beside --branch", name, f.Name)
			}
		})
	}
	for _, flag := range []string{"--branch", "--git-branch"} {
		var o runOptions
		o.branch = "models"
		o.changed = func(n string) bool { return n == flag[2:] }
		c, err := loadRunConfig(&o)
		if err != nil || c.Git.Branch != "models" {
			t.Errorf("run %s models: branch %q, %v", flag, c.Git.Branch, err)
		}
	}
}
