package wtxt

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// benchSnapshot is a synthetic snapshot of about size bytes: a few large
// matrices and some small arrays, as a model checkpoint has.
func benchSnapshot(size int64) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Meta: testMeta(1)}
	per := size / 4
	for i, name := range []string{"embed", "layer0.w", "layer1.w", "head.w"} {
		rows := per / (1024 * 4)
		s.Arrays = append(s.Arrays, randArray(uint64(i), name, snapshot.F32, rows, 1024))
	}
	for i := range 16 {
		s.Arrays = append(s.Arrays, randArray(uint64(100+i), "bias"+string(rune('a'+i)), snapshot.F32, 1024))
	}
	return s
}

func rawSize(s *snapshot.Snapshot) int64 {
	var n int64
	for _, a := range s.Arrays {
		n += a.Data.Size()
	}
	return n
}

// BenchmarkEncode256MiB: WTXT encode of 256 MiB raw (signed, HMAC) to a
// file, as `snapd convert` does. MB/s are of raw input.
func BenchmarkEncode256MiB(b *testing.B) {
	s := benchSnapshot(256 << 20)
	opts := EncodeOptions{SignKey: testKey(1), HMACKey: []byte("0123456789abcdef0123456789abcdef")}
	path := filepath.Join(b.TempDir(), "bench.wtxt")
	b.SetBytes(rawSize(s))
	b.ResetTimer()
	for range b.N {
		// A fresh file each time, as convert's atomic temp file is: truncating
		// the previous output would charge its page-cache writeback here.
		os.Remove(path)
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Encode(context.Background(), f, s, opts); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkEncodeStream256MiB: the same through a plain io.Writer.
func BenchmarkEncodeStream256MiB(b *testing.B) {
	s := benchSnapshot(256 << 20)
	opts := EncodeOptions{SignKey: testKey(1), HMACKey: []byte("0123456789abcdef0123456789abcdef")}
	b.SetBytes(rawSize(s))
	b.ResetTimer()
	for range b.N {
		if _, err := Encode(context.Background(), io.Discard, s, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify256MiB: full verification (signature, HMAC, all hashes)
// of a 256 MiB-raw WTXT held in memory. MB/s are of raw bytes.
func BenchmarkVerify256MiB(b *testing.B) {
	s := benchSnapshot(256 << 20)
	key := testKey(1)
	hk := []byte("0123456789abcdef0123456789abcdef")
	var buf bytes.Buffer
	if _, err := Encode(context.Background(), &buf, s, EncodeOptions{SignKey: key, HMACKey: hk}); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	opts := VerifyOptions{HMACKey: hk, RequireSignature: true, TrustedKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}}
	b.SetBytes(rawSize(s))
	b.ResetTimer()
	for range b.N {
		if _, err := Verify(context.Background(), bytes.NewReader(data), opts); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	self, _ := testutil.CPUTime(b)
	return self
}

// reportCPU reports the CPU seconds per op since start (a figure less
// sensitive than wall time to other load on a shared machine).
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric((cpuTime(b)-start).Seconds()/float64(b.N), "cpu-s/op")
}

// discardSink is a SegmentSink that takes every segment and keeps none.
func discardSink(context.Context, Segment, []byte) error { return nil }

// BenchmarkEncodeSkeleton256MiB: the OCI push's conversion of 256 MiB raw
// (signed, HMAC) straight to a skeleton and raw segments (nothing known,
// every segment hashed and handed to a sink). Compare with
// BenchmarkEncodeSplit256MiB in the same run. MB/s are of raw input.
func BenchmarkEncodeSkeleton256MiB(b *testing.B) {
	s := benchSnapshot(256 << 20)
	opts := EncodeOptions{SignKey: testKey(1), HMACKey: []byte("0123456789abcdef0123456789abcdef")}
	b.SetBytes(rawSize(s))
	b.ResetTimer()
	cpu := cpuTime(b)
	for range b.N {
		if _, _, _, err := EncodeSkeleton(context.Background(), io.Discard, s, opts, SplitOptions{}, nil, discardSink); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

// BenchmarkEncodeSkeletonKnown256MiB: the same when every segment is known
// from the previous generation (no segment hash, no sink call).
func BenchmarkEncodeSkeletonKnown256MiB(b *testing.B) {
	s := benchSnapshot(256 << 20)
	opts := EncodeOptions{SignKey: testKey(1), HMACKey: []byte("0123456789abcdef0123456789abcdef")}
	segs, keys, err := func() ([]Segment, []SegmentKey, error) {
		_, segs, keys, err := EncodeSkeleton(context.Background(), io.Discard, s, opts, SplitOptions{}, nil, nil)
		return segs, keys, err
	}()
	if err != nil {
		b.Fatal(err)
	}
	digests := make(map[SegmentKey][32]byte, len(keys))
	for i, k := range keys {
		digests[k] = segs[i].Digest
	}
	known := func(k SegmentKey) ([32]byte, bool) { d, ok := digests[k]; return d, ok }
	b.SetBytes(rawSize(s))
	b.ResetTimer()
	cpu := cpuTime(b)
	for range b.N {
		if _, _, _, err := EncodeSkeleton(context.Background(), io.Discard, s, opts, SplitOptions{}, known, discardSink); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

// BenchmarkEncodeSplit256MiB: the path EncodeSkeleton replaces, Encode to
// a file and SplitIndexed of that file, with the same sink.
func BenchmarkEncodeSplit256MiB(b *testing.B) {
	s := benchSnapshot(256 << 20)
	opts := EncodeOptions{SignKey: testKey(1), HMACKey: []byte("0123456789abcdef0123456789abcdef")}
	path := filepath.Join(b.TempDir(), "bench.wtxt")
	b.SetBytes(rawSize(s))
	b.ResetTimer()
	cpu := cpuTime(b)
	defer reportCPU(b, cpu)
	for range b.N {
		os.Remove(path)
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		res, err := Encode(context.Background(), f, s, opts)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := SplitIndexed(context.Background(), f, res.Written, io.Discard, discardSink, nil, SplitOptions{}); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
