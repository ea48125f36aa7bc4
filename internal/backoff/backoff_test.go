package backoff

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	p := Policy{Base: 200 * time.Millisecond, Max: 30 * time.Second}
	want := []time.Duration{200, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000}
	for n, w := range want {
		if got := p.Delay(n); got != w*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %v", n, got, w*time.Millisecond)
		}
	}
	// No overflow however many failures, even with a huge cap.
	big := Policy{Base: time.Second, Max: math.MaxInt64}
	for _, n := range []int{62, 63, 64, 1000, math.MaxInt32} {
		if d := big.Delay(n); d < time.Second || d > math.MaxInt64 {
			t.Errorf("Delay(%d) = %v", n, d)
		}
	}
	if d := (Policy{Base: time.Second, Max: time.Millisecond}).Delay(5); d != time.Second {
		t.Errorf("Max below Base: %v", d)
	}
	if d := (Policy{}).Delay(3); d != 0 {
		t.Errorf("zero policy: %v", d)
	}
}

// The jitter draws from [d/2, d) with the injected rand.
func TestJitter(t *testing.T) {
	for _, r := range []float64{0, 0.5, 0.999999} {
		p := Policy{Base: 2 * time.Second, Max: 5 * time.Minute, Jitter: true, Rand: func() float64 { return r }}
		for n := 1; n < 12; n++ {
			d := Policy{Base: p.Base, Max: p.Max}.Delay(n)
			got := p.Delay(n)
			if got < d/2 || got >= d {
				t.Errorf("r=%v n=%d: %v outside [%v, %v)", r, n, got, d/2, d)
			}
			if r == 0 && got != d/2 {
				t.Errorf("r=0 n=%d: %v, want %v", n, got, d/2)
			}
		}
	}
}

// The first failure of a streak is logged, then at most one per interval
// with the count suppressed; Reset starts a new streak. The clock is
// driven explicitly.
func TestLogLimiter(t *testing.T) {
	l := LogLimiter{Every: time.Minute}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at         time.Duration
		log        bool
		failures   int
		suppressed int
	}
	for i, s := range []step{
		{0, true, 1, 0},
		{10 * time.Second, false, 2, 1},
		{59 * time.Second, false, 3, 2},
		{60 * time.Second, true, 4, 2},
		{61 * time.Second, false, 5, 1},
		{3 * time.Minute, true, 6, 1},
	} {
		log, f, sup := l.Failure(t0.Add(s.at), "disk full")
		if log != s.log || f != s.failures || sup != s.suppressed {
			t.Errorf("step %d: (%v, %d, %d), want (%v, %d, %d)", i, log, f, sup, s.log, s.failures, s.suppressed)
		}
	}
	if ok, n := l.Failing(); !ok || n != 6 {
		t.Errorf("Failing() = %v, %d", ok, n)
	}
	// Another kind of failure is logged at once, then limited in turn.
	if log, _, sup := l.Failure(t0.Add(3*time.Minute+time.Second), "auth refused"); !log || sup != 0 {
		t.Errorf("a new kind: log %v suppressed %d", log, sup)
	}
	if log, _, _ := l.Failure(t0.Add(3*time.Minute+2*time.Second), "auth refused"); log {
		t.Error("the same new kind logged twice within the interval")
	}
	if ok, n := l.Failing(); !ok || n != 8 {
		t.Errorf("Failing() = %v, %d", ok, n)
	}
	l.Reset()
	if ok, _ := l.Failing(); ok || l.Every != time.Minute {
		t.Error("Reset kept the streak or lost the interval")
	}
	if log, f, _ := l.Failure(t0.Add(3*time.Minute+3*time.Second), "auth refused"); !log || f != 1 {
		t.Error("the first failure after Reset is not logged")
	}
	var d LogLimiter // zero value: DefaultLogInterval
	d.Failure(t0, "x")
	if log, _, _ := d.Failure(t0.Add(DefaultLogInterval-1), "x"); log {
		t.Error("zero LogLimiter logged twice within DefaultLogInterval")
	}
}

// Sleep returns at once with the context's error when it is already done
// (no wall-clock assertion: the timer is an hour).
func TestSleepCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a cancelled context: %v", err)
	}
	if err := Sleep(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
}
