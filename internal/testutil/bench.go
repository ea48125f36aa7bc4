package testutil

import (
	"encoding/binary"
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

// SplitMix is SplitMix64's output function: a fast, well-mixed hash of x
// for reproducible synthetic data.
func SplitMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Fill fills b (whole 8-byte words; a tail shorter than 8 bytes is left
// as it is) with SplitMix of seed plus each word's offset.
func Fill(b []byte, seed uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], SplitMix(seed+uint64(i)))
	}
}
