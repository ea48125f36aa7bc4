// Package queue is the durable resend queue between the pipeline and a Git
// remote: one file per push job, pushed in generation order per branch with
// capped exponential backoff, stopping with a visible status when a person
// must act. The on-disk format is described in ../doc.go.
package queue

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/backoff"
	"github.com/snapd-ml/snapd/internal/safeopen"
)

// Errors returned by Enqueue, Drop and Run; test with errors.Is.
var (
	ErrInvalidJob = errors.New("queue: invalid job")
	ErrConflict   = errors.New("queue: another job for this branch and generation is queued")
	ErrNotFound   = errors.New("queue: no such job")
	ErrNoPusher   = errors.New("queue: Run needs Options.Pusher")
	ErrRunning    = errors.New("queue: Run is already running")
	ErrCorrupt    = errors.New("queue: corrupt queue file")
)

// State is the queue's overall state.
type State string

// States.
const (
	StateOK             State = "ok"              // nothing failing
	StateRetrying       State = "retrying"        // a push failed and will be retried
	StateNeedsAttention State = "needs-attention" // stopped until Retry
	// StateCorrupt: a job file does not parse (Status.Corrupt names it);
	// it must be repaired or removed by hand.
	StateCorrupt State = "corrupt"
)

// CorruptJob is a job file that does not parse (ErrCorrupt).
type CorruptJob struct {
	File  string `json:"file"`  // path of the job file
	Error string `json:"error"` // what is wrong with it
}

