package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/snapd-ml/snapd/formats/dcp"
	"github.com/snapd-ml/snapd/formats/sharddir"
)

// prepareDir reads a directory source as one snapshot (formats/sharddir:
// a Hugging Face shard index and its shards, or every checkpoint file of
// the directory). The caller has pinned it when it is a store entry; the
// directory's mappings are released with the item.
func (d *Daemon) prepareDir(ctx context.Context, it *item) error {
	gen, src := it.rec.Gen, it.rec.Source
	if isDCP, err := dcp.IsDCP(src); err == nil && isDCP {
		return d.prepareDCP(ctx, it)
	}
	dir, err := sharddir.Open(ctx, src, d.deps.Registry, sharddir.Options{Log: d.log.With("gen", gen)})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if transient(err) {
			return err
		}
		return permanent{fmt.Errorf("%w: gen %d: %v", ErrSource, gen, err)}
	}
	it.dir, it.snap = dir, dir.Snapshot
	it.res.Format, it.res.SourceBytes = "sharddir", dir.Bytes
	d.m.bytes.WithLabelValues("source").Add(float64(dir.Bytes))
	return nil
}

// prepareDCP reads a torch.distributed.checkpoint directory (formats/dcp)
// as one snapshot, every tensor whole. The directory is complete only
// once torch has written .metadata (last, by a rename) and every item
// file it names holds its items; until then (dcp.ErrIncomplete: a save
// still running, rank files not yet visible on a shared file system)
// the request is retried with backoff, never half-read.
func (d *Daemon) prepareDCP(ctx context.Context, it *item) error {
	gen, src := it.rec.Gen, it.rec.Source
	tc, err := d.deps.Registry.ByName("torch")
	if err != nil {
		return permanent{fmt.Errorf("%w: gen %d: %s: a DCP checkpoint needs the torch codec: %v", ErrSource, gen, src, err)}
	}
	dir, err := dcp.Open(ctx, src, dcp.Options{Torch: tc})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, dcp.ErrIncomplete) || transient(err) {
			return incomplete{err}
		}
		return permanent{fmt.Errorf("%w: gen %d: %v", ErrSource, gen, err)}
	}
	it.dir, it.snap = dir, dir.Snapshot
	it.res.Format, it.res.SourceBytes = "dcp", dir.Bytes
	d.m.bytes.WithLabelValues("source").Add(float64(dir.Bytes))
	return nil
}

// incomplete marks a source that is not yet whole (a DCP directory still
// being written): transient, so prepare retries it.
type incomplete struct{ err error }

func (e incomplete) Error() string { return e.err.Error() }
func (e incomplete) Unwrap() error { return e.err }
