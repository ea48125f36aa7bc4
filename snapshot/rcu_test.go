package snapshot

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

type rcuPayload struct {
	seq       int
	data      []int // every element == seq while not reclaimed
	reclaimed atomic.Int32
}

// Readers hammer Acquire/Release while a writer publishes; a pinned
// version is never reclaimed under a reader, and every version is
// reclaimed exactly once in the end. Run with -race.
func TestRCUConcurrent(t *testing.T) {
	const versions = 2000
	readers := 4 * runtime.GOMAXPROCS(0)
	var reclaimedCount atomic.Int64
	var mu sync.Mutex
	all := map[int]*rcuPayload{}
	mk := func(seq int) *rcuPayload {
		p := &rcuPayload{seq: seq, data: make([]int, 16)}
		for i := range p.data {
			p.data[i] = seq
		}
		mu.Lock()
		all[seq] = p
		mu.Unlock()
		return p
	}
	r := NewRCU(mk(0), func(p *rcuPayload) {
		if p.reclaimed.Add(1) != 1 {
			t.Errorf("version %d reclaimed twice", p.seq)
		}
		for i := range p.data {
			p.data[i] = -1 // poison: a reader still holding it would see this
		}
		reclaimedCount.Add(1)
	})
	var stop atomic.Bool
	var wg sync.WaitGroup
	var acquired atomic.Int64
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := uint64(0)
			for !stop.Load() {
				v := r.Acquire()
				if v == nil {
					t.Error("Acquire returned nil before Close")
					return
				}
				if v.Seq < last {
					t.Errorf("sequence went backwards: %d after %d", v.Seq, last)
				}
				last = v.Seq
				p := v.Value
				if p.reclaimed.Load() != 0 {
					t.Errorf("acquired reclaimed version %d", p.seq)
				}
				for _, x := range p.data {
					if x != p.seq {
						t.Errorf("version %d data changed under reader: %d", p.seq, x)
						break
					}
				}
				acquired.Add(1)
				v.Release()
			}
		}()
	}
	for i := 1; i <= versions; i++ {
		if seq := r.Publish(mk(i)); seq != uint64(i+1) {
			t.Fatalf("Publish seq %d, want %d", seq, i+1)
		}
		if i%64 == 0 {
			runtime.Gosched()
		}
	}
	stop.Store(true)
	wg.Wait()
	if got := reclaimedCount.Load(); got != versions {
		t.Fatalf("reclaimed %d versions before Close, want %d (all but the current)", got, versions)
	}
	// A reader holding the current version across Close keeps it alive.
	v := r.Acquire()
	r.Close()
	if r.Acquire() != nil {
		t.Fatal("Acquire after Close returned a version")
	}
	if reclaimedCount.Load() != versions {
		t.Fatal("current version reclaimed while still acquired")
	}
	v.Release()
	if got := reclaimedCount.Load(); got != versions+1 {
		t.Fatalf("after last release: reclaimed %d, want %d", got, versions+1)
	}
	for seq, p := range all {
		if p.reclaimed.Load() != 1 {
			t.Errorf("version %d reclaimed %d times", seq, p.reclaimed.Load())
		}
	}
	if acquired.Load() == 0 {
		t.Fatal("readers never acquired")
	}
	if r.Publish(mk(-5)) != 0 {
		t.Fatal("Publish after Close succeeded")
	}
}

func TestRCUReleaseTooOften(t *testing.T) {
	r := NewRCU(1, nil)
	v := r.Acquire()
	v.Release()
	r.Close() // drops the last reference
	defer func() {
		if recover() == nil {
			t.Fatal("extra Release did not panic")
		}
	}()
	v.Release()
}

func BenchmarkRCUAcquireRelease(b *testing.B) {
	r := NewRCU(42, nil)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			v := r.Acquire()
			_ = v.Value
			v.Release()
		}
	})
}
