package testutil

import (
	"testing"
	"time"
)

// Poll intervals: the first check is immediate, then the pause doubles
// from pollFirst up to pollMax. A condition that spawns processes (git,
// a status read) costs CPU on every check, so a wait that lasts long on a
// busy machine must not check at a fixed fast rate.
const (
	pollFirst = 10 * time.Millisecond
	pollMax   = 250 * time.Millisecond
)

// Poll checks cond until it holds, pausing between checks (10 ms, doubling
// up to 250 ms), and fails tb after Guard naming what it waited for and
// cond's last detail. It is a bound that turns a hang into a failure,
// never a timing assertion.
func Poll(tb testing.TB, what string, cond func() (ok bool, detail string)) {
	tb.Helper()
	deadline := time.Now().Add(Guard)
	pause := pollFirst
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s; last state: %s", Guard, what, detail)
		}
		time.Sleep(pause)
		pause = min(2*pause, pollMax)
	}
}
