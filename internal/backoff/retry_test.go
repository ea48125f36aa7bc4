package backoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"
)

var (
	errFlaky = errors.New("flaky")
	errFatal = errors.New("fatal")
)

// fakeSleep records the waits and never blocks; cancel, when set, ends
// the context at the given wait (1-based) instead of returning.
type fakeSleep struct {
	waits    []time.Duration
	cancelAt int
	cancel   context.CancelFunc
}

func (s *fakeSleep) sleep(ctx context.Context, d time.Duration) error {
	s.waits = append(s.waits, d)
	if s.cancelAt > 0 && len(s.waits) == s.cancelAt {
		s.cancel()
	}
	return ctx.Err()
}

// Every path of Retry, with a scripted fn and a fake sleep: what it
// returns, how many attempts, which waits, which failures OnRetry saw.
func TestRetry(t *testing.T) {
	base := Policy{Base: time.Second, Max: 4 * time.Second}
	type tc struct {
		name      string
		policy    func(Policy) Policy
		errs      []error // fn's results in order; past the end: nil
		cancelAt  int     // cancel the context during this wait
		cancelNow bool    // cancel the context before Retry
		wantErr   error   // compared with errors.Is; nil: success
		wantSame  bool    // the error is exactly wantErr (no marks left)
		attempts  int
		waits     []time.Duration
	}
	for _, c := range []tc{
		{name: "first try", errs: nil, attempts: 1, waits: nil},
		{name: "retryable then success", errs: []error{errFlaky, errFlaky, errFlaky, errFlaky},
			attempts: 5, waits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}},
		{name: "permanent mark stops at once", errs: []error{errFlaky, Permanent(errFatal)},
			wantErr: errFatal, wantSame: true, attempts: 2, waits: []time.Duration{time.Second}},
		{name: "wrapped permanent mark stops", errs: []error{fmt.Errorf("write: %w", Permanent(errFatal))},
			wantErr: errFatal, attempts: 1},
		{name: "Retryable false stops", policy: func(p Policy) Policy {
			p.Retryable = func(err error) bool { return errors.Is(err, errFlaky) }
			return p
		}, errs: []error{errFlaky, errFatal}, wantErr: errFatal, wantSame: true, attempts: 2, waits: []time.Duration{time.Second}},
		{name: "MaxAttempts bounds", policy: func(p Policy) Policy { p.MaxAttempts = 3; return p },
			errs: []error{errFlaky, errFlaky, errFlaky, errFlaky}, wantErr: errFlaky, wantSame: true, attempts: 3,
			waits: []time.Duration{time.Second, 2 * time.Second}},
		{name: "RetryAfter overrides the delay", errs: []error{RetryAfter(errFlaky, 42*time.Second), RetryAfter(errFlaky, -1)},
			attempts: 3, waits: []time.Duration{42 * time.Second, 0}},
		{name: "RetryAfter retries what Retryable refuses", policy: func(p Policy) Policy {
			p.Retryable = func(error) bool { return false }
			return p
		}, errs: []error{RetryAfter(errFatal, time.Minute)}, attempts: 2, waits: []time.Duration{time.Minute}},
		{name: "Permanent wins over RetryAfter", errs: []error{Permanent(RetryAfter(errFatal, time.Minute))},
			wantErr: errFatal, wantSame: true, attempts: 1},
		{name: "the last error keeps its marks off", policy: func(p Policy) Policy { p.MaxAttempts = 1; return p },
			errs: []error{RetryAfter(errFlaky, time.Minute)}, wantErr: errFlaky, wantSame: true, attempts: 1},
		{name: "cancelled during a wait", errs: []error{errFlaky, errFlaky, errFlaky}, cancelAt: 2,
			wantErr: context.Canceled, wantSame: true, attempts: 2, waits: []time.Duration{time.Second, 2 * time.Second}},
		{name: "cancelled before: the failure, no wait", errs: []error{errFlaky}, cancelNow: true,
			wantErr: errFlaky, wantSame: true, attempts: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.cancelNow {
				cancel()
			}
			s := &fakeSleep{cancelAt: c.cancelAt, cancel: cancel}
			p := base
			if c.policy != nil {
				p = c.policy(p)
			}
			p.Sleep = s.sleep
			var seen []Failure
			p.OnRetry = func(f Failure) { seen = append(seen, f) }
			calls := 0
			n, err := Retry(ctx, p, func() error {
				calls++
				if calls <= len(c.errs) {
					return c.errs[calls-1]
				}
				return nil
			})
			if n != c.attempts || calls != c.attempts {
				t.Errorf("attempts %d (fn called %d times), want %d", n, calls, c.attempts)
			}
			switch {
			case c.wantErr == nil && err != nil:
				t.Errorf("err = %v, want nil", err)
			case c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Errorf("err = %v, want %v", err, c.wantErr)
			case c.wantSame && err != c.wantErr:
				t.Errorf("err = %#v, want exactly %v (marks removed)", err, c.wantErr)
			}
			if !reflect.DeepEqual(s.waits, c.waits) {
				t.Errorf("waits %v, want %v", s.waits, c.waits)
			}
			if len(seen) != len(c.waits) {
				t.Fatalf("OnRetry saw %d failures, want one per wait (%d)", len(seen), len(c.waits))
			}
			for i, f := range seen {
				if f.Attempt != i+1 || f.Delay != c.waits[i] || !f.Log || f.Err == nil {
					t.Errorf("failure %d: %+v", i, f)
				}
				if IsPermanent(f.Err) || f.Err != unmark(f.Err) {
					t.Errorf("failure %d: OnRetry saw a marked error %#v", i, f.Err)
				}
			}
		})
	}
}

