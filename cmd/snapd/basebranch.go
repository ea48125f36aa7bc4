package main

import (
	"context"

	"github.com/snapd-ml/snapd/gitops"
)

// fetchBase is the repository's hook that fetches git.base_branch from the
// remote before the first generation commit; nil (use a local branch of
// that name) without a remote.
func fetchBase(gp *gitops.GitPusher) func(context.Context, string) error {
	if gp == nil {
		return nil
	}
	return gp.FetchBase
}

// history is the repository's fetcher of what retention cut (a resume
// from a generation the local repository no longer holds); nil without a
// remote.
func history(gp *gitops.GitPusher) gitops.HistoryFetcher {
	if gp == nil {
		return nil
	}
	return gp
}
