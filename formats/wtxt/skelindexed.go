package wtxt

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
)

// SegmentKey identifies a segment's content by what the ch lines of its
// chunks claim: SHA-256 over the array name and each chunk's off, len,
// sha256 and crc32c. Two segments with the same key hold the same bytes
// (as far as SHA-256 is collision resistant), so a caller that stored the
// segment of a key before knows its digest without decoding it again.
type SegmentKey [32]byte

// segmentKey is the SegmentKey of the segment of array name holding chunks.
func segmentKey(name string, chunks []IndexChunk) SegmentKey {
	kh := sha256.New()
	var num [8]byte
	binary.BigEndian.PutUint64(num[:], uint64(len(name)))
	kh.Write(num[:])
	kh.Write([]byte(name))
	for _, c := range chunks {
		binary.BigEndian.PutUint64(num[:], uint64(c.Off))
		kh.Write(num[:])
		binary.BigEndian.PutUint64(num[:], uint64(c.Len))
		kh.Write(num[:])
		kh.Write(c.SHA256[:])
		binary.BigEndian.PutUint32(num[:4], c.CRC32C)
		kh.Write(num[:4])
	}
	var key SegmentKey
	kh.Sum(key[:0])
	return key
}

// KnownSegment tells SplitIndexed the digest of a segment stored earlier
// under key k; ok false means the segment is decoded and checked.
type KnownSegment func(k SegmentKey) (digest [32]byte, ok bool)

