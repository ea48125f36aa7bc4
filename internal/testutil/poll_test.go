package testutil

import "testing"

// TestPollChecksUntilTrue: Poll returns once cond holds, checking it
// again after each pause.
func TestPollChecksUntilTrue(t *testing.T) {
	n := 0
	Poll(t, "the fifth check", func() (bool, string) {
		n++
		return n == 5, ""
	})
	if n != 5 {
		t.Fatalf("cond checked %d times, want 5", n)
	}
}
