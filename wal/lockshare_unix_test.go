//go:build unix

package wal

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestConsumerCloseWithSharedDescriptor: a closed consumer releases the
// WAL directory even while another descriptor shares its lock's open file
// (as a child being forked holds a copy of every descriptor until it
// execs): a consumer opened again in the same process takes the lock,
// and a second one is still refused.
func TestConsumerCloseWithSharedDescriptor(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenConsumer(dir, ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dup, err := unix.Dup(int(c.lock.Fd())) // the forked child's copy
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dup)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2, err := OpenConsumer(dir, ConsumerOptions{})
	if err != nil {
		t.Fatalf("open after close while a copy of the lock's descriptor is open: %v", err)
	}
	defer c2.Close()
	if _, err := OpenConsumer(dir, ConsumerOptions{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second consumer: %v, want ErrLocked", err)
	}
}
