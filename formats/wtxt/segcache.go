package wtxt

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"lukechampine.com/blake3"
)

// SegmentCacheMagic is the first line of a segment cache file.
const SegmentCacheMagic = "snapd-segment-cache 1"

// MaxSegmentCacheBytes bounds a segment cache file parseSegmentCache
// accepts (a 70B model at 4 MiB segments needs about 4 MB).
const MaxSegmentCacheBytes = 256 << 20

// segLineShape is what an entry line of the cache file must look like, as its
// error spells it.
const segLineShape = "want <array> <first_chunk> <chunks> <bytes> <tag>"

// SegmentCache lets EncodeSkeleton skip the SHA-256 of every chunk of a
// segment whose bytes did not change since the previous generation. The
// skeleton needs each chunk's sha256 and crc32c; a segment that holds
// the same bytes as the previous generation's segment at the same place
// has the chunk sums the previous skeleton lists, and finding that out
// with BLAKE3 (keyed) costs less than half of SHA-256 on this kind of
// machine (AVX-512: 2.4 GB/s a core against SHA-NI's 1.1).
//
// For each segment EncodeSkeleton computes inner = BLAKE3 keyed with
// K_inner over its bytes, and the segment's tag = BLAKE3 keyed with
// K_tag over (its SegmentKey ‖ inner); both keys are derived from a
// secret of the writer (BLAKE3 DeriveKey, contexts "snapd 2026-11-24
// segment cache inner v1" and "... tag v1"). The cache file written after
// a push holds each segment's place and tag. The next push, given that
// file and the previous skeleton, recomputes the tag from the previous
// skeleton's key for that place and the new bytes' inner; equal tags mean
// the bytes are those the key describes, and the previous skeleton's ch
// lines are taken as they are. Without the secret no tag can be made, so
// an edited cache file can only cause misses (each segment is then hashed
// with SHA-256 as without a cache); a tag copied from an older cache is
// still a true statement about the bytes it was made from. The output is
// byte-identical with and without a cache.
//
// A SegmentCache is used by one EncodeSkeleton call; Next and Hits then
// tell what it learned.
type SegmentCache struct {
	tagKey, innerKey [32]byte
	keyID            string
	prev             map[segPos]*cachedSeg

	hits atomic.Int64
	mu   sync.Mutex
	next map[segPos][32]byte
}

// segPos is a segment's place: its array, first chunk, chunk count and
// size.
type segPos struct {
	array                string
	first, chunks, bytes int64
}

// cachedSeg is what the previous generation says of one place.
type cachedSeg struct {
	tag  [32]byte
	key  SegmentKey // from the previous skeleton
	sums []chunkSum
	geo  [][2]int64 // each chunk's off and len
}

// NewSegmentCache returns the cache for a push with the writer's secret
// (the HMAC key, or the signing key's seed: it must not be empty), the
// previous generation's skeleton (ParsePrevSkeleton) and the cache file
// its push wrote (either may be nil: then every segment is a miss and the
// cache only learns tags for the next push). A cache file written with
// another secret is ignored; a malformed one is an error
// (parseSegmentCache: the caller may go on without it).
func NewSegmentCache(secret []byte, prev *PrevSkeleton, cacheFile []byte) (*SegmentCache, error) {
	if len(secret) == 0 {
		return nil, errors.New("wtxt: segment cache: no secret to derive its keys from")
	}
	c := &SegmentCache{prev: map[segPos]*cachedSeg{}, next: map[segPos][32]byte{}}
	blake3.DeriveKey(c.innerKey[:], "snapd 2026-11-24 segment cache inner v1", secret)
	blake3.DeriveKey(c.tagKey[:], "snapd 2026-11-24 segment cache tag v1", secret)
	id := blake3.Sum256(c.tagKey[:])
	c.keyID = hex.EncodeToString(id[:8])
	if cacheFile == nil || prev == nil {
		return c, nil
	}
	keyID, tags, err := parseSegmentCache(cacheFile)
	if err != nil {
		return nil, err
	}
	if keyID != c.keyID {
		return c, nil
	}
	byName := make(map[string]*IndexArray, len(prev.index.Arrays))
	for i := range prev.index.Arrays {
		byName[prev.index.Arrays[i].Name] = &prev.index.Arrays[i]
	}
	for i, s := range prev.segs {
		pos := segPos{s.Array, s.FirstChunk, s.Chunks, s.Size}
		tag, ok := tags[pos]
		if !ok {
			continue
		}
		// ParsePrevSkeleton checked that the seg lines cover the chunks.
		chunks := byName[s.Array].Chunks[s.FirstChunk : s.FirstChunk+s.Chunks]
		cs := &cachedSeg{tag: tag, key: prev.segKeys[i], sums: make([]chunkSum, len(chunks)), geo: make([][2]int64, len(chunks))}
		for i, ch := range chunks {
			cs.sums[i] = chunkSum{sha: ch.SHA256, crc: ch.CRC32C}
			cs.geo[i] = [2]int64{ch.Off, ch.Len}
		}
		c.prev[pos] = cs
	}
	return c, nil
}

// KeyID names the secret the cache's keys come from (first 8 bytes of
// BLAKE3 of the tag key, hex): a cache file with another is ignored.
func (c *SegmentCache) KeyID() string { return c.keyID }

