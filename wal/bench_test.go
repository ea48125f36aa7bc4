package wal

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkAppend measures one Writer.Append (flock, fstat, pread of the
// seal marker, write, unlock) and reports its latency percentiles. Run briefly:
//
//	go test -run '^$' -bench Append -benchtime 100000x ./wal/
func BenchmarkAppend(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "wal")
	w, err := OpenWriter(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	r := Request{Gen: 1, Time: time.Now(), Requester: "bench:1", Source: "/data/gens/gen-000001.safetensors"}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Gen = uint64(i) + 1 // generations start at 1
		t0 := time.Now()
		if err := w.Append(r); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

// BenchmarkListenerLatency measures append → delivered on the listener's
// channel, with fsnotify and with 5 ms polling.
//
//	go test -run '^$' -bench ListenerLatency -benchtime 300x ./wal/
func BenchmarkListenerLatency(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts ListenerOptions
	}{
		{"fsnotify", ListenerOptions{PollInterval: time.Second}},
		{"poll-5ms", ListenerOptions{PollInterval: 5 * time.Millisecond, NoNotify: true}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "wal")
			w, err := OpenWriter(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			ctx := context.Background()
			l := NewListener(dir, Pos{}, mode.opts)
			out := make(chan Record, 1)
			if err := l.Start(ctx, out); err != nil {
				b.Fatal(err)
			}
			defer l.Close(ctx)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := w.Append(req(uint64(i))); err != nil {
					b.Fatal(err)
				}
				select {
				case rec := <-out:
					lat = append(lat, time.Since(t0))
					if rec.Gen != uint64(i) {
						b.Fatalf("got gen %d, want %d", rec.Gen, i)
					}
				case <-time.After(5 * time.Second):
					b.Fatal("record not delivered")
				}
			}
			b.StopTimer()
			reportPercentiles(b, lat)
		})
	}
}
