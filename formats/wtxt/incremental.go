package wtxt

import (
	"bytes"
	"crypto/sha256"
	"hash/crc32"
	"io"
	"sync/atomic"
)

// Incremental encoding (EncodeOptions.Prev).
//
// Between two generations of a training run most chunks keep their bytes.
// The format still forces, per generation, a full pass over the raw bytes
// for each chunk's sha256 (it is how an unchanged chunk is recognized),
// each array's HMAC (its salt includes gen), sha256_all (its arr lines
// carry the new hmac) and fastxor. What an unchanged chunk does not need
// is its base64 lines and parity digits: a chunk block is a function of
// (ix, off, len, the raw bytes) alone, so its lines are the previous
// generation's, byte for byte. With EncodeOptions.Prev the writer copies
// them from the previous file instead of encoding them.
//
// A chunk is copied only when the previous file has an array of the same
// name, dtype, shape, byte count and chunk geometry (rows_per_chunk,
// row_size), and its chunk with the same ix has the same off, len, sha256
// and crc32c as the chunk just computed from the new bytes (the sha256 and
// crc32c are always computed from the new bytes; the ch line is written
// from them, never copied). The previous file is not trusted: the copied
// text must equal, byte for byte, the lines the new bytes encode to
// (followed by "endch"). Anything else (a truncated, torn, shifted or
// edited previous file, a read error) makes the writer encode that chunk
// as usual. The output is therefore byte-identical to a full encode
// whatever Prev holds; only the cost differs. The check is exact, not a
// checksum, so that no previous file, however crafted, can put lines into
// the output that do not encode its chunk.
//
// What it costs: an exact check needs every character of the copied
// lines set against the new bytes, which is at least an encode (the
// cheapest way, used here; decoding the copied lines and comparing bytes
// measured 2.5 times slower). Copying therefore saves nothing over
// encoding, on this machine about 2 GB/s, against the four SHA-256 passes
// the format forces (BenchmarkChunkText, BenchmarkEncodePrev256MiB; see
// the README's Performance section). It is kept for what it shows: that
// nothing but those passes is left to skip.
//
// Chunks above bigChunk (streamed by the writer) are always encoded.

// PrevWTXT is a previous generation's plaintext WTXT for EncodeOptions.Prev.
type PrevWTXT struct {
	// R reads the file Index was read from (ReadIndex). It must allow
	// concurrent ReadAt (an *os.File does).
	R io.ReaderAt
	// Index is the file's structure (ReadIndex or ReadIndexWith).
	Index *Index
}

// prevArray is the previous generation's matching array of an arrPlan.
type prevArray struct {
	r      io.ReaderAt
	a      *IndexArray
	copied atomic.Int64 // chunks whose lines were copied
	failed atomic.Int64 // chunks whose ch line matched but whose copied lines did not check out
}

// attachPrev links each plan to the previous generation's array of the
// same name when dtype, shape, byte count and chunk geometry are the same.
func attachPrev(plans []*arrPlan, prev *PrevWTXT) {
	if prev == nil || prev.Index == nil || prev.R == nil {
		return
	}
	byName := make(map[string]*IndexArray, len(prev.Index.Arrays))
	for i := range prev.Index.Arrays {
		byName[prev.Index.Arrays[i].Name] = &prev.Index.Arrays[i]
	}
	for _, p := range plans {
		a := byName[p.name]
		if a == nil || a.DType != p.dt || a.Bytes != p.nbytes || len(a.Shape) != len(p.shape) {
			continue
		}
		same := true
		for i := range p.shape {
			same = same && a.Shape[i] == p.shape[i]
		}
		var rpc, rs int64
		if p.geo.blocked {
			rpc, rs = p.geo.rowsPerChunk, p.geo.rowSize
		}
		if !same || a.RowsPerChunk != rpc || a.RowSize != rs || int64(len(a.Chunks)) != p.geo.numChunks() {
			continue
		}
		p.prev = &prevArray{r: prev.R, a: a}
	}
}

// prevCounts sums the copied and failed chunks over plans.
func prevCounts(plans []*arrPlan) (copied, failed int64) {
	for _, p := range plans {
		if p.prev != nil {
			copied += p.prev.copied.Load()
			failed += p.prev.failed.Load()
		}
	}
	return copied, failed
}

// chunkTextLen is the length of a chunk's base64 lines (with parity and
// LF) plus "endch\n": the bytes between its ch line and the next line.
func chunkTextLen(n int64) int64 {
	l := (n / rawPerLine) * lineOut
	if r := n % rawPerLine; r > 0 {
		l += 4*((r+2)/3) + 3
	}
	return l + int64(len("endch\n"))
}

// appendChunkBlock appends chunk ix's block (see appendChunk), copying its
// lines from the previous generation when they are provably the same
// (see the comment at the top of this file). scratch is a reusable buffer
// of the worker's, returned possibly grown.
func appendChunkBlock(dst []byte, p *arrPlan, ix, off int64, raw []byte, cs *chunkSum, scratch []byte) ([]byte, []byte) {
	pv := p.prev
	if pv == nil || ix >= int64(len(pv.a.Chunks)) {
		return appendChunk(dst, ix, off, raw, cs), scratch
	}
	c := &pv.a.Chunks[ix]
	n := int64(len(raw))
	if c.IX != ix || c.Off != off || c.Len != n {
		return appendChunk(dst, ix, off, raw, cs), scratch
	}
	if cs == nil {
		cs = &chunkSum{}
		*cs = sumOf(raw)
	}
	if c.SHA256 != cs.sha || c.CRC32C != cs.crc {
		return appendChunk(dst, ix, off, raw, cs), scratch
	}
	tl := chunkTextLen(n)
	if c.Data < 0 || c.End-c.Data != tl {
		pv.failed.Add(1)
		return appendChunk(dst, ix, off, raw, cs), scratch
	}
	head := len(dst)
	dst = chLine(dst, ix, off, n, cs.sha, cs.crc)
	dst = append(dst, '\n')
	at := len(dst)
	dst = growBytes(dst, int(tl))
	text := dst[at:]
	if int64(cap(scratch)) < tl {
		scratch = make([]byte, tl)
	}
	if k, err := pv.r.ReadAt(text, c.Data); k == len(text) && (err == nil || err == io.EOF) && linesEncode(text, raw, scratch) {
		pv.copied.Add(1)
		return dst, scratch
	}
	pv.failed.Add(1)
	return appendChunk(dst[:head], ix, off, raw, cs), scratch
}

// linesEncode reports whether text is exactly the base64 lines of raw
// (as appendLines writes them) followed by "endch\n". scratch has at
// least textLen(len(raw)) bytes of capacity. The lines are encoded again
// into scratch and compared: encoding (pair tables, about 2 GB/s here)
// is the cheapest exact check; decoding the copied lines and comparing the
// bytes costs about 2.5 times as much (BenchmarkChunkText).
func linesEncode(text, raw, scratch []byte) bool {
	want := appendLines(scratch[:0], raw)
	return len(text) == len(want)+len("endch\n") && bytes.Equal(text[:len(want)], want) && string(text[len(want):]) == "endch\n"
}

// sumOf is a chunk's sha256 and crc32c.
func sumOf(raw []byte) chunkSum {
	return chunkSum{sha: sha256.Sum256(raw), crc: crc32.Checksum(raw, castagnoli)}
}
