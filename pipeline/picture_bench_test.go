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

// denseFiles writes generations 1 and 2 of denseModel as signed WTXT
// files (the ring's plaintext form) and returns their paths.
func denseFiles(b *testing.B, mib int) (base, target string, opts wtxt.EncodeOptions) {
	dir := b.TempDir()
	k := loadTestKeys(b, filepath.Join(dir, "keys"))
	opts = wtxt.EncodeOptions{SignKey: k.sign, HMACKey: k.hmac, Workers: DefaultWorkers()}
	write := func(step int) string {
		p := filepath.Join(dir, "gen-"+strconv.Itoa(step)+".wtxt")
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		s := denseModel(mib, step)
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
// (PIPELINE_DENSE_MIB, default 40 MiB of f32, every element changed) to a
// file: the yardstick of BenchmarkPictureDense. Both report cpu-ms/op
// beside the wall time; compare them in one run:
//
//	go test -run XXX -bench 'EncodeDense|PictureDense' -benchtime 5x ./pipeline
func BenchmarkEncodeDense(b *testing.B) {
	mib := denseMiB()
	_, _, opts := denseFiles(b, 1)
	s := denseModel(mib, 2)
	s.Meta = denseMeta(2)
	p := filepath.Join(b.TempDir(), "out.wtxt")
	b.SetBytes(int64(mib) << 20)
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
	mib := denseMiB()
	base, target, _ := denseFiles(b, mib)
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
	b.SetBytes(int64(mib) << 20)
	runtime.GC() // the set-up's garbage is not the benchmark's
	b.ResetTimer()
	cpu := processCPU(b)
	defer func() { reportCPU(b, cpu) }()
	for range b.N {
		p, err := diffPicture(context.Background(), base, target, bx, tx, 1, 2)
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
