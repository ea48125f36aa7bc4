package testutil

// ZstdBomb returns a valid zstd frame of RLE blocks that decompresses to n
// copies of b: about 3 bytes per 128 KiB of output (a 3 GiB bomb is ~75
// KiB). With declare, the frame header carries n as its content size;
// without, the size is only known by decoding (as the reference writers of
// zTensor and AERO produce frames).
func ZstdBomb(n int64, b byte, declare bool) []byte {
	const block = 128 << 10
	out := []byte{0x28, 0xb5, 0x2f, 0xfd}
	if declare {
		// FHD: FCS field 8 bytes (flag 3), not single segment; window 128 KiB.
		out = append(out, 0xC0, 7<<3)
		for i := 0; i < 8; i++ {
			out = append(out, byte(uint64(n)>>(8*i)))
		}
	} else {
		out = append(out, 0x00, 7<<3)
	}
	if n == 0 {
		return append(out, 0x01, 0x00, 0x00) // last raw block of 0 bytes
	}
	for n > 0 {
		k := min(n, block)
		n -= k
		h := uint32(k)<<3 | 1<<1 // RLE block
		if n == 0 {
			h |= 1 // last block
		}
		out = append(out, byte(h), byte(h>>8), byte(h>>16), b)
	}
	return out
}