// With a Limiter, OnRetry learns which failures to log by its rule on
// the injected clock, and success resets the streak.
func TestRetryLimiter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	l := &LogLimiter{Every: time.Minute}
	p := Policy{Base: 20 * time.Second, Max: 20 * time.Second, Limiter: l,
		Now:   func() time.Time { return now },
		Sleep: func(_ context.Context, d time.Duration) error { now = now.Add(d); return nil }}
	type seen struct {
		log                  bool
		failures, suppressed int
	}
	var got []seen
	p.OnRetry = func(f Failure) { got = append(got, seen{f.Log, f.Failures, f.Suppressed}) }
	errs := []error{errFlaky, errFlaky, errFlaky, errFlaky, io.EOF}
	i := 0
	n, err := Retry(context.Background(), p, func() error {
		i++
		if i <= len(errs) {
			return errs[i-1]
		}
		return nil
	})
	if err != nil || n != 6 {
		t.Fatalf("Retry = %d, %v", n, err)
	}
	want := []seen{{true, 1, 0}, {false, 2, 1}, {false, 3, 2}, {true, 4, 2}, {true, 5, 0}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("limiter outcomes %+v, want %+v", got, want)
	}
	if failing, _ := l.Failing(); failing {
		t.Error("success did not reset the limiter")
	}
}

// Next is Retry's rule for callers that keep their own schedule.
func TestNext(t *testing.T) {
	p := Policy{Base: time.Second, Max: time.Minute, MaxAttempts: 4,
		Retryable: func(err error) bool { return !errors.Is(err, errFatal) }}
	for _, c := range []struct {
		n     int
		err   error
		delay time.Duration
		retry bool
	}{
		{1, errFlaky, time.Second, true},
		{3, errFlaky, 4 * time.Second, true},
		{4, errFlaky, 0, false},
		{1, errFatal, 0, false},
		{1, fmt.Errorf("push: %w", errFatal), 0, false},
		{1, Permanent(errFlaky), 0, false},
		{2, RetryAfter(errFatal, time.Hour), time.Hour, true},
		{1, nil, 0, false},
	} {
		d, r := p.Next(c.n, c.err)
		if d != c.delay || r != c.retry {
			t.Errorf("Next(%d, %v) = %v, %v; want %v, %v", c.n, c.err, d, r, c.delay, c.retry)
		}
	}
	// The marks keep the text and what errors.Is/As see.
	if e := Permanent(errFatal); e.Error() != "fatal" || !errors.Is(e, errFatal) || !IsPermanent(e) {
		t.Errorf("Permanent: %v", e)
	}
	if Permanent(nil) != nil || RetryAfter(nil, time.Second) != nil {
		t.Error("a mark on nil is not nil")
	}
	if IsPermanent(RetryAfter(errFatal, 0)) || IsPermanent(errFatal) {
		t.Error("IsPermanent without the mark")
	}
}
