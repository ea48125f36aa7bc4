package snapshot

import (
	"sync"
	"sync/atomic"
)

// RCU publishes immutable values (generations) to readers without locks,
// for Go programs that embed snapd: readers pin the current version with
// Acquire (an atomic load and a CAS on its reference count), the writer
// publishes a new one with Publish, and a replaced version is reclaimed
// (the callback runs) as soon as its last reader releases it.
//
// The published version holds one reference of its own; Publish drops it
// from the old version, so the reference count of a version reaches zero
// exactly once, after it was replaced and all its readers are done. A
// count that is zero never rises again (Acquire only increments a count
// it saw positive), so a reader can never resurrect a reclaimed version.
type RCU[T any] struct {
	cur     atomic.Pointer[Version[T]]
	reclaim func(T)

	mu     sync.Mutex // serializes writers
	seq    uint64
	closed bool
}

// Version is one published value. Value must not be modified after
// Publish.
type Version[T any] struct {
	Value T
	Seq   uint64 // 1 for the first published value, then 2, 3, ...

	refs    atomic.Int64
	reclaim func(T)
}

// NewRCU returns an RCU publishing initial (as Seq 1). reclaim (may be nil)
// is called once per version, from the goroutine that drops its last
// reference (Release, Publish or Close).
func NewRCU[T any](initial T, reclaim func(T)) *RCU[T] {
	r := &RCU[T]{reclaim: reclaim}
	r.Publish(initial)
	return r
}

// Acquire pins the current version; the caller must Release it. It
// returns nil after Close.
func (r *RCU[T]) Acquire() *Version[T] {
	for {
		v := r.cur.Load()
		if v == nil {
			return nil
		}
		n := v.refs.Load()
		if n <= 0 {
			// Being retired: the pointer was already swapped; reload.
			continue
		}
		if v.refs.CompareAndSwap(n, n+1) {
			return v
		}
	}
}

// Release unpins v. Releasing more often than acquiring is a programming
// error and panics.
func (v *Version[T]) Release() {
	switch n := v.refs.Add(-1); {
	case n == 0:
		if v.reclaim != nil {
			v.reclaim(v.Value)
		}
	case n < 0:
		panic("snapshot: RCU Version released more often than acquired")
	}
}

// Publish makes value the current version and returns its Seq. The
// previous version is reclaimed once its readers release it. Publish after
// Close does nothing and returns 0.
func (r *RCU[T]) Publish(value T) uint64 {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return 0
	}
	r.seq++
	v := &Version[T]{Value: value, Seq: r.seq, reclaim: r.reclaim}
	v.refs.Store(1)
	old := r.cur.Swap(v)
	seq := r.seq
	r.mu.Unlock()
	if old != nil {
		old.Release()
	}
	return seq
}

// Close unpublishes the current version (reclaimed after its readers
// release it); Acquire returns nil afterwards.
func (r *RCU[T]) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	old := r.cur.Swap(nil)
	r.mu.Unlock()
	if old != nil {
		old.Release()
	}
}
