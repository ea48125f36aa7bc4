package wtxt

import (
	"context"
	"crypto/sha256"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// benchGens returns generations 1 and 2 of a scripts/benchgen-like model
// of about size raw bytes: four f32 matrices of 1024 columns (and small
// biases); in generation 2 one contiguous cluster of pct percent of each
// matrix's rows has new values.
func benchGens(size int64, pct float64) (g1, g2 *snapshot.Snapshot) {
	g1 = benchSnapshot(size)
	g2 = &snapshot.Snapshot{Meta: testMeta(2)}
	for i, a := range g1.Arrays {
		b, _ := snapshot.BytesOf(a.Data)
		nb := append([]byte(nil), b...)
		if len(a.Shape) == 2 {
			rows, rs := a.Shape[0], a.Shape[1]*4
			k := max(int64(float64(rows)*pct/100), 1)
			start := (int64(i)*7919 + 13) % (rows - k)
			for j := start * rs; j < (start+k)*rs; j++ {
				nb[j] ^= 0x5a
			}
		}
		g2.Arrays = append(g2.Arrays, &snapshot.Array{Name: a.Name, DType: a.DType, Shape: a.Shape, Data: snapshot.Bytes(nb)})
	}
	return g1, g2
}

// BenchmarkEncodePrev256MiB: generation 2 of a 256 MiB model (1% of each
// matrix's rows changed in one cluster) encoded to a file, signed with
// HMAC, as `snapd convert --prev` does: "full" without Prev, "prev" with
// generation 1's file as Prev. MB/s are of raw input. SNAPD_BENCH_MIB
// changes the size, SNAPD_BENCH_PCT the changed percentage.
func BenchmarkEncodePrev256MiB(b *testing.B) {
	size := int64(256 << 20)
	if v, err := strconv.Atoi(os.Getenv("SNAPD_BENCH_MIB")); err == nil && v > 0 {
		size = int64(v) << 20
	}
	pct := 1.0
	if v, err := strconv.ParseFloat(os.Getenv("SNAPD_BENCH_PCT"), 64); err == nil && v > 0 {
		pct = v
	}
	g1, g2 := benchGens(size, pct)
	opts := EncodeOptions{SignKey: testKey(1), HMACKey: []byte("0123456789abcdef0123456789abcdef")}
	dir := b.TempDir()
	prevPath := filepath.Join(dir, "gen1.wtxt")
	pf, err := os.Create(prevPath)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := Encode(context.Background(), pf, g1, opts); err != nil {
		b.Fatal(err)
	}
	st, _ := pf.Stat()
	x, err := ReadIndex(context.Background(), "gen1.wtxt", pf, st.Size())
	if err != nil {
		b.Fatal(err)
	}
	defer pf.Close()
	path := filepath.Join(dir, "gen2.wtxt")
	for _, mode := range []string{"full", "prev"} {
		b.Run(mode, func(b *testing.B) {
			o := opts
			if mode == "prev" {
				o.Prev = &PrevWTXT{R: pf, Index: x}
			}
			b.SetBytes(rawSize(g2))
			var res *Result
			for b.Loop() {
				os.Remove(path)
				f, err := os.Create(path)
				if err != nil {
					b.Fatal(err)
				}
				if res, err = Encode(context.Background(), f, g2, o); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
			b.ReportMetric(float64(res.ChunksCopied), "copied")
		})
	}
}

// BenchmarkChunkText: per 64 KiB chunk, encoding its lines (appendLines)
// against checking copied lines (linesEncode), and the sums both need.
func BenchmarkChunkText(b *testing.B) {
	raw := make([]byte, 64<<10)
	for i := range raw {
		raw[i] = byte(i*7 + i>>9)
	}
	text := append(appendLines(nil, raw), "endch\n"...)
	scratch := make([]byte, len(text))
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		out := make([]byte, 0, len(text))
		for b.Loop() {
			out = appendLines(out[:0], raw)
		}
	})
	b.Run("check", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if !linesEncode(text, raw, scratch) {
				b.Fatal("mismatch")
			}
		}
	})
	b.Run("sha256", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			sha256.Sum256(raw)
		}
	})
	b.Run("crc32c", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			crc32.Checksum(raw, castagnoli)
		}
	})
}