// SplitIndexed is Split for a file that can be read at offsets: the same
// skeleton and the same segments, byte for byte, but the structure comes
// from ReadIndex and a segment that known recognizes by its key is neither
// read, decoded nor hashed (its seg line takes the known digest, and sink
// is not called for it). Every other segment's chunks are decoded and
// checked as Split checks them (base64 shape, parity, sha256, crc32c).
// keys[i] is the key of segs[i]. It does not check hashes above the chunk
// or signatures: run Verify on the input for that.
func SplitIndexed(ctx context.Context, r io.ReaderAt, size int64, skel io.Writer, sink SegmentSink, known KnownSegment, opts SplitOptions) (segs []Segment, keys []SegmentKey, err error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if opts.MaxSegment <= 0 {
		opts.MaxSegment = DefaultMaxSegment
	}
	x, err := ReadIndex(ctx, opts.File, r, size)
	if err != nil {
		return nil, nil, err
	}
	fail := func(a *IndexArray, c *IndexChunk, check Check, format string, args ...any) error {
		return &Error{File: opts.File, Line: c.Line, Array: a.Name, Chunk: c.IX, Check: check, Msg: fmt.Sprintf(format, args...)}
	}
	// copyRange writes bytes [from, to) of r to the skeleton.
	var cbuf []byte
	copyRange := func(from, to int64) error {
		if to < from {
			return &Error{File: opts.File, Chunk: -1, Check: CheckGrammar, Msg: fmt.Sprintf("index range %d..%d is reversed", from, to)}
		}
		for from < to {
			n := min(to-from, 64<<10)
			if int64(cap(cbuf)) < n {
				cbuf = make([]byte, n)
			}
			b := cbuf[:n]
			if _, err := r.ReadAt(b, from); err != nil {
				return fmt.Errorf("wtxt: read %d bytes at offset %d: %w", n, from, err)
			}
			if _, err := skel.Write(b); err != nil {
				return err
			}
			from += n
		}
		return nil
	}
	if _, err := io.WriteString(skel, SkeletonMagic+"\n"); err != nil {
		return nil, nil, err
	}
	trailer := size
	if len(x.Arrays) > 0 {
		trailer = x.Arrays[0].Start
	}
	// The header; with no array, everything up to the end.
	if err := copyRange(0, trailer); err != nil {
		return nil, nil, err
	}
	var raw, lineBuf []byte
	var chLines []byte
	for ai := range x.Arrays {
		a := &x.Arrays[ai]
		first := a.End
		if len(a.Chunks) > 0 {
			first = a.Chunks[0].Start
		}
		if err := copyRange(a.Start, first); err != nil { // arr + idx (+ endarr when no chunk)
			return nil, nil, err
		}
		for i := 0; i < len(a.Chunks); {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			// The segment: chunks i..j-1, cut greedily as Split cuts.
			j, n := i, int64(0)
			for j < len(a.Chunks) {
				c := &a.Chunks[j]
				if c.Len > opts.MaxSegment {
					return nil, nil, fail(a, c, CheckGeometry, "len=%d exceeds the segment limit of %d bytes", c.Len, opts.MaxSegment)
				}
				if j > i && n+c.Len > opts.SegmentSize {
					break
				}
				n += c.Len
				j++
			}
			key := segmentKey(a.Name, a.Chunks[i:j])
			seg := Segment{Size: n, Array: a.Name, FirstChunk: a.Chunks[i].IX, Chunks: int64(j - i)}
			digest, ok := [32]byte{}, false
			if known != nil {
				digest, ok = known(key)
			}
			chLines = chLines[:0]
			if !ok {
				raw = growBytes(raw[:0], int(n))
			}
			var got int64
			for k := i; k < j; k++ {
				c := &a.Chunks[k]
				hl := c.Data - c.Start
				body := c.End - c.Data - int64(len("endch\n"))
				if hl <= 0 || hl > MaxLineLen || body < 0 {
					return nil, nil, fail(a, c, CheckGrammar, "index offsets of the chunk are inconsistent")
				}
				start := len(chLines)
				chLines = growBytes(chLines, int(hl))
				if _, err := r.ReadAt(chLines[start:], c.Start); err != nil {
					return nil, nil, fmt.Errorf("wtxt: read ch line at offset %d: %w", c.Start, err)
				}
				chLines = append(chLines, "endch\n"...)
				if ok {
					continue
				}
				if int64(cap(lineBuf)) < body {
					lineBuf = make([]byte, body)
				}
				lb := lineBuf[:body]
				if _, err := r.ReadAt(lb, c.Data); err != nil {
					return nil, nil, fmt.Errorf("wtxt: read chunk %d of %s at offset %d: %w", c.IX, a.Name, c.Data, err)
				}
				out := raw[got : got+c.Len]
				var d int64
				for li := int64(0); d < c.Len; li++ {
					want := min(int64(rawPerLine), c.Len-d)
					// A full line that is exactly right decodes through the
					// pair tables (as Split's fast path); anything else is
					// checked below, which names what is wrong.
					if want == rawPerLine && len(lb) >= lineOut && lb[B64Width] == ' ' && lb[B64Width+2] == '\n' {
						if par, ok := decodeFullLine(out[d:d+rawPerLine], lb[:B64Width]); ok && par == lb[B64Width+1] {
							d += rawPerLine
							lb = lb[lineOut:]
							continue
						}
					}
					chars := base64.StdEncoding.EncodedLen(int(want))
					if len(lb) < chars+3 || lb[chars] != ' ' || lb[chars+2] != '\n' {
						return nil, nil, fail(a, c, CheckBase64, "base64 line %d of the chunk: want %d characters, a space and the parity digit", li+1, chars)
					}
					if parityNibble(lb[:chars]) != lb[chars+1] {
						return nil, nil, fail(a, c, CheckParity, "base64 line %d of the chunk: parity digit does not match", li+1)
					}
					m, err := base64.StdEncoding.Strict().Decode(out[d:d+want], lb[:chars])
					if err != nil || int64(m) != want {
						return nil, nil, fail(a, c, CheckBase64, "base64 line %d of the chunk does not decode to %d bytes", li+1, want)
					}
					d += want
					lb = lb[chars+3:]
				}
				if len(lb) != 0 {
					return nil, nil, fail(a, c, CheckBase64, "%d bytes after the chunk's base64 lines", len(lb))
				}
				if sha256.Sum256(out) != c.SHA256 {
					return nil, nil, fail(a, c, CheckChunkSHA, "sha256 of the decoded bytes does not match the ch line")
				}
				if crc32.Checksum(out, castagnoli) != c.CRC32C {
					return nil, nil, fail(a, c, CheckCRC32C, "crc32c of the decoded bytes does not match the ch line")
				}
				got += c.Len
			}
			if ok {
				seg.Digest = digest
			} else {
				seg.Digest = sha256.Sum256(raw[:n])
			}
			if _, err := skel.Write(append(segLine(nil, seg), '\n')); err != nil {
				return nil, nil, err
			}
			if _, err := skel.Write(chLines); err != nil {
				return nil, nil, err
			}
			if !ok && sink != nil {
				if err := sink(ctx, seg, raw[:n]); err != nil {
					return nil, nil, fmt.Errorf("array %s: segment at chunk %d: %w", seg.Array, seg.FirstChunk, err)
				}
			}
			segs = append(segs, seg)
			keys = append(keys, key)
			i = j
		}
		if len(a.Chunks) > 0 {
			if err := copyRange(a.Chunks[len(a.Chunks)-1].End, a.End); err != nil { // endarr
				return nil, nil, err
			}
		}
		trailer = a.End
	}
	if err := copyRange(trailer, size); err != nil { // audit, endwtxt
		return nil, nil, err
	}
	return segs, keys, nil
}
