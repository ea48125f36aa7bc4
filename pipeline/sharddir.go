package pipeline

import (
	"context"
	"fmt"

	"github.com/snapd-ml/snapd/formats/sharddir"
)

// prepareDir reads a directory source as one snapshot (formats/sharddir:
// a Hugging Face shard index and its shards, or every checkpoint file of
// the directory). The caller has pinned it when it is a store entry; the
// directory's mappings are released with the item.
func (d *Daemon) prepareDir(ctx context.Context, it *item) error {
	gen, src := it.rec.Gen, it.rec.Source
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
