package numpy

import (
	"testing"
)

// BenchmarkFortranRead: C-order reads of 64 KiB (a WTXT chunk) from a
// 4096×4096 big-endian f32 array stored in Fortran order (64 MiB).
func BenchmarkFortranRead(b *testing.B) {
	const n = 4096
	stored := make([]byte, n*n*4)
	for i := range stored {
		stored[i] = byte(i * 7)
	}
	src := newConvSource(layout{esize: 4, swap: true, fortran: true, shape: []int64{n, n}}, stored, nil, 0, &blockCache{})
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(len(stored)))
	for b.Loop() {
		for off := int64(0); off < src.Size(); off += int64(len(buf)) {
			src.ReadAt(buf, off)
		}
	}
}

// BenchmarkSwapRead: the same reads from a big-endian C-order array.
func BenchmarkSwapRead(b *testing.B) {
	const n = 4096
	stored := make([]byte, n*n*4)
	src := newConvSource(layout{esize: 4, swap: true, shape: []int64{n, n}}, stored, nil, 0, &blockCache{})
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(len(stored)))
	for b.Loop() {
		for off := int64(0); off < src.Size(); off += int64(len(buf)) {
			src.ReadAt(buf, off)
		}
	}
}
