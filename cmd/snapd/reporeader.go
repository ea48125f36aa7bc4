package main

import (
	"errors"
	"path/filepath"

	"github.com/go-git/go-git/v5"
	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/pipeline"
)

// repoFlagUsage is the --repo flag of the commands that read a snapshot
// repository (checkout, log).
const repoFlagUsage = "repository (bare or with a work tree); default: the daemon's STATE_DIR/repo when --state-dir is given, else ."

// readRepoDir is the repository a reading command names: --repo (dir);
// else, when --state-dir is given on the command line, the daemon's
// repository in it; else dir (the current directory).
func readRepoDir(cmd *cobra.Command, e *env, dir string) string {
	if f := cmd.Flags().Lookup("repo"); f != nil && !f.Changed {
		if s := cmd.Flags().Lookup("state-dir"); s != nil && s.Changed {
			return filepath.Join(e.global.stateDir, pipeline.RepoDir)
		}
	}
	return dir
}

// openReadRepo opens a reading command's repository (readRepoDir); one
// that is not there gets a hint naming where repositories are.
func openReadRepo(dir string, cfg gitops.Config) (*gitops.Repo, error) {
	repo, err := gitops.OpenExisting(dir, cfg)
	switch {
	case err == nil:
		return repo, nil
	case errors.Is(err, gitops.ErrConfig):
		return nil, usageError{err}
	case errors.Is(err, git.ErrRepositoryNotExists):
		return nil, withHint(ioError{err}, "name it with --repo DIR: a clone (snapd clone REMOTE DIR), a bare remote on this machine, or the daemon's (--state-dir STATE_DIR reads STATE_DIR/repo, which keeps only the newest pushed generations)")
	}
	return nil, ioError{err}
}
