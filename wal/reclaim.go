package wal

import (
	"context"

	"github.com/snapd-ml/snapd/snapshot"
)

// ReclaimGenerations is the one rule for reclaiming the generations
// directory (STATE_DIR/gens), used by `snapd gc --keep K` and by the
// daemon after every generation (the config's retention.gens): it runs
// store.Reclaim with opts, where a generation counts as snapshotted when
// its outcome in the WAL directory dir is done (opts.Snapshotted is
// replaced). So a generation is deleted only when it is not among the
// newest opts.Keep, not the newest snapshotted one, not pinned by a live
// process, and done in the WAL or abandoned (snapshot.GenStore.Abandon,
// opts.Abandoned). It reads the outcomes without locking the WAL, so it
// is safe while the daemon and the trainer run.
func ReclaimGenerations(ctx context.Context, store *snapshot.GenStore, dir string, opts snapshot.ReclaimOptions) (snapshot.ReclaimReport, error) {
	outcomes, err := LoadOutcomes(dir)
	if err != nil {
		return snapshot.ReclaimReport{}, err
	}
	opts.Snapshotted = func(gen uint64) bool { return outcomes[gen].State == Done }
	return store.Reclaim(ctx, opts)
}
