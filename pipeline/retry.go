package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/snapd-ml/snapd/internal/backoff"
)

// permanent marks an error that retrying cannot fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// remoteUnavailable marks a failed read from the Git remote that a later
// attempt may get (a resume fetching history retention cut).
type remoteUnavailable struct{ err error }

func (r remoteUnavailable) Error() string { return r.err.Error() }
func (r remoteUnavailable) Unwrap() error { return r.err }

// transient reports whether err may go away by itself: disk full, quota,
// I/O errors, resource exhaustion, a source still being written
// (incomplete), the remote not answering (remoteUnavailable).
func transient(err error) bool {
	var p permanent
	if errors.As(err, &p) {
		return false
	}
	var inc incomplete
	var ru remoteUnavailable
	if errors.As(err, &inc) || errors.As(err, &ru) {
		return true
	}
	for _, e := range transientErrnos() {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// retry runs fn until it succeeds, fails permanently or ctx ends
// (backoff.Retry), backing off exponentially (RetryBase..RetryMax) after
// transient errors; each retried failure is counted
// (snapd_retries_total), kept in last_error and logged by
// backoff.LogLimiter's rule (the first failure, a new error, else at most
// one a minute). The failing request holds the line: later requests wait
// (their order is the chain's order).
func (d *Daemon) retry(ctx context.Context, stage string, gen uint64, fn func() error) error {
	cfg := d.config()
	_, err := backoff.Retry(ctx, backoff.Policy{Base: cfg.RetryBase, Max: cfg.RetryMax, Retryable: transient, Now: d.now, Limiter: &backoff.LogLimiter{},
		OnRetry: func(f backoff.Failure) {
			d.m.retries.WithLabelValues(stage).Inc()
			d.fail(stage, gen, fmt.Errorf("attempt %d (will retry in %s): %w", f.Attempt, f.Delay, f.Err))
			if f.Log {
				d.log.Warn("transient failure, retrying", "stage", stage, "gen", gen, "attempt", f.Attempt, "retry_in", f.Delay, "suppressed", f.Suppressed, "error", f.Err)
			}
		}}, fn)
	return err
}
