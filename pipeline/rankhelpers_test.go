package pipeline

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

func openRankRepo(t *testing.T, reg *registrytest.Registry, name string) *oci.Repository {
	t.Helper()
	repo, err := oci.Open(reg.Host+"/"+name, oci.Options{DockerConfig: t.TempDir() + "/none.json"})
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// handleRank does to rec what a ranks node's stages do (without a
// daemon): the shard decoded (safetensors), converted to its part unless
// the part is there, and the part pushed.
func handleRank(ctx context.Context, p *RankPublisher, rec wal.Record) error {
	if rec.WorldSize == 0 {
		return fmt.Errorf("gen %d: %s: %w", rec.Gen, rec.Source, ErrNotRank)
	}
	rp := &RankPart{Rank: rec.Rank, WorldSize: rec.WorldSize, Path: p.partPath(rec.Gen, rec.Rank)}
	if _, err := os.Stat(rp.Path); err != nil {
		m, err := snapshot.MapFile(rec.Source)
		if err != nil {
			return err
		}
		defer m.Close()
		gm := m.Guarded()
		s, err := safetensors.New().Decode(ctx, gm, gm.Size(), formats.DecodeOptions{Name: rec.Source})
		if err != nil {
			return err
		}
		if err := p.writePart(ctx, rec.Request, s, rp.Path); err != nil {
			return err
		}
	}
	_, err := p.Publish(ctx, Generation{Gen: rec.Gen, Rank: rp, Requested: rec.Time})
	return err
}
