package wtxt

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/snapd-ml/snapd/snapshot"
)

// Fixed lines and values of the profile.
const (
	magicLine    = "WTXT 1"
	endLine      = "endwtxt"
	baseCaps     = "crc32c,line_parity,arr_hmac,delta_v2,row_blocking"
	capTensorExt = "tensor_ext"
	pendingNote  = `note="finalize with WSUM"`
	tsLayout     = "2006-01-02T15:04:05Z"

	// B64Width is the width of every base64 line but a chunk's last.
	B64Width = 76
	// rawPerLine is the raw byte count one full base64 line carries.
	rawPerLine = 57
	// UnblockedChunk is the chunk size of arrays without an idx line.
	UnblockedChunk = 32768
	// MaxNameLen is the longest array name tensor_ext allows.
	MaxNameLen = 1024
	// MaxLineLen bounds any line a reader accepts (the longest legal line is
	// an arr line with a long name and shape).
	MaxLineLen = 64 << 10
	// MaxRank bounds the number of dimensions a reader accepts.
	MaxRank = 64
)

var zero32 [32]byte

// FormatGen writes a generation number as the profile's DEC6.
func FormatGen(gen uint64) string {
	s := strconv.FormatUint(gen, 10)
	if len(s) < 6 {
		s = strings.Repeat("0", 6-len(s)) + s
	}
	return s
}

// FormatTS writes t as YYYY-MM-DDTHH:MM:SSZ (UTC, whole seconds).
func FormatTS(t time.Time) string { return t.UTC().Truncate(time.Second).Format(tsLayout) }

// ParseTS parses the profile's timestamp form strictly.
func ParseTS(s string) (time.Time, error) {
	t, err := time.Parse(tsLayout, s)
	if err != nil || t.Format(tsLayout) != s {
		return time.Time{}, fmt.Errorf("timestamp: want YYYY-MM-DDTHH:MM:SSZ, a valid UTC time (got %d bytes)", len(s))
	}
	return t, nil
}

// DefaultTS returns the timestamp a writer uses when none is given:
// SOURCE_DATE_EPOCH (decimal seconds since the Unix epoch) when set, else
// now, in UTC whole seconds.
func DefaultTS(getenv func(string) string, now func() time.Time) (time.Time, error) {
	if v := getenv("SOURCE_DATE_EPOCH"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > 253402300799 {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want whole seconds since 1970 (<= year 9999)", v)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	return now().UTC().Truncate(time.Second), nil
}

// isTokenByte reports whether c may appear in a TOK value.
func isTokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-' || c == '/' || c == ':' || c == '+'
}

// IsHex64 reports whether s is 64 lowercase hex digits, the form of every
// SHA-256 value in WTXT, WSUM, DELTA and WSEAL lines and of chain values in
// snapd's state and commit trailers.
func IsHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// IsToken reports whether s is a TOK (one or more of A-Z a-z 0-9 . _ - / : +).
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenByte(s[i]) {
			return false
		}
	}
	return true
}

// NameNeedsExt reports whether a valid name needs tensor_ext; ok is false
// when the name is not valid even with tensor_ext.
func NameNeedsExt(name string) (ext, ok bool) {
	if name == "" || len(name) > MaxNameLen {
		return false, false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_':
		case c == '.', c == ':', c == '/', c == '-':
			ext = true
		default:
			return false, false
		}
	}
	return ext, true
}

// arrayNeedsExt reports whether an array needs tensor_ext: an extended
// dtype or name, rank 0, or zero size.
func arrayNeedsExt(name string, dt snapshot.DType, shape []int64, nbytes int64) bool {
	ext, _ := NameNeedsExt(name)
	return ext || dt.Extended() || len(shape) == 0 || nbytes == 0
}

