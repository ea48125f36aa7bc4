package backoff

import (
	"context"
	"errors"
	"time"
)

// ErrPermanent is what an error marked by Permanent matches with
// errors.Is: a failure that retrying cannot fix.
var ErrPermanent = errors.New("permanent failure")

// permanentError marks err as permanent (Permanent).
type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() []error { return []error{e.err, ErrPermanent} }

// Permanent marks err as a failure that retrying cannot fix: Retry
// returns it at once, whatever the policy's Retryable says. Its text is
// err's; errors.Is and errors.As see err (and ErrPermanent) through it.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err (or an error it wraps) was marked by
// Permanent.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// afterError marks err as retryable after a delay the callee chose (a
// server's Retry-After), instead of the policy's.
type afterError struct {
	err   error
	delay time.Duration
}

func (e *afterError) Error() string { return e.err.Error() }
func (e *afterError) Unwrap() error { return e.err }

// RetryAfter marks err as retryable after d (d < 0 counts as 0) instead
// of the policy's delay, as a server's Retry-After asks; the policy's
// Retryable is not consulted, but Permanent still wins and MaxAttempts
// still bounds the attempts. RetryAfter(nil, d) is nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &afterError{err, max(d, 0)}
}

// unmark returns err without the outermost marks Permanent and
// RetryAfter put on it: what fn returned, as the caller should see it.
func unmark(err error) error {
	for {
		switch e := err.(type) {
		case *permanentError:
			err = e.err
		case *afterError:
			err = e.err
		default:
			return err
		}
	}
}

// Retries reports whether p retries err: err is not nil, not marked
// Permanent, and p.Retryable (when set) says so; an error marked by
// RetryAfter is retried unless it is also marked Permanent.
func (p Policy) Retries(err error) bool {
	if err == nil || IsPermanent(err) {
		return false
	}
	var a *afterError
	if errors.As(err, &a) {
		return true
	}
	return p.Retryable == nil || p.Retryable(err)
}

// Next decides what follows the n-th consecutive failure err (n counts
// from 1): retry after delay (Delay(n), or the delay RetryAfter put on
// err), or not (retry false: err is permanent by Retries, or n reached
// MaxAttempts). It is the rule Retry applies between attempts, for
// callers that keep their own schedule (a durable queue records the next
// attempt's time instead of sleeping).
func (p Policy) Next(n int, err error) (delay time.Duration, retry bool) {
	if !p.Retries(err) || (p.MaxAttempts > 0 && n >= p.MaxAttempts) {
		return 0, false
	}
	var a *afterError
	if errors.As(err, &a) {
		return a.delay, true
	}
	return p.Delay(n), true
}

// Failure is one failed attempt that Retry retries, as OnRetry sees it.
type Failure struct {
	// Attempt is the failed attempt's number, counting from 1.
	Attempt int
	// Err is what fn returned, without backoff's marks.
	Err error
	// Delay is the wait before the next attempt.
	Delay time.Duration
	// Log reports whether to log this failure by the LogLimiter's rule
	// (always true without a Limiter); Failures is the streak's length
	// and Suppressed the failures not logged since the last log (both 0
	// without a Limiter).
	Log                  bool
	Failures, Suppressed int
}

// Retry calls fn until it succeeds, fails for good, or ctx ends, waiting
// p.Next's delay between attempts. After each failure that is retried it
// calls p.OnRetry (when set) with the failure, then waits with p.Sleep
// (nil: Sleep, the real clock). It returns the number of attempts made and
// fn's last error without backoff's marks (nil on success):
//
//   - a failure that p does not retry (Permanent, p.Retryable false, or
//     the MaxAttempts-th attempt) ends Retry with that failure;
//   - when ctx has ended after an attempt failed, Retry returns that
//     failure without waiting;
//   - when ctx ends during a wait, Retry returns what p.Sleep returned
//     (ctx.Err() for Sleep).
//
// With p.Limiter set, each retried failure goes through
// Limiter.Failure(p.Now(), err.Error()) and the outcome is in the
// Failure handed to OnRetry; success resets the Limiter. Retry itself
// logs nothing. fn runs on the caller's goroutine; Retry is as safe for
// concurrent use as fn, OnRetry and Limiter are (a Limiter is not).
func Retry(ctx context.Context, p Policy, fn func() error) (attempts int, err error) {
	sleep := p.Sleep
	if sleep == nil {
		sleep = Sleep
	}
	now := p.Now
	if now == nil {
		now = time.Now
	}
	for attempts = 1; ; attempts++ {
		err = fn()
		if err == nil {
			if p.Limiter != nil {
				p.Limiter.Reset()
			}
			return attempts, nil
		}
		delay, retry := p.Next(attempts, err)
		if !retry || ctx.Err() != nil {
			return attempts, unmark(err)
		}
		f := Failure{Attempt: attempts, Err: unmark(err), Delay: delay, Log: true}
		if p.Limiter != nil {
			f.Log, f.Failures, f.Suppressed = p.Limiter.Failure(now(), f.Err.Error())
		}
		if p.OnRetry != nil {
			p.OnRetry(f)
		}
		if serr := sleep(ctx, delay); serr != nil {
			return attempts, serr
		}
	}
}
