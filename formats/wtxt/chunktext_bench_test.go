package wtxt

import (
	"crypto/sha256"
	"hash/crc32"
	"testing"
)

// BenchmarkChunkText: per 64 KiB chunk, the work an encoder does for every
// chunk of every generation — its base64 lines with parity, its SHA-256
// and its CRC32C (README, "The cost target").
func BenchmarkChunkText(b *testing.B) {
	raw := make([]byte, 64<<10)
	for i := range raw {
		raw[i] = byte(i*7 + i>>9)
	}
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		var out []byte
		for b.Loop() {
			out = appendLines(out[:0], raw)
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
