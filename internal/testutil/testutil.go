// Package testutil holds small helpers shared by the project's tests.
package testutil

import (
	"bytes"
	"strings"
	"sync"
	"time"
)

// Guard bounds every wait in a test: long enough that a loaded 2-core
// machine never trips it, so it only turns a hang into a failure. A test
// never measures time with it.
const Guard = 5 * time.Minute

// SyncBuffer is a bytes.Buffer safe for concurrent Write and String, for
// capturing the logs of goroutines and daemons under test. Its zero value
// is ready to use.
type SyncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // closed and replaced on every Write
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written != nil {
		close(s.written)
		s.written = nil
	}
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitCount blocks until substr occurs at least n times in what was
// written — woken by each Write, not by polling — and reports whether it
// did; guard is only a bound that turns a hang into a test failure.
func (s *SyncBuffer) WaitCount(substr string, n int, guard time.Duration) bool {
	t := time.NewTimer(guard)
	defer t.Stop()
	for {
		s.mu.Lock()
		if strings.Count(s.b.String(), substr) >= n {
			s.mu.Unlock()
			return true
		}
		if s.written == nil {
			s.written = make(chan struct{})
		}
		ch := s.written
		s.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			return false
		}
	}
}
