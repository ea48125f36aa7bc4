//go:build unix

package testutil

import (
	"syscall"
	"testing"
	"time"
)

// CPUTime returns the CPU (user+sys) this process and its waited-for
// children (git helpers, for one) have used so far: benchmarks report CPU
// beside wall time, which on a shared machine mostly measures the load.
func CPUTime(tb testing.TB) (self, children time.Duration) {
	tb.Helper()
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	self = tv(ru.Utime) + tv(ru.Stime)
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		tb.Fatal(err)
	}
	return self, tv(ru.Utime) + tv(ru.Stime)
}