// Hits returns how many segments EncodeSkeleton took from the cache (their
// chunks not hashed with SHA-256).
func (c *SegmentCache) Hits() int64 { return c.hits.Load() }

// inner is the keyed BLAKE3 of a segment's bytes.
func (c *SegmentCache) inner(b []byte) [32]byte {
	h := blake3.New(32, c.innerKey[:])
	h.Write(b)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// tag binds a segment key to the inner hash of the bytes it describes.
func (c *SegmentCache) tag(k SegmentKey, inner [32]byte) [32]byte {
	h := blake3.New(32, c.tagKey[:])
	h.Write(k[:])
	h.Write(inner[:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// lookup returns the previous generation's chunk sums and key for the
// segment at pos whose bytes hash to inner, when its tag proves them and
// its chunks had the offsets and lengths chunk gives now (the same bytes
// cut differently have other sums).
func (c *SegmentCache) lookup(pos segPos, inner [32]byte, chunk func(ix int64) (off, n int64)) (*cachedSeg, bool) {
	cs := c.prev[pos]
	if cs == nil || c.tag(cs.key, inner) != cs.tag {
		return nil, false
	}
	for i, g := range cs.geo {
		if off, n := chunk(pos.first + int64(i)); off != g[0] || n != g[1] {
			return nil, false
		}
	}
	c.hits.Add(1)
	return cs, true
}

// learn records the tag of the segment at pos for the next push.
func (c *SegmentCache) learn(pos segPos, k SegmentKey, inner [32]byte) {
	t := c.tag(k, inner)
	c.mu.Lock()
	c.next[pos] = t
	c.mu.Unlock()
}

// WriteTo writes the cache file for the next push: the magic and key ID,
// then one line per segment EncodeSkeleton encoded, in place order
// ("<array> <first_chunk> <chunks> <bytes> <tag hex>").
func (c *SegmentCache) WriteTo(w io.Writer) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pos := make([]segPos, 0, len(c.next))
	for p := range c.next {
		pos = append(pos, p)
	}
	slices.SortFunc(pos, func(a, b segPos) int {
		if x := strings.Compare(a.array, b.array); x != 0 {
			return x
		}
		return cmp.Compare(a.first, b.first)
	})
	bw := bufio.NewWriter(w)
	n := 0
	k, _ := fmt.Fprintf(bw, "%s keyid=%s\n", SegmentCacheMagic, c.keyID)
	n += k
	for _, p := range pos {
		t := c.next[p]
		k, _ = fmt.Fprintf(bw, "%s %d %d %d %s\n", p.array, p.first, p.chunks, p.bytes, hex.EncodeToString(t[:]))
		n += k
	}
	return int64(n), bw.Flush()
}

// parseSegmentCache reads a cache file SegmentCache.WriteTo wrote: its
// key ID and each place's tag. Anything else (a wrong magic, a malformed
// or duplicate line, more than MaxSegmentCacheBytes) is an error naming
// the line; the file's content is not echoed.
func parseSegmentCache(b []byte) (keyID string, tags map[segPos][32]byte, err error) {
	if len(b) > MaxSegmentCacheBytes {
		return "", nil, fmt.Errorf("segment cache: %d bytes (limit %d)", len(b), MaxSegmentCacheBytes)
	}
	bad := func(line int, what string) error {
		return fmt.Errorf("segment cache: line %d: %s", line, what)
	}
	first, rest, ok := bytes.Cut(b, []byte("\n"))
	if !ok || !bytes.HasPrefix(first, []byte(SegmentCacheMagic+" keyid=")) {
		return "", nil, bad(1, "not a segment cache (want "+strconv.Quote(SegmentCacheMagic)+" and a keyid)")
	}
	keyID = string(first[len(SegmentCacheMagic+" keyid="):])
	if len(keyID) != 16 || !isLowerHex(keyID) {
		return "", nil, bad(1, "keyid: want 16 lowercase hex digits")
	}
	tags = map[segPos][32]byte{}
	for n := 2; len(rest) > 0; n++ {
		var line []byte
		if line, rest, ok = bytes.Cut(rest, []byte("\n")); !ok {
			return "", nil, bad(n, "no LF at the end")
		}
		f := bytes.Split(line, []byte(" "))
		if len(f) != 5 {
			return "", nil, bad(n, segLineShape)
		}
		if _, okName := NameNeedsExt(string(f[0])); !okName {
			return "", nil, bad(n, segLineShape)
		}
		var p segPos
		p.array = string(f[0])
		var ok1, ok2, ok3 bool
		p.first, ok1 = parseDec(string(f[1]), 0)
		p.chunks, ok2 = parseDec(string(f[2]), 0)
		p.bytes, ok3 = parseDec(string(f[3]), 0)
		if !ok1 || !ok2 || !ok3 || p.chunks < 1 {
			return "", nil, bad(n, "first_chunk, chunks and bytes: want canonical decimals, chunks >= 1")
		}
		t, ok := parseHex32(string(f[4]))
		if !ok {
			return "", nil, bad(n, "tag: want 64 lowercase hex digits")
		}
		if _, dup := tags[p]; dup {
			return "", nil, bad(n, "a second line for the same segment")
		}
		tags[p] = t
	}
	return keyID, tags, nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
