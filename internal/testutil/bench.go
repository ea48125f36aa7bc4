package testutil

import "encoding/binary"

// SplitMix is SplitMix64's output function: a fast, well-mixed hash of x
// for reproducible synthetic data.
func SplitMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Fill fills b (whole 8-byte words; a tail shorter than 8 bytes is left
// as it is) with SplitMix of seed plus each word's offset.
func Fill(b []byte, seed uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], SplitMix(seed+uint64(i)))
	}
}
