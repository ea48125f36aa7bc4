//go:build unix

package pipeline

import (
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// bigModel is a snapshot of about mib MiB of f32 rows (1 KiB each) in 4
// arrays; each step changes 8 rows per array (different ones per step).
func bigModel(mib int, step int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{}
	per := mib << 20 / 4
	rng := rand.New(rand.NewPCG(1, 2))
	for a := 0; a < 4; a++ {
		b := make([]byte, per)
		for i := 0; i+8 <= len(b); i += 8 {
			v := rng.Uint64() & 0x3f7f_ffff_3f7f_ffff // finite floats
			for k := 0; k < 8; k++ {
				b[i+k] = byte(v >> (8 * k))
			}
		}
		r := rand.New(rand.NewPCG(uint64(step), uint64(a)))
		for range 8 {
			row := r.IntN(per / 1024)
			b[row*1024] ^= 0x01
		}
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: "layer" + strconv.Itoa(a) + ".weight", DType: snapshot.F32,
			Shape: []int64{int64(per / 1024), 256}, Data: snapshot.Bytes(b)})
	}
	return s
}

func publishBig(b testing.TB, dir string, gen uint64, mib int) string {
	st, err := snapshot.OpenGenStore(filepath.Join(dir, GensDir))
	if err != nil {
		b.Fatal(err)
	}
	g, err := st.Publish(gen, ".safetensors", func(w io.Writer) error {
		return safetensors.New().Encode(context.Background(), w, bigModel(mib, int(gen)), formats.EncodeOptions{})
	})
	if err != nil {
		b.Fatal(err)
	}
	return g.Path
}

func benchMiB() int {
	if n, err := strconv.Atoi(os.Getenv("PIPELINE_BENCH_MIB")); err == nil && n > 0 {
		return n
	}
	return 256
}

// BenchmarkEndToEnd measures, for a PIPELINE_BENCH_MIB (default 256) MiB
// snapshot with a few rows changed against the previous generation, the
// time from appending the request line to the WTXT and its delta being in
// the ring (Git disabled), and reports the ratio to a plain WTXT encode
// of the same snapshot to a file (same keys, same workers).
func BenchmarkEndToEnd(b *testing.B) {
	mib := benchMiB()
	dir := b.TempDir()
	k := loadTestKeys(b, filepath.Join(dir, KeysDir))
	cfg := testConfig(dir, k)
	cfg.RowsPerChunk = 0
	cfg.Workers = 2
	if n, err := strconv.Atoi(os.Getenv("PIPELINE_BENCH_WORKERS")); err == nil {
		cfg.Workers = n
	}
	d, w := startBenchDaemon(b, cfg)
	var e2eCPU, encCPU time.Duration
	req := func(gen uint64, src string) time.Duration {
		c0 := processCPU(b)
		defer func() { e2eCPU += processCPU(b) - c0 }()
		t0 := time.Now()
		if err := w.Append(wal.Request{Gen: gen, Time: time.Now(), Requester: "bench", Source: src}); err != nil {
			b.Fatal(err)
		}
		r, err := d.Wait(context.Background(), gen)
		if err != nil || r.Error != "" {
			b.Fatalf("gen %d: %v %s", gen, err, r.Error)
		}
		return time.Since(t0)
	}
	req(1, publishBig(b, dir, 1, mib))
	e2eCPU = 0 // generation 1 (no delta) is not measured
	b.ResetTimer()
	var e2e, enc time.Duration
	var last *GenResult
	for i := 0; i < b.N; i++ {
		gen := uint64(i + 2)
		b.StopTimer()
		src := publishBig(b, dir, gen, mib)
		b.StartTimer()
		e2e += req(gen, src)
		last, _ = d.Wait(context.Background(), gen)

		// The reference: WTXT encode of the same source to a file.
		b.StopTimer()
		m, err := snapshot.MapFile(src)
		if err != nil {
			b.Fatal(err)
		}
		s, err := safetensors.New().Decode(context.Background(), m, m.Size(), formats.DecodeOptions{})
		if err != nil {
			b.Fatal(err)
		}
		s.Meta = snapshot.DefaultMeta()
		s.Meta.TS = time.Unix(1_700_000_000, 0).UTC()
		f, _ := os.Create(filepath.Join(dir, "ref.wtxt"))
		c0 := processCPU(b)
		t0 := time.Now()
		if _, err := wtxt.Encode(context.Background(), f, s, wtxt.EncodeOptions{SignKey: k.sign, HMACKey: k.hmac, Workers: cfg.Workers}); err != nil {
			b.Fatal(err)
		}
		enc += time.Since(t0)
		encCPU += processCPU(b) - c0
		f.Close()
		m.Close()
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(e2e.Seconds()/float64(b.N), "e2e-s/op")
	b.ReportMetric(enc.Seconds()/float64(b.N), "encode-s/op")
	b.ReportMetric(float64(e2e)/float64(enc), "ratio")
	// CPU time (user+sys of the whole process) is what the daemon costs
	// beside the trainer, and it is far less disturbed than wall time by
	// other load on the machine.
	b.ReportMetric(e2eCPU.Seconds()/float64(b.N), "e2e-cpu-s/op")
	b.ReportMetric(encCPU.Seconds()/float64(b.N), "encode-cpu-s/op")
	b.ReportMetric(float64(e2eCPU)/float64(encCPU), "cpu-ratio")
	for st, dt := range last.Stages {
		b.ReportMetric(dt.Seconds(), st+"-s")
	}
	b.Logf("%d MiB: end to end %.2fs, raw encode %.2fs, ratio %.2f; CPU %.2fs vs %.2fs, cpu-ratio %.2f; last stages %v; wtxt %d delta %d bytes (%d/%d chunks)",
		mib, e2e.Seconds()/float64(b.N), enc.Seconds()/float64(b.N), float64(e2e)/float64(enc),
		e2eCPU.Seconds()/float64(b.N), encCPU.Seconds()/float64(b.N), float64(e2eCPU)/float64(encCPU),
		last.Stages, last.WTXTBytes, last.DeltaBytes, last.DeltaChanged, last.DeltaChunks)
}

// processCPU is the CPU time (user + system) the process has used so far.
func processCPU(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTrainerImpact measures how much a CPU-bound loop (SHA-256 over
// 64 KiB, standing in for a training step) slows down while the daemon
// snapshots generations beside it, for encoder workers 1 and 2.
func BenchmarkTrainerImpact(b *testing.B) {
	mib := benchMiB() / 4
	for _, workers := range []int{1, 2} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) {
			dir := b.TempDir()
			k := loadTestKeys(b, filepath.Join(dir, KeysDir))
			cfg := testConfig(dir, k)
			cfg.RowsPerChunk, cfg.Workers = 0, workers
			d, err := New(cfg, Deps{Registry: testRegistry()})
			if err != nil {
				b.Fatal(err)
			}
			if err := d.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer d.Close(context.Background())
			srcs := make([]string, 4)
			for i := range srcs {
				srcs[i] = publishBig(b, dir, uint64(i+1), mib)
			}
			loop := func(stop *atomic.Bool) float64 {
				buf := make([]byte, 64<<10)
				n := 0
				t0 := time.Now()
				for !stop.Load() {
					sha256.Sum256(buf)
					n++
				}
				return float64(n) / time.Since(t0).Seconds()
			}
			var stop atomic.Bool
			go func() { time.Sleep(2 * time.Second); stop.Store(true) }()
			alone := loop(&stop)
			w, _ := wal.OpenWriter(filepath.Join(dir, WALDir))
			defer w.Close()
			stop.Store(false)
			done := make(chan time.Duration)
			go func() {
				t0 := time.Now()
				for i, src := range srcs {
					w.Append(wal.Request{Gen: uint64(i + 1), Time: time.Now(), Requester: "bench", Source: src})
				}
				d.Wait(context.Background(), uint64(len(srcs)))
				stop.Store(true)
				done <- time.Since(t0)
			}()
			beside := loop(&stop)
			dt := <-done
			b.ReportMetric(100*(1-beside/alone), "slowdown-%")
			b.Logf("workers %d: loop %.0f it/s alone, %.0f it/s while %d x %d MiB snapshots ran (%.1fs): %.1f%% slower",
				workers, alone, beside, len(srcs), mib, dt.Seconds(), 100*(1-beside/alone))
		})
	}
}

