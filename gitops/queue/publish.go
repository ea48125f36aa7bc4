package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/atomicfile"
)

// ErrNoPublisher: a job carries Publish work but Options.Publisher is nil.
var ErrNoPublisher = errors.New("queue: a job needs Options.Publisher")

// holdDir holds the files publish jobs need until they are done.
const holdDir = "hold"

// Publish is work a job carries that must be finished before its Git push
// (e.g. upload a generation's tensor bytes somewhere, then commit it).
// Options.Publisher does it. A job with Publish and an empty Commit is not
// committed yet; once the Publisher has set Commit the job is pushed like
// any other, and a job whose Publisher leaves Commit empty (e.g. a rank's
// part, which another node commits) is done when Publish returns.
//
// The queue knows the work by Kind only: how far it got is State, which
// the Publisher alone writes and reads, and Sent, which it sets once the
// bytes have left this machine (Status counts the Bytes of jobs not Sent
// as pending).
//
// Durability: Enqueue hard-links (or, across file systems, copies) WTXT
// into the queue's hold/ directory before the job file is written and
// points WTXT there, so the bytes survive the ring trimming them. A
// Publisher may keep files of its own beside the held WTXT, named WTXT +
// "." + a suffix (e.g. a skeleton); the held files are removed with the
// job (done or Drop).
//
// A job file of the format before State (the Publisher's progress as the
// keys repository, manifest, skeleton, uploaded_bytes and skipped_bytes of
// publish) still loads: those keys become State as they were (legacy.go).
type Publish struct {
	// Kind names the work for the Publisher, e.g. "oci-generation".
	Kind string `json:"kind"`
	// WTXT is the generation's file (in hold/ once enqueued).
	WTXT string `json:"wtxt"`
	// Bytes is WTXT's size (for snapd status: bytes pending upload).
	Bytes int64 `json:"bytes"`
	// Header carries the generation's header values for the commit.
	Header *gitops.Header `json:"header,omitempty"`
	// Requested is when the generation was requested (the request log's
	// time), for the request-to-pushed latency; zero when unknown (a
	// generation re-enqueued from the ring at a start).
	Requested time.Time `json:"requested,omitzero"`
	// ResumedFrom: the generation is the first of a run resumed from this
	// generation (its commit is preceded by a resume record); 0: not.
	ResumedFrom uint64 `json:"resumed_from,omitempty"`
	// Sent: the Publisher has sent the bytes on (only the commit, if any,
	// is left); set by the Publisher with the State that records it.
	Sent bool `json:"sent,omitempty"`
	// State is the Publisher's record of its progress (a JSON value it
	// alone interprets), persisted through save before the next step.
	State json.RawMessage `json:"state,omitempty"`
}

// Publisher does the Publish work of a job. Publish gets the job as last
// persisted and returns it with its progress recorded (Commit and Tag set
// once the generation is committed to Git). It must be idempotent: after a
// crash or a failure it is called again with the job as last saved, so it
// re-checks what is already done (the registry by HEAD, Git by the branch
// head) instead of doing it twice. save persists an intermediate state of
// the job (e.g. after the manifest is pushed, before the commit).
//
// Errors are handled like push errors: a gitops.NeedsAttention error
// (e.g. a *gitops.PushError with Kind gitops.ErrAuth for a refused
// registry credential) stops the queue until Retry (auth failures are
// re-checked every AuthRecheck); any other error is retried with backoff.
// Later jobs of the branch wait, so generations land in order.
type Publisher interface {
	Publish(ctx context.Context, j Job, save func(Job) error) (Job, error)
}

func validatePublish(p *Publish) error {
	if p.Kind == "" || !wtxt.IsToken(p.Kind) {
		return fmt.Errorf("%w: publish kind %q", ErrInvalidJob, p.Kind)
	}
	if p.WTXT == "" || !filepath.IsAbs(p.WTXT) {
		return fmt.Errorf("%w: publish file %q is not an absolute path", ErrInvalidJob, p.WTXT)
	}
	if p.Bytes < 0 {
		return fmt.Errorf("%w: negative byte count", ErrInvalidJob)
	}
	if len(p.State) > 0 && !json.Valid(p.State) {
		return fmt.Errorf("%w: publish state is not JSON", ErrInvalidJob)
	}
	return nil
}

// samePublish reports whether two jobs for one branch and generation
// describe the same generation (an Enqueue repeated after a crash).
func samePublish(a, b Job) bool {
	if a.Publish == nil || b.Publish == nil || a.Publish.Kind != b.Publish.Kind {
		return false
	}
	ha, hb := a.Publish.Header, b.Publish.Header
	return ha != nil && hb != nil && ha.Root.SHA256All == hb.Root.SHA256All && ha.Root.MerkleThis == hb.Root.MerkleThis
}

func (q *Queue) holdPath(j Job) string {
	return filepath.Join(q.dir, holdDir, fmt.Sprintf("%s@%020d.wtxt", url.PathEscape(j.Branch), j.Gen))
}

