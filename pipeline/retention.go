package pipeline

import (
	"context"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/snapshot"
)

// Retention bounds the disk the daemon uses on the training host beside
// the ring (Config.RingKeep). Each store keeps its newest generations
// plus whatever is still needed; 0 turns a rule off (keep everything).
// Reload changes it from the next generation (or push) on.
type Retention struct {
	// Gens: after every done generation the daemon reclaims STATE_DIR/gens
	// by `snapd gc --keep Gens`'s rule (wal.ReclaimGenerations, judged by
	// the outcomes its WAL consumer holds: nothing is re-read): it
	// deletes only generations that are not among the newest Gens, not
	// the newest snapshotted one, not pinned, and done in the WAL (or
	// marked abandoned); a pending or failed request's file stays.
	Gens int
	// Repo: after every successful push the local repository (Deps.Repo,
	// or a sharded job's committer's ledger) keeps the history of the
	// newest Repo pushed generations plus every commit the resend queue
	// has not pushed (gitops Repo.Retain: a shallow boundary, older tags
	// deleted, git repack -a -d and prune). Only with a remote (a resend
	// queue): without one the local repository is the only copy of the
	// ledger and keeps everything.
	Repo int
}

// retainGens reclaims STATE_DIR/gens after a done generation (finish).
// A failure is logged; the next generation tries again.
func (d *Daemon) retainGens(ctx context.Context) {
	cfg := d.config()
	keep := cfg.Retention.Gens
	if keep <= 0 || d.gens == nil || ctx.Err() != nil {
		return
	}
	rep, err := d.consumer.ReclaimGenerations(ctx, d.gens, snapshot.ReclaimOptions{Keep: keep})
	switch {
	case err != nil && ctx.Err() == nil:
		d.log.Warn("retention: reclaiming the generations directory failed (tried again after the next generation)", "keep", keep, "error", err)
		return
	case err != nil:
		return
	}
	for _, w := range rep.Warnings {
		d.log.Warn("retention: generation kept", "error", w)
	}
	if len(rep.Deleted) > 0 {
		gens := make([]uint64, len(rep.Deleted))
		for i, g := range rep.Deleted {
			gens[i] = g.Gen
		}
		d.log.Info("retention: generations directory reclaimed", "keep", keep, "deleted", gens, "kept", len(rep.Kept))
	}
}

// ledger is the local repository this daemon's pushes publish from:
// Deps.Repo, or on a sharded job's committer node (Deps.RankCommitter)
// the committer's ledger; nil when there is none. Retention and
// maintenance after a push work on it, through the Repo object that
// commits to it (whose lock they take).
func (d *Daemon) ledger() *gitops.Repo {
	if d.deps.Repo != nil {
		return d.deps.Repo
	}
	if c := d.deps.RankCommitter; c != nil {
		return c.o.Ledger
	}
	return nil
}

// retainRepo bounds the local repository's history after commit was
// pushed (PushObserver, in the resend queue's goroutine, so no push of
// this daemon reads the repository meanwhile). The queue's jobs are the
// pending pushes Retain never cuts; when they cannot be listed nothing
// is cut. A failure is logged; the next push tries again (and finishes
// an interrupted cleanup).
func (d *Daemon) retainRepo(ctx context.Context, commit plumbing.Hash) {
	keep := d.config().Retention.Repo
	repo, q := d.ledger(), d.deps.Queue
	if keep <= 0 || repo == nil || q == nil || ctx.Err() != nil {
		return
	}
	jobs, err := q.List()
	if err != nil {
		d.log.Warn("retention: resend queue unreadable: local repository history kept", "error", err)
		return
	}
	var pending []gitops.Pending
	for _, j := range jobs {
		if plumbing.IsHash(j.Commit) {
			pending = append(pending, gitops.Pending{Commit: plumbing.NewHash(j.Commit), Tag: j.Tag})
		}
	}
	m, err := repo.Retain(ctx, commit, keep, pending)
	switch {
	case err != nil && ctx.Err() == nil:
		d.log.Warn("retention: trimming the local repository's history failed (finished after the next push)", "keep", keep, "error", err)
	case m.Skipped != "":
		d.log.Info("retention: local repository history kept", "keep", keep, "reason", m.Skipped)
	case m.Cut || m.Repacked || m.PacksDropped > 0:
		d.log.Info("retention: local repository history trimmed", "keep", keep, "oldest_gen", m.BoundaryGen, "oldest_commit", m.Boundary.String(),
			"tags_deleted", m.TagsDeleted, "packs_dropped", m.PacksDropped, "repacked", m.Repacked, "elapsed", m.Elapsed.Round(time.Millisecond))
	}
}
