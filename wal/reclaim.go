package wal

import (
	"context"

	"github.com/snapd-ml/snapd/snapshot"
)

// ReclaimGenerations is the one rule for reclaiming the generations
// directory (STATE_DIR/gens), used by `snapd gc --keep K` (this function)
// and by the daemon after every generation (the config's retention.gens:
// Consumer.ReclaimGenerations): it runs store.Reclaim with opts, where a
// generation counts as snapshotted when its outcome in the WAL directory
// dir is done (opts.Snapshotted is replaced). So a generation is deleted
// only when it is not among the newest opts.Keep, not the newest
// snapshotted one, not pinned by a live process, and done in the WAL or
// abandoned (snapshot.GenStore.Abandon, opts.Abandoned). It reads the
// whole outcomes log (LoadOutcomes) without locking the WAL, so it is
// safe while the daemon and the trainer run.
func ReclaimGenerations(ctx context.Context, store *snapshot.GenStore, dir string, opts snapshot.ReclaimOptions) (snapshot.ReclaimReport, error) {
	outcomes, err := LoadOutcomes(dir)
	if err != nil {
		return snapshot.ReclaimReport{}, err
	}
	return reclaimGenerations(ctx, store, func(gen uint64) bool { return outcomes[gen].State == Done }, opts)
}

// ReclaimGenerations is the package function's rule for the consumer's WAL
// directory, judged by the outcomes the consumer holds: those it loaded
// when it opened the log and those it recorded since (it is the log's only
// writer). It reads nothing from disk, so the daemon's cost per generation
// does not grow with the outcomes log.
func (c *Consumer) ReclaimGenerations(ctx context.Context, store *snapshot.GenStore, opts snapshot.ReclaimOptions) (snapshot.ReclaimReport, error) {
	return reclaimGenerations(ctx, store, func(gen uint64) bool {
		o, ok := c.Outcome(gen)
		return ok && o.State == Done
	}, opts)
}

func reclaimGenerations(ctx context.Context, store *snapshot.GenStore, done func(gen uint64) bool, opts snapshot.ReclaimOptions) (snapshot.ReclaimReport, error) {
	opts.Snapshotted = done
	return store.Reclaim(ctx, opts)
}
