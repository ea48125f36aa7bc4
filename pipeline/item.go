package pipeline

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/snapd-ml/snapd/internal/progress"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// item is one WAL record travelling through the stages. Every record goes
// through every stage, in log order, so that the last stage completes
// them in the order the consumer requires; skipped and failed items just
// pass through.
type item struct {
	rec       wal.Record
	admitted  time.Time
	skip      bool   // already handled (duplicate / redelivery)
	coalesced uint64 // replaced by the request for this generation
	err       error  // permanent failure
	stage     string // where err happened
	aborted   bool   // abandoned because the daemon is closing

	log   *slog.Logger    // stage start/finish lines (nil: none)
	act   *activity       // stages in progress (nil: not tracked)
	meter *progress.Meter // the encode's progress line (activity.go)
	pin   *snapshot.Pin
	m     *snapshot.Mapping
	dir   io.Closer // a directory source (formats/sharddir), instead of m
	snap  *snapshot.Snapshot
	res   GenResult
	head  *ChainState // the chain head after this generation (done items)
	// A rank request on a ranks node (rankstage.go): its part, and
	// whether prepare found it converted already.
	rank      *RankPart
	partReady bool
}

func (it *item) release() {
	if it.m != nil {
		it.m.Close()
		it.m = nil
	}
	if it.dir != nil {
		it.dir.Close()
		it.dir = nil
	}
	if it.pin != nil {
		it.pin.Release()
		it.pin = nil
	}
	it.snap = nil
}

// stageStart logs the start of a stage of the item's generation.
func (it *item) stageStart(name string) {
	if it.log != nil {
		it.log.Info("stage started", "stage", name, "gen", it.rec.Gen)
	}
	it.act.start(it, name)
}

// stage1 adds dt to the time the item spent in stage name and logs the
// stage's end.
func (it *item) stage1(name string, dt time.Duration) {
	it.act.finish(it, name)
	if it.log != nil {
		it.log.Info("stage finished", "stage", name, "gen", it.rec.Gen, "duration", dt)
	}
	if it.res.Stages == nil {
		it.res.Stages = map[string]time.Duration{}
	}
	it.res.Stages[name] += dt
}

// send delivers it downstream or, when the daemon stops, releases it.
func send(ctx context.Context, out chan<- *item, it *item) bool {
	select {
	case out <- it:
		return true
	case <-ctx.Done():
		it.release()
		return false
	}
}
