//go:build unix

package pipeline

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// denseMiB is the size of the dense benchmarks' model:
// PIPELINE_DENSE_MIB, default 40.
func denseMiB() int {
	if n, err := strconv.Atoi(os.Getenv("PIPELINE_DENSE_MIB")); err == nil && n > 0 {
		return n
	}
	return 40
}

func denseMeta(gen uint64) snapshot.Meta {
	m := snapshot.DefaultMeta()
	m.Gen, m.TS = gen, time.Date(2026, 11, 28, 0, 0, int(gen), 0, time.UTC)
	return m
}

// denseModels are the dense benchmarks' models: denseModel's few large
// matrices (PIPELINE_DENSE_MIB) and adamMLP's mix of large and small
// arrays.
var denseModels = []struct {
	name  string
	model func(mib, step int) *snapshot.Snapshot
}{
	{"matrices", denseModel},
	{"mlp-adamw", func(_, step int) *snapshot.Snapshot { return adamMLP(step) }},
}

// denseFiles writes generations 1 and 2 of model as signed WTXT files
// (the ring's plaintext form) and returns their paths.
func denseFiles(b *testing.B, mib int, model func(mib, step int) *snapshot.Snapshot) (base, target string, opts wtxt.EncodeOptions) {
	dir := b.TempDir()
	k := loadTestKeys(b, filepath.Join(dir, "keys"))
	opts = wtxt.EncodeOptions{SignKey: k.sign, HMACKey: k.hmac, Workers: DefaultWorkers()}
	write := func(step int) string {
		p := filepath.Join(dir, "gen-"+strconv.Itoa(step)+".wtxt")
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		s := model(mib, step)
		s.Meta = denseMeta(uint64(step))
		if _, err := wtxt.Encode(context.Background(), f, s, opts); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		return p
	}
	return write(1), write(2), opts
}

// BenchmarkEncodeDense is the daemon's encode of a dense update
// (matrices: PIPELINE_DENSE_MIB, default 40 MiB of f32; mlp-adamw: about
// 39 MB; every element changed) to a file: the yardstick of
// BenchmarkPictureDense. Both report cpu-ms/op
// beside the wall time; compare them in one run:
//
//	go test -run XXX -bench 'EncodeDense|PictureDense' -benchtime 5x ./pipeline
func BenchmarkEncodeDense(b *testing.B) {
	for _, m := range denseModels {
		b.Run(m.name, func(b *testing.B) { benchEncodeDense(b, m.model) })
	}
}

func benchEncodeDense(b *testing.B, model func(mib, step int) *snapshot.Snapshot) {
	mib := denseMiB()
	_, _, opts := denseFiles(b, 1, denseModel)
	s := model(mib, 2)
	s.Meta = denseMeta(2)
	p := filepath.Join(b.TempDir(), "out.wtxt")
	b.SetBytes(rawBytes(s))
	runtime.GC() // the set-up's garbage is not the benchmark's
	b.ResetTimer()
	cpu := processCPU(b)
	defer func() { reportCPU(b, cpu) }()
	for range b.N {
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := wtxt.Encode(context.Background(), f, s, opts); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkPictureDense is the daemon's diff picture (drawPicture's work
// without the ring) of the same dense update between two generations'
// WTXT files, whose indexes the delta plan read before (not timed); it
// should cost at most a tenth of BenchmarkEncodeDense.
func BenchmarkPictureDense(b *testing.B) {
	for _, m := range denseModels {
		b.Run(m.name, func(b *testing.B) { benchPictureDense(b, m.model) })
	}
}

func benchPictureDense(b *testing.B, model func(mib, step int) *snapshot.Snapshot) {
	mib := denseMiB()
	base, target, _ := denseFiles(b, mib, model)
	raw := rawBytes(model(mib, 2))
	index := func(path string) *wtxt.Index {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			b.Fatal(err)
		}
		x, err := wtxt.ReadIndex(context.Background(), path, f, st.Size())
		if err != nil {
			b.Fatal(err)
		}
		return x
	}
	bx, tx := index(base), index(target)
	b.SetBytes(raw)
	runtime.GC() // the set-up's garbage is not the benchmark's
	b.ResetTimer()
	cpu := processCPU(b)
	defer func() { reportCPU(b, cpu) }()
	for range b.N {
		p, err := diffPicture(context.Background(), base, target, bx, tx, 1, 2, DefaultWorkers())
		if err != nil {
			b.Fatal(err)
		}
		if err := p.WriteSVG(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

// reportCPU reports the process CPU time (user + system) per operation
// since start: steadier than wall time on a loaded machine.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric((processCPU(b)-start).Seconds()*1e3/float64(b.N), "cpu-ms/op")
}

// BenchmarkBuildDense is the daemon's work for one dense generation
// (PIPELINE_DENSE_MIB, default 40 MiB of f32, every element changed
// against the previous generation; Git off), from the request to the
// generation in the ring: prepare, encode, the delta plan (no delta is
// written: dense), the NaN/Inf check and the diff picture. It reports
// the process CPU per generation (cpu-ms/op, the request's window only)
// and the last generation's stage times (encode-s, delta-s: the delta
// plan and the NaN/Inf check beside it, picture-s).
//
//	go test -run XXX -bench 'EncodeDense|BuildDense' -benchtime 5x -count 3 ./pipeline
func BenchmarkBuildDense(b *testing.B) {
	mib := denseMiB()
	dir := b.TempDir()
	k := loadTestKeys(b, filepath.Join(dir, KeysDir))
	cfg := testConfig(dir, k)
	cfg.RowsPerChunk, cfg.Workers, cfg.RingKeep = 0, DefaultWorkers(), 3
	d, w := startBenchDaemon(b, cfg)
	first := func(gen uint64) {
		if err := w.Append(wal.Request{Gen: gen, Time: time.Unix(1_700_000_000+int64(gen), 0), Requester: "bench", Source: publishSnap(b, dir, gen, denseModel(mib, int(gen)))}); err != nil {
			b.Fatal(err)
		}
		if r, err := d.Wait(context.Background(), gen); err != nil || r.Error != "" {
			b.Fatalf("gen %d: %v %s", gen, err, r.Error)
		}
	}
	first(1)
	b.SetBytes(int64(mib) << 20)
	var cpu time.Duration
	var last *GenResult
	b.ResetTimer()
	for i := range b.N {
		gen := uint64(i + 2)
		b.StopTimer()
		src := publishSnap(b, dir, gen, denseModel(mib, int(gen)))
		runtime.GC() // the set-up's garbage is not the benchmark's
		b.StartTimer()
		c0 := processCPU(b)
		if err := w.Append(wal.Request{Gen: gen, Time: time.Unix(1_700_000_000+int64(gen), 0), Requester: "bench", Source: src}); err != nil {
			b.Fatal(err)
		}
		r, err := d.Wait(context.Background(), gen)
		if err != nil || r.Error != "" {
			b.Fatalf("gen %d: %v %s", gen, err, r.Error)
		}
		cpu += processCPU(b) - c0
		last = r
	}
	b.StopTimer()
	b.ReportMetric(cpu.Seconds()*1e3/float64(b.N), "cpu-ms/op")
	for _, st := range []string{"encode", "delta", "picture"} {
		b.ReportMetric(last.Stages[st].Seconds(), st+"-s")
	}
	if last.DeltaChanged != last.DeltaChunks || last.Delta != "" {
		b.Fatalf("not dense: %d of %d chunks changed, delta %q", last.DeltaChanged, last.DeltaChunks, last.Delta)
	}
}
