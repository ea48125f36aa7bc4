package wal

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

func collect(t *testing.T, out <-chan Record, n int, timeout time.Duration) []uint64 {
	t.Helper()
	var got []uint64
	deadline := time.After(timeout)
	for len(got) < n {
		select {
		case rec := <-out:
			got = append(got, rec.Gen)
		case <-deadline:
			t.Fatalf("got %d of %d records: %v", len(got), n, got)
		}
	}
	return got
}

func TestListenerDelivers(t *testing.T) {
	for _, mode := range []string{"fsnotify", "poll"} {
		t.Run(mode, func(t *testing.T) {
			base := runtime.NumGoroutine()
			dir := filepath.Join(t.TempDir(), "wal")
			appendN(t, dir, 1, 4) // before Start
			ctx := context.Background()
			opts := ListenerOptions{PollInterval: time.Hour, NoNotify: mode == "poll"}
			if mode == "poll" {
				opts.PollInterval = 10 * time.Millisecond
			}
			l := NewListener(dir, Pos{}, opts)
			out := make(chan Record) // unbuffered: the caller sets the pace
			if err := l.Start(ctx, out); err != nil {
				t.Fatal(err)
			}
			if err := l.Start(ctx, out); err == nil {
				t.Fatal("second Start accepted")
			}
			if l.Notifying() != (mode == "fsnotify") {
				t.Fatalf("Notifying = %v", l.Notifying())
			}
			got := collect(t, out, 3, 30*time.Second)
			// A burst from several goroutines, then single appends.
			var wg sync.WaitGroup
			for k := 0; k < 4; k++ {
				wg.Add(1)
				go func(k int) {
					defer wg.Done()
					appendN(t, dir, uint64(100+k*100), uint64(150+k*100))
				}(k)
			}
			wg.Wait()
			got = append(got, collect(t, out, 200, 30*time.Second)...)
			appendN(t, dir, 1000, 1001)
			got = append(got, collect(t, out, 1, 30*time.Second)...)
			seen := map[uint64]bool{}
			lastOf := map[uint64]uint64{}
			for _, g := range got {
				if seen[g] {
					t.Fatalf("gen %d delivered twice", g)
				}
				seen[g] = true
				// Per appender, order is preserved.
				k := g / 100
				if g < lastOf[k] {
					t.Fatalf("out of order: %d after %d", g, lastOf[k])
				}
				lastOf[k] = g
			}
			if len(seen) != 204 {
				t.Fatalf("%d distinct", len(seen))
			}
			// Close while nobody reads and a record is pending.
			appendN(t, dir, 2000, 2002)
			time.Sleep(30 * time.Millisecond)
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := l.Close(cctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(cctx); err != nil {
				t.Fatal("second Close:", err)
			}
			// No goroutine outlives Close (fsnotify's included; the
			// runtime may need a moment to retire exited ones: the
			// deadline is only a guard).
			for deadline := time.Now().Add(30 * time.Second); runtime.NumGoroutine() > base && time.Now().Before(deadline); {
				runtime.Gosched()
				time.Sleep(time.Millisecond)
			}
			if n := runtime.NumGoroutine(); n > base {
				buf := make([]byte, 1<<16)
				t.Fatalf("%d goroutines after Close, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}

func TestListenerContextEnds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	ctx, cancel := context.WithCancel(context.Background())
	l := NewListener(dir, Pos{}, ListenerOptions{PollInterval: 5 * time.Millisecond})
	out := make(chan Record, 1)
	if err := l.Start(ctx, out); err != nil {
		t.Fatal(err)
	}
	appendN(t, dir, 1, 2)
	if g := collect(t, out, 1, 30*time.Second); g[0] != 1 {
		t.Fatal(g)
	}
	cancel()
	cctx, c2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer c2()
	if err := l.Close(cctx); err != nil {
		t.Fatal(err)
	}
	// Close before Start, and Start after Close.
	l2 := NewListener(dir, Pos{}, ListenerOptions{})
	if err := l2.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Start(cctx, out); err == nil {
		t.Fatal("Start after Close accepted")
	}
}

// A torn tail that stays unterminated is repaired by the (consumer's)
// listener; later records are delivered.
func TestListenerRepairsTornTail(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	appendN(t, dir, 1, 2)
	full := mustLine(t, req(2))
	appendRaw(t, segPath(dir, 1), full[:20])
	var mu sync.Mutex
	var corrupt []*CorruptError
	repaired := make(chan struct{}, 1)
	l := NewListener(dir, Pos{}, ListenerOptions{PollInterval: 5 * time.Millisecond, OnCorrupt: func(ce *CorruptError) {
		mu.Lock()
		corrupt = append(corrupt, ce)
		mu.Unlock()
		select {
		case repaired <- struct{}{}:
		default:
		}
	}})
	out := make(chan Record, 8)
	ctx := context.Background()
	if err := l.Start(ctx, out); err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	collect(t, out, 1, 30*time.Second)
	select {
	case <-repaired:
	case <-time.After(30 * time.Second): // guard only
	}
	mu.Lock()
	if len(corrupt) != 1 || corrupt[0].Length != 20 {
		t.Fatalf("repairs: %v", corrupt)
	}
	mu.Unlock()
	appendN(t, dir, 3, 4)
	if g := collect(t, out, 1, 30*time.Second); fmt.Sprint(g) != "[3]" {
		t.Fatal(g)
	}
}