// formatShape joins dims with commas (empty for rank 0).
func formatShape(shape []int64) string {
	var b strings.Builder
	for i, d := range shape {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	return b.String()
}

// geometry is an array's chunk layout.
type geometry struct {
	blocked      bool  // an idx line is written
	rowsPerChunk int64 // with blocked
	rowSize      int64 // with blocked
	chunkLen     int64 // raw bytes of every chunk but the last
	nbytes       int64
}

// numChunks is the chunk count (1 for a zero-size array). It cannot
// overflow: ceil is taken without adding to nbytes.
func (g geometry) numChunks() int64 {
	if g.nbytes == 0 || g.chunkLen <= 0 {
		return 1
	}
	n := g.nbytes / g.chunkLen
	if g.nbytes%g.chunkLen != 0 {
		n++
	}
	return n
}

// chunk returns offset and length of chunk ix (0 <= ix < numChunks, so
// ix*chunkLen < nbytes cannot overflow).
func (g geometry) chunk(ix int64) (off, n int64) {
	off = ix * g.chunkLen
	n = g.nbytes - off
	if n > g.chunkLen {
		n = g.chunkLen
	}
	return off, n
}

// rowSizeOf is element size × product(shape[1:]) (rank >= 1).
func rowSizeOf(dt snapshot.DType, shape []int64) int64 {
	rs := int64(dt.Size())
	for _, d := range shape[1:] {
		rs *= d // cannot overflow: the full product was checked
	}
	return rs
}

// defaultRowsPerChunk is the profile's default rows_per_chunk: the largest
// power of two p >= 1 with p × rowSize <= 65536 (1 when a row alone
// exceeds 64 KiB). Unlike a naive doubling loop it cannot overflow for
// row sizes near 2^63.
func defaultRowsPerChunk(rowSize int64) int64 {
	if rowSize <= 0 || rowSize > 65536 {
		return 1
	}
	p := int64(1)
	for p*2*rowSize <= 65536 {
		p *= 2
	}
	return p
}

// canonicalRowsPerChunk is the one rows_per_chunk a row-blocked array of
// nbytes (> 0) raw bytes in rows of rowSize (> 0) bytes may carry when
// rpc is requested (0 = the default). When rpc rows make more than one
// chunk, the chunk lens determine rpc and it is kept. When they make a
// single chunk, every rpc >= the row count would describe the same
// chunks, so one is chosen: the default when the default also makes a
// single chunk, else the row count (the smallest value that makes one
// chunk). Writer and verifier both use this, so the idx line admits no
// second reading (docs/FORMAT.md, "rows_per_chunk").
func canonicalRowsPerChunk(rowSize, nbytes, rpc int64) int64 {
	if rpc <= 0 {
		rpc = defaultRowsPerChunk(rowSize)
	}
	rows := nbytes / rowSize // rowSize divides nbytes
	if rpc < rows {
		return rpc
	}
	if d := defaultRowsPerChunk(rowSize); d >= rows {
		return d
	}
	return rows
}

// writerGeometry is the chunk layout the writer uses for an array;
// rowsPerChunk 0 selects the default. A requested value that makes a
// single chunk is written as its canonical form (canonicalRowsPerChunk).
func writerGeometry(dt snapshot.DType, shape []int64, nbytes, rowsPerChunk int64) geometry {
	g := geometry{nbytes: nbytes, chunkLen: UnblockedChunk}
	if len(shape) == 0 || nbytes == 0 {
		return g
	}
	g.blocked = true
	g.rowSize = rowSizeOf(dt, shape)
	g.rowsPerChunk = canonicalRowsPerChunk(g.rowSize, nbytes, rowsPerChunk)
	g.chunkLen = geometryChunkLen(g.rowsPerChunk, g.rowSize, nbytes)
	return g
}

// geometryChunkLen is min(rpc × rowSize, nbytes), overflow-safe.
func geometryChunkLen(rpc, rowSize, nbytes int64) int64 {
	hi, lo := bits.Mul64(uint64(rpc), uint64(rowSize))
	if hi != 0 || lo >= uint64(nbytes) {
		return nbytes
	}
	return int64(lo)
}

// numLines is ceil(n / 57) for n >= 0, without overflow near 2^63.
func numLines(n int64) int64 {
	l := n / rawPerLine
	if n%rawPerLine != 0 {
		l++
	}
	return l
}

// parityNibble is the XOR of the bytes of s, low 4 bits, as a hex digit.
func parityNibble(s []byte) byte {
	var x uint64
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x ^= uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
	}
	x ^= x >> 32
	x ^= x >> 16
	x ^= x >> 8
	b := byte(x)
	for ; i < len(s); i++ {
		b ^= s[i]
	}
	return "0123456789abcdef"[b&0xf]
}

// xorWords XORs the little-endian 64-bit words of p (its tail zero-padded);
// a stream offset o contributes rotl(xorWords(p), 8*(o mod 8)).
func xorWords(p []byte) uint64 {
	var x, y, z, u uint64
	i := 0
	for ; i+32 <= len(p); i += 32 {
		q := p[i : i+32 : i+32]
		x ^= binary.LittleEndian.Uint64(q)
		y ^= binary.LittleEndian.Uint64(q[8:])
		z ^= binary.LittleEndian.Uint64(q[16:])
		u ^= binary.LittleEndian.Uint64(q[24:])
	}
	x ^= y ^ z ^ u
	for ; i+8 <= len(p); i += 8 {
		x ^= binary.LittleEndian.Uint64(p[i:])
	}
	for j := 0; i < len(p); i, j = i+1, j+1 {
		x ^= uint64(p[i]) << (8 * j)
	}
	return x
}

// fastxorAt returns the fastxor contribution of p placed at stream offset off.
func fastxorAt(p []byte, off int64) uint64 {
	return bits.RotateLeft64(xorWords(p), int(8*(off&7)))
}

// Salt returns the profile's per-array salt: the first 8 bytes of
// HMAC-SHA256(key, "wtxt-salt-v1" 0x00 gen 0x00 name).
func Salt(key []byte, gen, name string) [8]byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("wtxt-salt-v1\x00"))
	m.Write([]byte(gen))
	m.Write([]byte{0})
	m.Write([]byte(name))
	var s [8]byte
	copy(s[:], m.Sum(nil))
	return s
}

// Merkle computes merkle_this = SHA-256(prev || all || ts || gen || build).
func Merkle(prev, all [32]byte, ts, gen, build string) [32]byte {
	h := sha256.New()
	h.Write(prev[:])
	h.Write(all[:])
	h.Write([]byte(ts))
	h.Write([]byte(gen))
	h.Write([]byte(build))
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// checkMeta validates meta fields against the profile.
func checkMeta(m snapshot.Meta) error {
	for _, f := range []struct{ k, v string }{{"schema", m.Schema}, {"build", m.Build}, {"host", m.Host}, {"cuda", m.Cuda}} {
		if !IsToken(f.v) {
			return fmt.Errorf("meta %s: want one or more of A-Z a-z 0-9 . _ - / : + (got %d bytes)", f.k, len(f.v))
		}
	}
	if m.TS.IsZero() {
		return errors.New("meta ts: not set")
	}
	if y := m.TS.UTC().Year(); y < 0 || y > 9999 {
		return fmt.Errorf("meta ts: year %d out of range", y)
	}
	return nil
}
