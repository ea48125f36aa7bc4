package stb

import (
	"encoding/binary"
	"testing"
)

// hostileSTB is a 128-byte file whose one tensor declares 2^40 float32
// elements (4 TiB) of data. STB stores every declared byte uncompressed
// and has no size limit of its own, so the refusal is ErrCorrupt (the
// data lies beyond the file), before anything is read.
func hostileSTB(tb testing.TB) []byte {
	le := binary.LittleEndian
	b := make([]byte, 128)
	copy(b, Magic)
	b[4] = Version
	le.PutUint16(b[6:], 1)
	le.PutUint64(b[16:], 64)
	le.PutUint64(b[24:], 128)
	e := b[HeaderSize:]
	e[0], e[1], e[2] = 0, 0, 2 // id 0, float32, rank 2
	le.PutUint64(e[4:], 64)
	le.PutUint64(e[12:], 1<<42)
	le.PutUint32(e[20:], 1<<20)
	le.PutUint32(e[24:], 1<<20)
	return b
}
