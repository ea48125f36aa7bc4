package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/wtxt/ranks/rankstest"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/wal"
)

// writeShard writes rank r's shard of gen as safetensors into dir.
func writeShard(t *testing.T, dir string, gen uint64, r int) string {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("shard-%d-%d.safetensors", gen, r))
	var b bytes.Buffer
	if err := safetensors.New().Encode(context.Background(), &b, rankstest.Shard(gen, r), formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func appendRequests(t *testing.T, dir string, reqs ...wal.Request) {
	t.Helper()
	w, err := wal.OpenWriter(filepath.Join(dir, WALDir))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, r := range reqs {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
}

// A ranks node is the daemon with a RankPublisher: rank requests go
// through its WAL consumer and stages and end as rank manifests in the
// registry (WAL outcome done only after the push); a request without
// rank fields, and a part the registry refuses, fail in the WAL; nothing
// is chained.
func TestRankNodeDaemon(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	repo := openRankRepo(t, reg, "job/node")
	f := newFixture(t)
	node, err := NewRankPublisher(RankOptions{Repo: repo, Chain: rankstest.Chain, SignKey: f.keys.sign, Dir: RankPartsDir(f.dir),
		SegmentSize: 2048, RetryMin: time.Millisecond, RetryMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.start(t, func(c *Config, d *Deps) { d.Repo, d.Publisher = nil, node })
	ts := time.Unix(1_700_000_000, 0)
	appendRequests(t, f.dir,
		wal.Request{Gen: 1, Time: ts, Requester: "test", Source: writeShard(t, f.dir, 1, 0), Rank: 0, WorldSize: 2},
		wal.Request{Gen: 2, Time: ts, Requester: "test", Source: writeShard(t, f.dir, 2, 0)}, // no rank fields
	)
	r := f.wait(t, 1)
	if r.State != wal.Done || r.Tag != "gen-000001.rank-0" || r.WTXTBytes == 0 {
		t.Fatalf("rank request: %+v", r)
	}
	if _, _, err := oci.FetchRankPart(context.Background(), repo, "000001", 0, 2, rankstest.Chain); err != nil {
		t.Fatalf("rank manifest after a done request: %v", err)
	}
	if _, err := os.Stat(node.partPath(1, 0)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("part kept after its push: %v", err)
	}
	if r := f.wait(t, 2); r.State != wal.Failed || !strings.Contains(r.Error, ErrNotRank.Error()) {
		t.Fatalf("request without rank fields: %+v", r)
	}
	// Another shard claiming rank 0 of generation 1 is refused by the
	// registry side (the tag is taken): failed, located, not retried.
	appendRequests(t, f.dir, wal.Request{Gen: 1, Time: ts.Add(time.Second), Requester: "test", Source: writeShard(t, f.dir, 1, 1), Rank: 0, WorldSize: 2})
	r, err = f.d.WaitFor(context.Background(), 1, func(r *GenResult) bool { return r.State == wal.Failed })
	if err != nil || !strings.Contains(r.Error, "already claimed") {
		t.Fatalf("second claim of a rank: %+v %v", r, err)
	}
	if h := f.d.Head(); h.Gen != 0 {
		t.Fatalf("a ranks node chained gen %d", h.Gen)
	}
	if got := metric(t, f.reg, "snapd_rank_parts_pushed_total"); got != 1 {
		t.Fatalf("snapd_rank_parts_pushed_total = %v", got)
	}
	if got := metric(t, f.reg, "snapd_failures_total", "stage", "publish"); got != 1 {
		t.Fatalf("publish failures = %v", got)
	}
	f.stop(t)
}

// A part converted before a crash (kill -9 between conversion and push)
// is pushed after the restart without reading the shard again.
func TestRankNodeRedelivery(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	repo := openRankRepo(t, reg, "job/redeliver")
	f := newFixture(t)
	node, err := NewRankPublisher(RankOptions{Repo: repo, Chain: rankstest.Chain, SignKey: f.keys.sign, Dir: RankPartsDir(f.dir),
		SegmentSize: 2048, RetryMin: time.Millisecond, RetryMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1_700_000_000, 0)
	src := writeShard(t, f.dir, 3, 1)
	rec := wal.Record{Request: wal.Request{Gen: 3, Time: ts, Requester: "test", Source: src, Rank: 1, WorldSize: 2}}
	// The part as the stages wrote it before the crash.
	m, err := safetensors.New().Decode(context.Background(), bytes.NewReader(mustRead(t, src)), int64(len(mustRead(t, src))), formats.DecodeOptions{Name: src})
	if err != nil {
		t.Fatal(err)
	}
	if err := node.writePart(context.Background(), rec.Request, m, node.partPath(3, 1)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(src); err != nil { // the shard is gone: only the part can be pushed
		t.Fatal(err)
	}
	f.start(t, func(c *Config, d *Deps) { d.Repo, d.Publisher = nil, node })
	appendRequests(t, f.dir, rec.Request)
	if r := f.wait(t, 3); r.State != wal.Done || r.Tag != "gen-000003.rank-1" {
		t.Fatalf("redelivered rank request: %+v", r)
	}
	f.stop(t)
	// The same request pushed again by hand: the same manifest, nothing
	// uploaded.
	if err := handleRank(context.Background(), node, wal.Record{Request: wal.Request{Gen: 3, Time: ts, Requester: "test",
		Source: writeShard(t, f.dir, 3, 1), Rank: 1, WorldSize: 2}}); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
