package fold

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// hostileFold is a FOLD file of about 37 KB holding one BLOB chunk whose
// zstd payload and uncomp_len claim 1.5 GiB (within MAX_CHUNK_SIZE): the
// default decode budget of a small file refuses the chunk (ErrLimit)
// before its buffer is allocated. It is TestZstdChunkBomb's file.
func hostileFold(tb testing.TB) []byte {
	tb.Helper()
	const huge = 3 << 29
	bomb := testutil.ZstdBomb(huge, 0, false)
	b := foldOf(tb, chunkOf("blob", "BLOB", 0, "none", []byte("x")))
	// The one chunk's header follows the 28-byte file header; replace its
	// stored payload by the bomb and rebuild the file around it.
	const at = 28
	if len(b) < at+32 {
		tb.Fatalf("FOLD file of %d bytes", len(b))
	}
	hdr := append([]byte(nil), b[at:at+32]...)
	copy(hdr[4:], []byte{0, 0, 0, 1})
	binary.BigEndian.PutUint64(hdr[8:], huge)
	binary.BigEndian.PutUint64(hdr[16:], uint64(len(bomb)))
	binary.BigEndian.PutUint32(hdr[24:], crc32c(bomb))
	index := fmt.Sprintf(`{"format":"fold","version":"1.2.0","chunks":[{"name":"blob","offset":%d,"sha256":"%s","ecc_algo":"none"}]}`, at, sha256Hex(bomb))
	f := append([]byte(nil), b[:at]...)
	f = append(f, hdr...)
	f = append(f, bomb...)
	binary.BigEndian.PutUint64(f[12:], uint64(len(f)))
	binary.BigEndian.PutUint64(f[20:], uint64(len(index)))
	return append(f, index...)
}