// hold makes the queue's own durable reference to p.WTXT (a hard link, or
// a copy across file systems) and returns its path.
func (q *Queue) hold(j Job) (string, error) {
	dst := q.holdPath(j)
	if j.Publish.WTXT == dst {
		return dst, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("queue: %w", err)
	}
	os.Remove(dst) // a leftover of a crash before the job file was written
	if err := os.Link(j.Publish.WTXT, dst); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("queue: hold %s: %w", j.Publish.WTXT, err)
		}
		if err := copyFile(j.Publish.WTXT, dst); err != nil {
			return "", fmt.Errorf("queue: hold %s: %w", j.Publish.WTXT, err)
		}
	}
	if err := atomicfile.SyncDir(filepath.Dir(dst)); err != nil {
		return "", fmt.Errorf("queue: %w", err)
	}
	return dst, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.WriteFrom(dst, 0o644, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// release removes the files held for a publish job (only inside hold/):
// its WTXT and the Publisher's files beside it.
func (q *Queue) release(j Job) {
	if j.Publish == nil {
		return
	}
	hd := filepath.Join(q.dir, holdDir)
	if filepath.Dir(j.Publish.WTXT) != hd {
		return
	}
	es, err := os.ReadDir(hd)
	if err != nil {
		return
	}
	base := filepath.Base(j.Publish.WTXT)
	for _, e := range es {
		if heldBy(e.Name(), base) {
			os.Remove(filepath.Join(hd, e.Name()))
		}
	}
}

// heldBy reports whether the file name in hold/ belongs to the job whose
// held WTXT is named base: the WTXT itself or a Publisher's file beside it.
func heldBy(name, base string) bool {
	return name == base || strings.HasPrefix(name, base+".")
}

// sweepHold removes held files no queued job refers to (a crash between
// the hold and the job file, or after a job's file was removed).
func (q *Queue) sweepHold() error {
	hd := filepath.Join(q.dir, holdDir)
	es, err := os.ReadDir(hd)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := atomicfile.Sweep(hd); err != nil {
		return err
	}
	jobs, err := q.List()
	if err != nil {
		// A corrupt job file is reported where it is read (Run,
		// Status); without a complete list nothing is swept.
		return nil
	}
	var bases []string
	for _, j := range jobs {
		if p := j.Publish; p != nil && filepath.Dir(p.WTXT) == hd {
			bases = append(bases, filepath.Base(p.WTXT))
		}
	}
	for _, e := range es {
		if strings.HasPrefix(e.Name(), atomicfile.TempPrefix) {
			continue
		}
		kept := false
		for _, b := range bases {
			if heldBy(e.Name(), b) {
				kept = true
				break
			}
		}
		if !kept {
			os.Remove(filepath.Join(hd, e.Name()))
		}
	}
	return nil
}

// attempt does a job's Publish work (when not done yet) and its push.
func (q *Queue) attempt(ctx context.Context, j *Job) error {
	tr := q.startPushing(*j)
	defer tr.end()
	if j.Publish != nil && j.Commit == "" {
		tr.phase(PhasePublish, "")
		if q.opts.Publisher == nil {
			return &gitops.PushError{Branch: j.Branch, Kind: gitops.ErrLocal, Err: ErrNoPublisher}
		}
		// The job as the Publisher last saved it is what a failure
		// below records its attempt on (the progress is kept).
		adopt := func(nj Job) error {
			nj.Branch, nj.Gen = j.Branch, j.Gen
			nj.Attempts, nj.Timeouts, nj.LastError, nj.NextAttempt = j.Attempts, j.Timeouts, j.LastError, j.NextAttempt
			if err := validate(nj); err != nil {
				return &gitops.PushError{Branch: j.Branch, Kind: gitops.ErrLocal, Err: fmt.Errorf("publisher: %v", err)}
			}
			*j = nj
			return nil
		}
		save := func(nj Job) error {
			if err := adopt(nj); err != nil {
				return err
			}
			return q.update(*j)
		}
		nj, err := q.opts.Publisher.Publish(ctx, *j, save)
		if err != nil {
			return err
		}
		if err := adopt(nj); err != nil {
			return err
		}
		if j.Commit == "" {
			return nil // nothing to push
		}
		if err := q.update(*j); err != nil {
			return err
		}
	}
	tr.p.Commit = j.Commit
	return q.opts.Pusher.Push(ctx, gitops.PushRequest{Branch: j.Branch, Commit: plumbing.NewHash(j.Commit), Tag: j.Tag, Added: j.Added, Progress: tr.progress})
}

// Publishers dispatches to a Publisher by Publish.Kind, for a queue that
// carries several kinds of work (e.g. whole generations and per-rank
// manifests). An unknown kind stops the queue (needs attention).
type Publishers map[string]Publisher

// Publish implements Publisher.
func (m Publishers) Publish(ctx context.Context, j Job, save func(Job) error) (Job, error) {
	p := m[j.Publish.Kind]
	if p == nil {
		return j, &gitops.PushError{Branch: j.Branch, Kind: gitops.ErrLocal, Err: fmt.Errorf("queue: no publisher for kind %q", j.Publish.Kind)}
	}
	return p.Publish(ctx, j, save)
}
