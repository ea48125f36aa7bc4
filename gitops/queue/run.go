package queue

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/backoff"
)

// Run pushes queued jobs until ctx is done, then returns ctx.Err(). Jobs of
// a branch are pushed one at a time in generation order; a retryable failure
// reschedules the branch's head job with backoff; a failure that needs a
// person (gitops.NeedsAttention) writes hold.json and stops all pushing
// until Retry (an authentication failure is re-checked every AuthRecheck). Run starts no goroutine that outlives it. Cancelling ctx
// mid-push leaves the job queued; the next Run finds out whether the remote
// got it.
func (q *Queue) Run(ctx context.Context) error {
	if q.opts.Pusher == nil {
		return ErrNoPusher
	}
	q.mu.Lock()
	if q.running {
		q.mu.Unlock()
		return ErrRunning
	}
	q.running = true
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.running = false
		q.mu.Unlock()
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		wait, err := q.step(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			q.logFailure("queue error", err, q.opts.Clock.Now())
			wait = q.opts.PollInterval
		}
		if wait <= 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.kick:
		case <-q.opts.Clock.After(wait):
		}
	}
}

// step pushes every job that is due and returns how long to wait.
func (q *Queue) step(ctx context.Context) (time.Duration, error) {
	hold, err := q.readHold()
	if err != nil {
		return q.opts.PollInterval, err
	}
	if hold != nil {
		if hold.Kind != gitops.ErrAuth.Error() && hold.Kind != gitops.ErrTimeout.Error() || q.opts.AuthRecheck < 0 {
			return q.opts.PollInterval, nil
		}
		last := hold.Since
		if hold.Checked.After(last) {
			last = hold.Checked
		}
		if d := last.Add(q.opts.AuthRecheck).Sub(q.opts.Clock.Now()); d > 0 {
			return min(d, q.opts.PollInterval), nil
		}
		// Due: one attempt below; success clears the hold.
	}
	jobs, err := q.List()
	if err != nil {
		return 0, err
	}
	wait := q.opts.PollInterval
	blocked := map[string]bool{}
	for _, j := range jobs {
		if blocked[j.Branch] {
			continue
		}
		now := q.opts.Clock.Now()
		if j.NextAttempt.After(now) {
			blocked[j.Branch] = true
			wait = min(wait, j.NextAttempt.Sub(now))
			continue
		}
		err := q.attempt(ctx, &j)
		if ctx.Err() != nil {
			return 0, ctx.Err() // abandoned: the job stays as it was
		}
		now = q.opts.Clock.Now()
		if err == nil {
			if err := q.done(j); err != nil {
				return 0, err
			}
			if hold != nil {
				if err := q.clearHold(); err != nil {
					return 0, err
				}
				q.log.Info("push works again; queue resumed", "job", j.ID(), "stopped_since", hold.Since)
				hold = nil
			}
			q.logSuccess(j)
			if q.opts.AfterPush != nil {
				q.opts.AfterPush(ctx, j)
			}
			continue
		}
		blocked[j.Branch] = true
		if errors.Is(err, gitops.ErrTimeout) {
			j.Timeouts++
		} else {
			j.Timeouts = 0
		}
		stuck := q.opts.MaxTimeouts > 0 && j.Timeouts >= q.opts.MaxTimeouts
		if !q.retry.Retries(err) || stuck {
			h := Hold{Branch: j.Branch, Gen: j.Gen, Kind: kindOf(err), Error: err.Error(), Since: now.UTC()}
			if stuck {
				h.Kind = gitops.ErrTimeout.Error()
				j.Attempts++
				j.LastError = err.Error()
				if werr := q.update(j); werr != nil {
					return 0, werr
				}
			}
			if hold != nil && hold.Kind == h.Kind {
				// A failed re-check: keep the original time.
				h.Since, h.Checked = hold.Since, now.UTC()
			}
			if werr := q.setHold(h, j); werr != nil {
				return 0, werr
			}
			if log, _, _ := q.logs.Failure(now, "needs attention"); log || hold == nil {
				q.log.Error("push needs attention; queue stopped until retry", "job", j.ID(), "kind", h.Kind, "err", err)
				q.logs.Logged(now, "needs attention")
			}
			return q.opts.PollInterval, nil
		}
		if hold != nil {
			// The re-check failed for another reason: stay stopped.
			h := *hold
			h.Checked = now.UTC()
			if werr := q.setHold(h, j); werr != nil {
				return 0, werr
			}
			return q.opts.PollInterval, nil
		}
		j.Attempts++
		j.LastError = err.Error()
		delay, _ := q.retry.Next(j.Attempts, err)
		j.NextAttempt = now.Add(delay).UTC()
		if werr := q.update(j); werr != nil {
			return 0, werr
		}
		q.logFailure("push failed; will retry", err, now, "job", j.ID(), "attempt", j.Attempts, "next_attempt", j.NextAttempt)
		wait = min(wait, j.NextAttempt.Sub(now))
	}
	return wait, nil
}

// pushRetry is the queue's retry rule (backoff.Policy.Next, the rule
// backoff.Retry applies, on the queue's own durable schedule): capped
// exponential delays with jitter from BaseDelay to MaxDelay; a failure
// the pusher classed as needing a person (gitops.NeedsAttention:
// authentication, divergence, a rejection, a local error), or marked
// backoff.Permanent, is not retried but stops the queue.
func pushRetry(opts Options) backoff.Policy {
	return backoff.Policy{Base: opts.BaseDelay, Max: opts.MaxDelay, Jitter: true, Rand: opts.Rand,
		Retryable: func(err error) bool { return !gitops.NeedsAttention(err) }}
}

func kindOf(err error) string {
	for _, k := range []error{gitops.ErrAuth, gitops.ErrDiverged, gitops.ErrRejected, gitops.ErrLocal} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	return "error"
}

func (q *Queue) done(j Job) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.jobPath(j.Branch, j.Gen)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("queue: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	q.release(j)
	return nil
}

// update rewrites a job unless it was dropped meanwhile.
func (q *Queue) update(j Job) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.jobPath(j.Branch, j.Gen)
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return writeJSON(p, j)
}

func (q *Queue) clearHold() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := os.Remove(filepath.Join(q.dir, holdFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("queue: %w", err)
	}
	return nil
}

func (q *Queue) setHold(h Hold, j Job) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, err := os.Stat(q.jobPath(j.Branch, j.Gen)); errors.Is(err, fs.ErrNotExist) {
		return nil // dropped meanwhile
	}
	return writeJSON(filepath.Join(q.dir, holdFile), h)
}

// logFailure logs the first failure of a streak and then at most one per
// LogInterval, counting what it suppressed.
func (q *Queue) logFailure(msg string, err error, now time.Time, args ...any) {
	log, failures, suppressed := q.logs.Failure(now, msg)
	if !log {
		return
	}
	args = append(args, "err", err, "failures", failures, "suppressed", suppressed)
	q.log.Warn(msg, args...)
}

func (q *Queue) logSuccess(j Job) {
	if failing, failures := q.logs.Failing(); failing {
		q.log.Info("push recovered", "job", j.ID(), "failures", failures)
	}
	q.logs.Reset()
	q.log.Debug("pushed", "job", j.ID(), "commit", j.Commit)
}
