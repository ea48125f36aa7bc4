// Package backoff is snapd's one retry policy, its one retry loop and its
// one rule for logging during an outage, shared by the stage retry
// (pipeline), the pull-request publisher, the Git push queue and the
// GitHub transport — each with its own values.
//
// A Policy is capped exponential backoff, like restic's retry backend and
// Prometheus remote-write: Base after the first failure, doubled per
// further failure up to Max, optionally jittered (drawn uniformly from
// [d/2, d), so that many retriers do not hit a recovering server at once).
// Delay does not sleep: callers that keep their own schedule wait on their
// own clock and context, so tests drive time explicitly.
//
// Retry(ctx, policy, fn) is the one retry loop: fn's errors are classed by
// the callee (Permanent marks one that retrying cannot fix, RetryAfter one
// whose wait the server chose; Policy.Retryable classes the rest), waits
// go through an injectable Sleep, and an optional LogLimiter and OnRetry
// hook keep the caller's logging, metrics and state. Policy.Next is the
// same rule for callers that record the next attempt instead of sleeping
// (the durable push queue).
//
// A LogLimiter logs the first failure of a streak, a failure of another
// kind than the last one logged, and otherwise at most one per interval,
// counting what it suppressed; Reset ends the streak (on success), so the
// next outage is logged at once.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is a capped exponential backoff. The zero value waits 0.
type Policy struct {
	// Base is the delay after the first failure.
	Base time.Duration
	// Max caps the delay; a Max below Base is taken as Base.
	Max time.Duration
	// Jitter draws the delay d uniformly from [d/2, d).
	Jitter bool
	// Rand returns a value in [0, 1) for the jitter; nil: math/rand/v2.
	Rand func() float64

	// The fields below are read by Retries, Next and Retry only.

	// Retryable classes an error that is not marked Permanent: true
	// retries it. nil retries every such error.
	Retryable func(error) bool
	// MaxAttempts bounds the attempts (<= 0: no bound).
	MaxAttempts int
	// Sleep waits between attempts (nil: Sleep, the real clock); it
	// returns an error (ctx.Err()) when ctx ends first. Tests inject one.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock the Limiter is fed (nil: time.Now).
	Now func() time.Time
	// Limiter, when set, rates the logs of a streak of failures (the
	// error's text is the kind); Retry resets it on success.
	Limiter *LogLimiter
	// OnRetry, when set, sees each failure Retry retries, before the
	// wait: the caller's logging, metrics and state go here.
	OnRetry func(Failure)
}

// Delay returns the delay after the n-th consecutive failure (n < 1 counts
// as 1): min(Base·2^(n-1), Max), jittered if asked. It never overflows.
func (p Policy) Delay(n int) time.Duration {
	if p.Base <= 0 {
		return 0
	}
	limit := max(p.Max, p.Base)
	d := p.Base
	for i := 1; i < n && d < limit; i++ {
		if d > limit/2 {
			d = limit
			break
		}
		d *= 2
	}
	d = min(d, limit)
	if !p.Jitter {
		return d
	}
	r := p.Rand
	if r == nil {
		r = rand.Float64
	}
	half := d / 2
	return half + time.Duration(r()*float64(d-half))
}

// DefaultLogInterval is the LogLimiter interval where a caller sets none.
const DefaultLogInterval = time.Minute

// LogLimiter rate-limits the logs of a streak of failures. It is not safe
// for concurrent use (one per retrying goroutine).
type LogLimiter struct {
	// Every is the least time between two logs of one streak (<= 0:
	// DefaultLogInterval).
	Every time.Duration

	failing    bool
	last       time.Time
	kind       string
	failures   int
	suppressed int
}

// Failure records a failure of the given kind (the caller's class of it,
// e.g. the error's text) at now and reports whether to log it: the first
// of a streak, one of another kind than the last logged, or one at least
// Every after the last logged. When it does, failures is the streak's
// length so far and suppressed how many failures since the last log were
// not logged.
func (l *LogLimiter) Failure(now time.Time, kind string) (log bool, failures, suppressed int) {
	l.failures++
	every := l.Every
	if every <= 0 {
		every = DefaultLogInterval
	}
	if l.failing && kind == l.kind && now.Sub(l.last) < every {
		l.suppressed++
		return false, l.failures, l.suppressed
	}
	suppressed = l.suppressed
	l.failing, l.last, l.kind, l.suppressed = true, now, kind, 0
	return true, l.failures, suppressed
}

// Logged records a log made at now outside the rule (an event that must
// be logged whatever the interval, such as a new kind of failure): the
// interval restarts and the suppressed count is cleared.
func (l *LogLimiter) Logged(now time.Time, kind string) {
	l.failing, l.last, l.kind, l.suppressed = true, now, kind, 0
}

// Failing reports whether a streak is under way, and its length.
func (l *LogLimiter) Failing() (bool, int) { return l.failing, l.failures }

// Reset ends the streak (call it on success).
func (l *LogLimiter) Reset() { *l = LogLimiter{Every: l.Every} }

// Sleep waits d or until ctx is done, whichever comes first, and returns
// ctx.Err() in the second case: the wait between attempts for callers on
// the real clock (tests inject their own sleep).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