// BenchmarkTrainerImpactProcess is BenchmarkTrainerImpact with the daemon
// in its own process (as deployed: the test binary re-executed as the
// daemon child, encoder workers 1), for GOMAXPROCS 2 and 1, and with
// nice 10 as in configs/snapd-ml.service.
func BenchmarkTrainerImpactProcess(b *testing.B) {
	mib := benchMiB() / 4
	for _, c := range []struct {
		name  string
		procs string
		nice  bool
	}{{"gomaxprocs=2", "2", false}, {"gomaxprocs=1", "1", false}, {"gomaxprocs=1,nice=10", "1", true}} {
		b.Run(c.name, func(b *testing.B) {
			dir := b.TempDir()
			loadTestKeys(b, filepath.Join(dir, KeysDir))
			srcs := make([]string, 4)
			for i := range srcs {
				srcs[i] = publishBig(b, dir, uint64(i+1), mib)
			}
			loop := func(stop func() bool) float64 {
				buf := make([]byte, 64<<10)
				n := 0
				t0 := time.Now()
				for !stop() {
					for range 16 {
						sha256.Sum256(buf)
						n++
					}
				}
				return float64(n) / time.Since(t0).Seconds()
			}
			t0 := time.Now()
			alone := loop(func() bool { return time.Since(t0) > 2*time.Second })
			args := []string{os.Args[0], "-test.run=^$"}
			if c.nice {
				args = append([]string{"nice", "-n", "10"}, args...)
			}
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = append(os.Environ(), "PIPELINE_TEST_DAEMON="+dir, "GOMAXPROCS="+c.procs)
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			w, _ := wal.OpenWriter(filepath.Join(dir, WALDir))
			for i, src := range srcs {
				w.Append(wal.Request{Gen: uint64(i + 1), Time: time.Now(), Requester: "bench", Source: src})
			}
			w.Close()
			t1 := time.Now()
			var last time.Time
			beside := loop(func() bool {
				if time.Since(last) < 50*time.Millisecond {
					return false
				}
				last = time.Now()
				st, err := ReadStatus(dir)
				return err == nil && st.Done == len(srcs)
			})
			dt := time.Since(t1)
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			b.ReportMetric(100*(1-beside/alone), "slowdown-%")
			b.Logf("%s: loop %.0f it/s alone, %.0f it/s while the daemon snapshotted %d x %d MiB (%.1fs): %.1f%% slower",
				c.name, alone, beside, len(srcs), mib, dt.Seconds(), 100*(1-beside/alone))
		})
	}
}

// startBenchDaemon starts a daemon on cfg and opens its request log
// (cfg.StateDir/wal); both are closed when b ends.
func startBenchDaemon(b *testing.B, cfg Config) (*Daemon, *wal.Writer) {
	b.Helper()
	d, err := New(cfg, Deps{Registry: testRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close(context.Background()) })
	w, err := wal.OpenWriter(filepath.Join(cfg.StateDir, WALDir))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Close() })
	return d, w
}
