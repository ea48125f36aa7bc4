package testutil

import (
	"testing"
	"time"

	"golang.org/x/sys/windows"
)

// CPUTime returns the CPU (user+kernel) this process has used so far
// (GetProcessTimes); Windows does not account waited-for children to
// their parent, so children is always 0 here.
func CPUTime(tb testing.TB) (self, children time.Duration) {
	tb.Helper()
	var creation, exit, kernel, user windows.Filetime
	if err := windows.GetProcessTimes(windows.CurrentProcess(), &creation, &exit, &kernel, &user); err != nil {
		tb.Fatal(err)
	}
	ft := func(f windows.Filetime) time.Duration {
		return time.Duration(uint64(f.HighDateTime)<<32|uint64(f.LowDateTime)) * 100
	}
	return ft(kernel) + ft(user), 0
}
