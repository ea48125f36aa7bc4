package pipeline

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/progress"
	"github.com/snapd-ml/snapd/internal/safeopen"
	"github.com/snapd-ml/snapd/snapshot"
)

// ActivityFile (in the state directory) lists the stages running now, one
// entry per stage (stages work on different generations at once). It is
// rewritten at every stage start and finish by rename, without fsync: it
// describes the running process only, so ReadStatus ignores it when no
// daemon holds the lock, and Close removes it.
const ActivityFile = "activity"

// Activity is a stage in progress.
type Activity struct {
	Gen     uint64    `json:"gen"`
	GenText string    `json:"gen_text"`
	Stage   string    `json:"stage"`
	Started time.Time `json:"started"`
	// Total is the encode stage's expected WTXT size (an estimate from
	// the raw bytes; absent for other stages).
	Total int64 `json:"total_bytes,omitempty"`
}

// activity tracks the stages in progress: the activity file, and on a
// terminal (Deps.Progress) a progress line for each generation's encode.
type activity struct {
	mu   sync.Mutex
	path string
	now  func() time.Time
	out  io.Writer // progress lines; nil: none
	cur  map[string]Activity
}

func newActivity(stateDir string, now func() time.Time, out io.Writer) *activity {
	return &activity{path: filepath.Join(stateDir, ActivityFile), now: now, out: out, cur: map[string]Activity{}}
}

// start records that item it entered stage; for "encode" it also starts
// the item's progress meter (total: the estimated WTXT size).
func (a *activity) start(it *item, stage string) {
	if a == nil {
		return
	}
	ac := Activity{Gen: it.rec.Gen, GenText: wtxt.FormatGen(it.rec.Gen), Stage: stage, Started: a.now().UTC()}
	if stage == "encode" && it.snap != nil {
		ac.Total = progress.WTXTEstimate(rawBytes(it.snap))
		it.meter = progress.Start(progress.Options{Out: a.out, Label: "gen " + ac.GenText + " encode", Total: ac.Total, Now: a.now})
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cur[stage] = ac
	a.write()
}

// finish records that item it left stage (ending its progress line).
func (a *activity) finish(it *item, stage string) {
	if a == nil {
		return
	}
	if stage == "encode" && it.meter != nil {
		it.meter.Finish()
		it.meter = nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ac, ok := a.cur[stage]; ok && ac.Gen == it.rec.Gen {
		delete(a.cur, stage)
		a.write()
	}
}

// done forgets every stage of item it (it completed or failed).
func (a *activity) done(it *item) {
	if a == nil {
		return
	}
	if it.meter != nil {
		it.meter.Clear()
		it.meter = nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(a.cur)
	maps.DeleteFunc(a.cur, func(_ string, ac Activity) bool { return ac.Gen == it.rec.Gen })
	if len(a.cur) != n {
		a.write()
	}
}

// close removes the activity file.
func (a *activity) close() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.cur)
	os.Remove(a.path)
}

// write replaces the file; a.mu is held. Failures only lose status
// detail, so they are ignored.
func (a *activity) write() {
	list := make([]Activity, 0, len(a.cur))
	for _, ac := range a.cur {
		list = append(list, ac)
	}
	slices.SortFunc(list, func(x, y Activity) int {
		if c := x.Started.Compare(y.Started); c != 0 {
			return c
		}
		return cmp.Compare(x.Gen, y.Gen)
	})
	b, err := json.Marshal(list)
	if err != nil {
		return
	}
	_ = atomicfile.WriteUnsynced(a.path, append(b, '\n'), 0o600)
}

// ReadActivity reads the activity file: the stages in progress, oldest
// first (empty when there is none). Only meaningful while a daemon runs.
func ReadActivity(stateDir string) ([]Activity, error) {
	b, err := safeopen.ReadFile(filepath.Join(stateDir, ActivityFile), maxStateBytes, safeopen.NoFollow)
	if errors.Is(err, fs.ErrNotExist) {
		return []Activity{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pipeline: read activity: %w", err)
	}
	var list []Activity
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("pipeline: %s: %v", ActivityFile, err)
	}
	if list == nil {
		list = []Activity{}
	}
	return list, nil
}

// rawBytes is the sum of s's arrays' sizes (an array whose size cannot be
// had counts 0).
func rawBytes(s *snapshot.Snapshot) int64 {
	var n int64
	for _, a := range s.Arrays {
		if b, err := a.NumBytes(); err == nil && n+b >= n {
			n += b
		}
	}
	return n
}
