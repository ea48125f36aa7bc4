//go:build unix

package snapshot

import (
	"context"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGenStoreUnlockWithSharedDescriptor: the store's lock is free once
// released, even while another descriptor shares its open file (as a
// child being forked holds a copy until it execs): taking it again does
// not wait.
func TestGenStoreUnlockWithSharedDescriptor(t *testing.T) {
	s, err := OpenGenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.lockFile(context.Background(), lockExclusive)
	if err != nil {
		t.Fatal(err)
	}
	dup, err := unix.Dup(int(f.Fd())) // the forked child's copy
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dup)
	unlock(f)
	f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a lock still held fails at once instead of waiting
	again, err := s.lock(ctx, lockExclusive)
	if err != nil {
		t.Fatalf("lock after unlock while a copy of its descriptor is open: %v", err)
	}
	again()
}