// Job is one queued push: a generation's commit and tag for a branch.
type Job struct {
	Branch string `json:"branch"`
	Gen    uint64 `json:"gen"`
	Commit string `json:"commit"`        // 40 hex digits
	Tag    string `json:"tag,omitempty"` // local tag to push with it
	// Added is what the commit added over its parent, in bytes
	// (gitops.PushRequest.Added; 0: unknown).
	Added    int64     `json:"added,omitempty"`
	Enqueued time.Time `json:"enqueued"`
	Attempts int       `json:"attempts"` // failed attempts so far
	// Timeouts counts the consecutive attempts killed by the push timeout
	// or stall watchdog (gitops.ErrTimeout); see Options.MaxTimeouts.
	Timeouts    int       `json:"timeouts,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	NextAttempt time.Time `json:"next_attempt,omitzero"` // zero: as soon as possible
	// Publish, when set, is work done before the push (publish.go);
	// Commit is empty until it has committed the generation.
	Publish *Publish `json:"publish,omitempty"`
}

// Hold is the record of a stop that needs a person (file hold.json).
type Hold struct {
	Branch string    `json:"branch"`
	Gen    uint64    `json:"gen"`
	Kind   string    `json:"kind"` // e.g. "authentication failed", "remote diverged"
	Error  string    `json:"error"`
	Since  time.Time `json:"since"`
	// Checked is the last automatic re-check of an authentication
	// failure (see Options.AuthRecheck).
	Checked time.Time `json:"checked,omitzero"`
}

// Status is what the daemon shows about the queue.
type Status struct {
	State       State     `json:"state"`
	Pending     int       `json:"pending"`
	LastError   string    `json:"last_error,omitempty"`
	NextAttempt time.Time `json:"next_attempt,omitzero"` // earliest scheduled retry
	Hold        *Hold     `json:"hold,omitempty"`        // set in StateNeedsAttention
	// Publishing counts jobs whose Publish work (registry upload, commit)
	// is not done; PublishPendingBytes sums their WTXT sizes while their
	// Publisher has not sent them (Publish.Sent).
	Publishing          int   `json:"publishing,omitempty"`
	PublishPendingBytes int64 `json:"publish_pending_bytes,omitempty"`
	// Pushing is the attempt in progress (PushingFile), nil when none.
	Pushing *Pushing `json:"pushing,omitempty"`
	// Corrupt lists the job files that do not parse (State is then
	// StateCorrupt; Pending counts the others).
	Corrupt []CorruptJob `json:"corrupt,omitempty"`
}

// Clock is the time source of the queue (injectable for tests).
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Defaults of Options (configs.Default states the same values by these
// names).
const (
	DefaultBaseDelay   = 2 * time.Second
	DefaultMaxDelay    = 5 * time.Minute
	DefaultMaxTimeouts = 3
	DefaultAuthRecheck = 5 * time.Minute
)

// Options configures a Queue. Zero values take the defaults noted.
type Options struct {
	Pusher gitops.Pusher // required by Run only
	Logger *slog.Logger  // nil: discard
	Clock  Clock         // nil: the real clock
	// Rand returns a value in [0, 1) for backoff jitter; nil: math/rand/v2.
	Rand func() float64
	// BaseDelay is the first retry delay (default 2s); it doubles per
	// failed attempt up to MaxDelay (default 5m). The delay used is drawn
	// uniformly from [d/2, d).
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// PollInterval: how often a running queue re-reads its directory when
	// idle or held, to notice jobs, Retry or Drop from another process
	// (default 10s).
	PollInterval time.Duration
	// LogInterval: while pushes keep failing, at most one warning per
	// interval is logged (default 1m).
	LogInterval time.Duration
	// AuthRecheck: a stop caused by an authentication failure is re-checked
	// this often (one push attempt of the stopped job), so pushing resumes
	// by itself once the credential is fixed (default 5m; negative: only
	// Retry resumes). Other stops (diverged, rejected) wait for Retry.
	AuthRecheck time.Duration
	// MaxTimeouts: after this many consecutive attempts of a job ended by
	// the push timeout or the stall watchdog (gitops.ErrTimeout) the queue
	// stops as needs-attention (kind "git timed out") instead of retrying
	// for ever; like an authentication stop it is re-checked every
	// AuthRecheck. Default 3; negative: retry for ever.
	MaxTimeouts int
	// Shared opens a queue that another process (the daemon) may be
	// running: Open then leaves temp files alone instead of sweeping them,
	// since one may be that process's write in progress, and creates
	// nothing (the directory must exist; a queue without jobs/ is empty).
	// Operator tools (snapd queue, snapd status) set it.
	Shared bool
	// Publisher does the Publish work of jobs that carry it (publish.go).
	Publisher Publisher
	// AfterPush, when set, is called on Run's goroutine after a job's
	// push succeeded and its file was removed (durably): the generation
	// is on the remote and anyone reading the queue sees it gone
	// (snapd wait --pushed). It runs before the next job is attempted, so
	// never beside a push: housekeeping of the local repository (history
	// retention, repacks) goes here rather than in the Pusher, where it
	// would delay the job's removal.
	AfterPush func(ctx context.Context, j Job)
}

// Queue is a durable push queue in one directory. Methods are safe for
// concurrent use; several processes may open the same directory, but only
// one may Run it.
type Queue struct {
	dir  string
	opts Options
	log  *slog.Logger
	kick chan struct{}

	mu      sync.Mutex // serializes file updates within the process
	running bool

	retry backoff.Policy
	logs  backoff.LogLimiter // Run goroutine only
}

const (
	jobsDir  = "jobs"
	holdFile = "hold.json"
	jobExt   = ".json"
	maxFile  = 1 << 20
)

// Open opens (creating if needed) the queue directory dir and removes
// temporary files a crash left behind.
func Open(dir string, opts Options) (*Queue, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	if opts.BaseDelay <= 0 {
		opts.BaseDelay = DefaultBaseDelay
	}
	if opts.MaxDelay <= 0 {
		opts.MaxDelay = DefaultMaxDelay
	}
	if opts.MaxDelay < opts.BaseDelay {
		opts.MaxDelay = opts.BaseDelay
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 10 * time.Second
	}
	if opts.LogInterval <= 0 {
		opts.LogInterval = time.Minute
	}
	if opts.MaxTimeouts == 0 {
		opts.MaxTimeouts = DefaultMaxTimeouts
	}
	if opts.AuthRecheck == 0 {
		opts.AuthRecheck = DefaultAuthRecheck
	}
	if opts.Shared {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("queue: %w", err)
		}
	} else if err := os.MkdirAll(filepath.Join(dir, jobsDir), 0o755); err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	q := &Queue{dir: dir, opts: opts, log: opts.Logger, kick: make(chan struct{}, 1),
		retry: pushRetry(opts),
		logs:  backoff.LogLimiter{Every: opts.LogInterval}}
	if opts.Shared {
		return q, nil
	}
	if _, err := atomicfile.Sweep(dir); err != nil {
		return nil, fmt.Errorf("queue: sweep %s: %w", dir, err)
	}
	if err := os.Remove(filepath.Join(dir, PushingFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("queue: %w", err) // a killed run's record
	}
	bs, err := os.ReadDir(filepath.Join(dir, jobsDir))
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	for _, b := range bs {
		if b.IsDir() {
			if _, err := atomicfile.Sweep(filepath.Join(dir, jobsDir, b.Name())); err != nil {
				return nil, fmt.Errorf("queue: sweep: %w", err)
			}
		}
	}
	if err := q.sweepHold(); err != nil {
		return nil, fmt.Errorf("queue: sweep %s: %w", holdDir, err)
	}
	return q, nil
}

// Dir returns the queue directory.
func (q *Queue) Dir() string { return q.dir }

func (q *Queue) branchDir(branch string) string { return JobDirs(q.dir, branch)[1] }

// JobDirs returns the directories of queue directory dir that change
// when a job of branch is added or removed: the jobs directory and the
// branch's own (a reader may watch them; either may not exist yet).
func JobDirs(dir, branch string) [2]string {
	return [2]string{filepath.Join(dir, jobsDir), filepath.Join(dir, jobsDir, url.PathEscape(branch))}
}

func (q *Queue) jobPath(branch string, gen uint64) string {
	return filepath.Join(q.branchDir(branch), fmt.Sprintf("%020d%s", gen, jobExt))
}

func validate(j Job) error {
	if err := plumbing.NewBranchReferenceName(j.Branch).Validate(); err != nil || j.Branch == "" {
		return fmt.Errorf("%w: branch %q", ErrInvalidJob, j.Branch)
	}
	if j.Publish != nil {
		if err := validatePublish(j.Publish); err != nil {
			return err
		}
	}
	if j.Publish != nil && j.Commit == "" && j.Tag == "" {
		// not committed yet
	} else if b, err := hex.DecodeString(j.Commit); err != nil || len(b) != 20 || strings.ToLower(j.Commit) != j.Commit {
		return fmt.Errorf("%w: commit %q is not 40 lowercase hex digits", ErrInvalidJob, j.Commit)
	}
	if j.Tag != "" {
		if err := plumbing.NewTagReferenceName(j.Tag).Validate(); err != nil {
			return fmt.Errorf("%w: tag %q", ErrInvalidJob, j.Tag)
		}
	}
	return nil
}

// Enqueue stores a job durably (atomic write, fsync) and wakes Run.
// Enqueueing the same branch, generation and commit again is a no-op; the
// same branch and generation with another commit is ErrConflict. A job
// with Publish work first gets its file held (see Publish); enqueueing the
// same generation (same kind and root values) again is a no-op.
func (q *Queue) Enqueue(j Job) error {
	if err := validate(j); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.jobPath(j.Branch, j.Gen)
	if old, err := readJob(p); err == nil {
		if old.Commit == j.Commit && old.Tag == j.Tag && old.Publish == nil && j.Publish == nil || samePublish(old, j) {
			return nil
		}
		return fmt.Errorf("%w: %s generation %d is queued with commit %s", ErrConflict, j.Branch, j.Gen, old.Commit)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(q.branchDir(j.Branch), 0o755); err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	j.Attempts, j.LastError, j.NextAttempt = 0, "", time.Time{}
	if j.Publish != nil {
		p := *j.Publish
		held, err := q.hold(j)
		if err != nil {
			return err
		}
		p.WTXT = held
		j.Publish = &p
	}
	if j.Enqueued.IsZero() {
		j.Enqueued = q.opts.Clock.Now().UTC()
	}
	if err := writeJSON(p, j); err != nil {
		return err
	}
	q.wake()
	return nil
}

func (q *Queue) wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

func writeJSON(p string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	if err := atomicfile.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("queue: write %s: %w", p, err)
	}
	return nil
}

func readJSON(p string, v any) error {
	f, err := safeopen.Open(p, safeopen.NoFollow) // never blocks on a FIFO
	if errors.Is(err, safeopen.ErrNotRegular) {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() > maxFile {
		return fmt.Errorf("%w: %s: %d bytes exceeds %d", ErrCorrupt, p, st.Size(), maxFile)
	}
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, p, err)
	}
	return nil
}

func readJob(p string) (Job, error) {
	var j Job
	if err := readJSON(p, &j); err != nil {
		return j, err
	}
	if err := validate(j); err != nil {
		return j, fmt.Errorf("%w: %s: %v", ErrCorrupt, p, err)
	}
	if want := fmt.Sprintf("%020d%s", j.Gen, jobExt); filepath.Base(p) != want {
		return j, fmt.Errorf("%w: %s holds generation %d", ErrCorrupt, p, j.Gen)
	}
	return j, nil
}

// List returns the queued jobs: branches in byte order, each branch's jobs
// in generation order (the order Run pushes them).
func (q *Queue) List() ([]Job, error) { return q.list(nil) }

// list is List; with onCorrupt set, a job file that does not parse
// (ErrCorrupt) is passed to it and skipped instead of failing the list.
func (q *Queue) list(onCorrupt func(path string, err error)) ([]Job, error) {
	bs, err := os.ReadDir(filepath.Join(q.dir, jobsDir))
	if errors.Is(err, fs.ErrNotExist) && q.opts.Shared {
		return nil, nil // a shared open creates nothing: no jobs/ yet, no jobs
	}
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	var out []Job
	for _, b := range bs {
		if !b.IsDir() {
			continue
		}
		es, err := os.ReadDir(filepath.Join(q.dir, jobsDir, b.Name()))
		if err != nil {
			return nil, fmt.Errorf("queue: %w", err)
		}
		var names []string
		for _, e := range es {
			if strings.HasSuffix(e.Name(), jobExt) && !strings.HasPrefix(e.Name(), atomicfile.TempPrefix) {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names) // zero-padded generation numbers
		for _, n := range names {
			p := filepath.Join(q.dir, jobsDir, b.Name(), n)
			j, err := readJob(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue // pushed meanwhile
			}
			if onCorrupt != nil && errors.Is(err, ErrCorrupt) {
				onCorrupt(p, err)
				continue
			}
			if err != nil {
				return nil, err
			}
			out = append(out, j)
		}
	}
	sort.SliceStable(out, func(i, k int) bool { return out[i].Branch < out[k].Branch })
	return out, nil
}

func (q *Queue) readHold() (*Hold, error) {
	var h Hold
	err := readJSON(filepath.Join(q.dir, holdFile), &h)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &h, nil
}

// Status reports the queue's state from its directory, so it is accurate
// in any process that opened the directory. A job file that does not
// parse does not make Status fail: it is listed in Status.Corrupt and the
// state is StateCorrupt (whatever else holds the queue).
func (q *Queue) Status() (Status, error) {
	var corrupt []CorruptJob
	jobs, err := q.list(func(p string, err error) {
		corrupt = append(corrupt, CorruptJob{File: p, Error: err.Error()})
	})
	if err != nil {
		return Status{}, err
	}
	hold, err := q.readHold()
	if err != nil {
		return Status{}, err
	}
	st := Status{State: StateOK, Pending: len(jobs), Pushing: q.readPushing()}
	for _, j := range jobs {
		if j.Publish != nil && j.Commit == "" {
			st.Publishing++
			if !j.Publish.Sent {
				st.PublishPendingBytes += j.Publish.Bytes
			}
		}
	}
	if len(corrupt) > 0 {
		st.State, st.Corrupt, st.Hold = StateCorrupt, corrupt, hold
		if hold != nil {
			st.LastError = hold.Error
		}
		return st, nil
	}
	if hold != nil {
		st.State, st.LastError, st.Hold = StateNeedsAttention, hold.Error, hold
		return st, nil
	}
	for i, j := range jobs {
		head := i == 0 || jobs[i-1].Branch != j.Branch
		if j.Attempts > 0 {
			st.State = StateRetrying
			st.LastError = j.LastError
		}
		if head && !j.NextAttempt.IsZero() && (st.NextAttempt.IsZero() || j.NextAttempt.Before(st.NextAttempt)) {
			st.NextAttempt = j.NextAttempt
		}
	}
	return st, nil
}

// Retry clears a needs-attention stop and every job's backoff, so a
// running queue pushes again at once (within PollInterval when Run is in
// another process).
func (q *Queue) Retry() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := os.Remove(filepath.Join(q.dir, holdFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("queue: %w", err)
	}
	jobs, err := q.List()
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if j.Attempts == 0 && j.NextAttempt.IsZero() && j.Timeouts == 0 {
			continue
		}
		j.Attempts, j.NextAttempt, j.Timeouts = 0, time.Time{}, 0
		if err := writeJSON(q.jobPath(j.Branch, j.Gen), j); err != nil {
			return err
		}
	}
	q.wake()
	return nil
}

// Drop removes one job without pushing it (its commit still reaches the
// remote with any later generation of the branch, as their ancestor). A
// needs-attention stop caused by that job is cleared. A job whose Publish
// work has not committed its generation yet has no commit: dropping it
// leaves that generation out of Git, so the next one cannot chain to it
// (its commit then stops the queue as a local problem). Its held files
// are removed.
func (q *Queue) Drop(branch string, gen uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, jerr := readJob(q.jobPath(branch, gen))
	if err := os.Remove(q.jobPath(branch, gen)); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s generation %d", ErrNotFound, branch, gen)
	} else if err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	if err := atomicfile.SyncDir(q.branchDir(branch)); err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	if jerr == nil {
		q.release(j)
	}
	if h, err := q.readHold(); err == nil && h != nil && h.Branch == branch && h.Gen == gen {
		if err := os.Remove(filepath.Join(q.dir, holdFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("queue: %w", err)
		}
	}
	q.wake()
	return nil
}

// ParseJobID parses "branch@gen" (as `snapd queue drop` takes it).
func ParseJobID(s string) (branch string, gen uint64, err error) {
	i := strings.LastIndexByte(s, '@')
	if i <= 0 {
		return "", 0, fmt.Errorf("%w: job id %q: want branch@generation", ErrInvalidJob, s)
	}
	gen, err = strconv.ParseUint(s[i+1:], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("%w: job id %q: generation: %v", ErrInvalidJob, s, err)
	}
	return s[:i], gen, nil
}

// ID returns the job's "branch@gen" identifier.
func (j Job) ID() string { return fmt.Sprintf("%s@%d", j.Branch, j.Gen) }
