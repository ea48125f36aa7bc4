package queue

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/atomicfile"
)

// PushingFile (in the queue directory) describes the attempt Run is
// making now: the job, when the attempt and its phase started, the phase's
// kill limit and, while git push writes its pack, what git's progress line
// says. Run rewrites it (by rename, without fsync: it describes the running
// process only) at each phase and each new progress state, and removes it
// when the attempt ends; Open (not Shared) removes one a killed process
// left. A reader must ignore it when the process that runs the queue is
// gone (pipeline.ReadStatus does).
const PushingFile = "pushing.json"

// Phases of an attempt (Pushing.Phase): PhasePublish for a job's Publish
// work (registry upload and commit of the skeleton layout), then the
// pusher's (gitops.PhaseListRemote, gitops.PhaseCount, gitops.PhasePush).
const PhasePublish = "publish"

// Pushing is a push attempt in progress (Status.Pushing).
type Pushing struct {
	Branch string `json:"branch"`
	Gen    uint64 `json:"gen"`
	// Commit is the generation's commit ("" while Publish work has not
	// committed it yet).
	Commit  string    `json:"commit,omitempty"`
	Attempt int       `json:"attempt"` // 1 for the first attempt of the job
	Since   time.Time `json:"since"`   // when this attempt started
	Phase   string    `json:"phase"`
	// PhaseSince is when the phase started; Deadline = PhaseSince +
	// Timeout is when its git child is killed (Timeout: the size-scaled
	// push timeout in the push phase), unless the stall watchdog kills it
	// first after StallSeconds without progress.
	PhaseSince     time.Time `json:"phase_since"`
	TimeoutSeconds float64   `json:"timeout_seconds,omitempty"`
	Deadline       time.Time `json:"deadline,omitzero"`
	StallSeconds   float64   `json:"stall_seconds,omitempty"`
	// SendBytes estimates the bytes to send (on-disk size of the objects
	// the remote lacks; 0 unknown). ObjectsSent/ObjectsTotal and BytesSent
	// are git push's "Writing objects" progress (BytesSent as git rounds it).
	SendBytes    int64     `json:"send_bytes,omitempty"`
	ObjectsSent  int64     `json:"objects_sent,omitempty"`
	ObjectsTotal int64     `json:"objects_total,omitempty"`
	BytesSent    int64     `json:"bytes_sent,omitempty"`
	Updated      time.Time `json:"updated"` // last rewrite of the file
}

// pushingTracker keeps PushingFile for one attempt (Run's goroutine only).
type pushingTracker struct {
	q *Queue
	p Pushing
}

func (q *Queue) startPushing(j Job) *pushingTracker {
	now := q.opts.Clock.Now().UTC()
	return &pushingTracker{q: q, p: Pushing{Branch: j.Branch, Gen: j.Gen, Commit: j.Commit, Attempt: j.Attempts + 1, Since: now}}
}

// phase records the start of a phase without a git child (publish).
func (t *pushingTracker) phase(name, commit string) {
	now := t.q.opts.Clock.Now().UTC()
	t.p.Phase, t.p.PhaseSince, t.p.Commit = name, now, commit
	t.p.TimeoutSeconds, t.p.Deadline, t.p.StallSeconds = 0, time.Time{}, 0
	t.write(now)
}

// progress is the gitops.PushRequest.Progress callback.
func (t *pushingTracker) progress(pp gitops.PushProgress) {
	now := t.q.opts.Clock.Now().UTC()
	if pp.Phase != t.p.Phase {
		t.p.Phase, t.p.PhaseSince = pp.Phase, now
	}
	t.p.TimeoutSeconds, t.p.StallSeconds = pp.Limit.Seconds(), pp.Stall.Seconds()
	t.p.Deadline = time.Time{}
	if pp.Limit > 0 {
		t.p.Deadline = t.p.PhaseSince.Add(pp.Limit)
	}
	t.p.SendBytes, t.p.ObjectsSent, t.p.ObjectsTotal, t.p.BytesSent = pp.SendBytes, pp.ObjectsSent, pp.ObjectsTotal, pp.BytesSent
	t.write(now)
}

// write replaces PushingFile; a failure only costs the status display
// (logged at debug level).
func (t *pushingTracker) write(now time.Time) {
	t.p.Updated = now
	b, err := json.Marshal(t.p)
	if err == nil {
		err = atomicfile.WriteUnsynced(filepath.Join(t.q.dir, PushingFile), append(b, '\n'), 0o600)
	}
	if err != nil {
		t.q.log.Debug("cannot record the push in progress", "file", PushingFile, "err", err)
	}
}

// end removes PushingFile: the attempt is over.
func (t *pushingTracker) end() {
	if err := os.Remove(filepath.Join(t.q.dir, PushingFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.q.log.Debug("cannot remove the push-in-progress record", "file", PushingFile, "err", err)
	}
}

// readPushing returns PushingFile's record, nil when there is none (or it
// cannot be read: it is informational only).
func (q *Queue) readPushing() *Pushing {
	var p Pushing
	if err := readJSON(filepath.Join(q.dir, PushingFile), &p); err != nil {
		return nil
	}
	return &p
}
