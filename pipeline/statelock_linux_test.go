package pipeline

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStateLockReleaseWithSharedDescriptor: a daemon that stops releases
// its state directory even while another descriptor shares the lock's
// open file (as a child being forked holds a copy of every descriptor
// until it execs): a daemon started again in the same process takes
// the lock at once, and a second one is still refused.
func TestStateLockReleaseWithSharedDescriptor(t *testing.T) {
	dir := t.TempDir()
	l, err := LockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	dup, err := unix.Dup(int(l.f.Fd())) // the forked child's copy
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dup)
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if running, _ := daemonRunning(dir); running {
		t.Fatal("status sees a daemon after the lock was released")
	}
	l2, err := LockStateDir(dir)
	if err != nil {
		t.Fatalf("lock after release while a copy of the descriptor is open: %v", err)
	}
	defer l2.Release()
	if _, err := LockStateDir(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
}
