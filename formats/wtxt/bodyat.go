package wtxt

import (
	"bufio"
	"context"
	"fmt"
	"io"

	"golang.org/x/sync/errgroup"

	"github.com/snapd-ml/snapd/snapshot"
)

// The body of a WTXT file is a pure function of the arrays' geometry and
// bytes, and every part of it has a length known from the geometry alone
// (fixed-width hashes, decimal fields of known value, base64 of known
// length). When the output is an io.WriterAt, workers therefore render
// disjoint ranges of the body and write each at its offset, with no
// single writer goroutine in the way and no reordering window.

// bodySeg is one array's share of a bodyJob: its head lines (arr, idx)
// when head is set, chunks [from, to), and endarr when tail is set.
type bodySeg struct {
	p          *arrPlan
	head, tail bool
	from, to   int64
}

// bodyJob is a contiguous range [off, off+size) of the body.
type bodyJob struct {
	off, size int64
	segs      []bodySeg
	end       bool // the range ends with the endwtxt line
}

// jobRaw is the raw data volume a job gathers (small chunks and arrays are
// batched, so that a snapshot of many small arrays is not written in tiny
// pieces).
const jobRaw = 128 << 10

func decLen(v int64) int64 {
	n := int64(1)
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// chunkBlockLen is the length of a chunk block as appendChunk writes it:
// the ch line and its LF, the base64 lines with parity, and "endch\n".
func chunkBlockLen(ix, off, n int64) int64 {
	l := int64(len("ch ix=")) + max(6, decLen(ix)) + int64(len(" off=")) + max(12, decLen(off)) +
		int64(len(" len=")) + decLen(n) + int64(len(" sha256=")) + 64 + int64(len(" crc32c=")) + 8 +
		int64(len(" b64=on width=76 lines=")) + decLen(numLines(n)) + 1
	l += (n / rawPerLine) * lineOut
	if r := n % rawPerLine; r > 0 {
		l += 4*((r+2)/3) + 3
	}
	return l + int64(len("endch\n"))
}

func headLen(p *arrPlan) int64 {
	l := int64(len(p.line)) + 1
	if p.idx != "" {
		l += int64(len(p.idx)) + 1
	}
	return l
}

const endarrLine = "endarr\n"

// writeBodyAt writes the body (every array block and the endwtxt line) at
// offset base of w, rendered by workers in parallel, and returns its
// length. The bytes are those writeBody writes.
func writeBodyAt(ctx context.Context, w io.WriterAt, base int64, plans []*arrPlan, workers int) (int64, error) {
	g, gctx := errgroup.WithContext(ctx)
	jobs := make(chan *bodyJob)
	var total int64
	g.Go(func() error {
		defer close(jobs)
		off := base
		j := &bodyJob{off: off}
		var raw int64
		emit := func() bool {
			if j.size == 0 && !j.end {
				return true
			}
			select {
			case jobs <- j:
			case <-gctx.Done():
				return false
			}
			off += j.size
			j, raw = &bodyJob{off: off}, 0
			return true
		}
		for _, p := range plans {
			seg := bodySeg{p: p, head: true}
			j.size += headLen(p)
			nch := p.geo.numChunks()
			for ix := int64(0); ix < nch; ix++ {
				coff, n := p.geo.chunk(ix)
				j.size += chunkBlockLen(ix, coff, n)
				raw += n
				seg.to = ix + 1
				if raw >= jobRaw && ix+1 < nch {
					j.segs = append(j.segs, seg)
					if !emit() {
						return gctx.Err()
					}
					seg = bodySeg{p: p, from: ix + 1, to: ix + 1}
				}
			}
			seg.tail = true
			j.size += int64(len(endarrLine))
			j.segs = append(j.segs, seg)
			if raw >= jobRaw {
				if !emit() {
					return gctx.Err()
				}
			}
		}
		j.end = true
		j.size += int64(len(endLine)) + 1
		if !emit() {
			return gctx.Err()
		}
		total = off - base
		return nil
	})
	for range workers {
		g.Go(func() error {
			var buf, out []byte
			for j := range jobs {
				var err error
				if buf, out, err = renderJob(gctx, w, j, buf, out[:0]); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return total, nil
}

// renderJob renders j and writes it at j.off; buf is the read buffer and
// out the output buffer, both returned for reuse.
func renderJob(ctx context.Context, w io.WriterAt, j *bodyJob, buf, out []byte) ([]byte, []byte, error) {
	off := j.off
	flush := func() error {
		if len(out) == 0 {
			return nil
		}
		if _, err := w.WriteAt(out, off); err != nil {
			return err
		}
		off += int64(len(out))
		out = out[:0]
		return nil
	}
	for _, sg := range j.segs {
		p := sg.p
		if sg.head {
			out = appendArrHead(out, p)
		}
		for ix := sg.from; ix < sg.to; ix++ {
			if err := ctx.Err(); err != nil {
				return buf, out, err
			}
			coff, n := p.geo.chunk(ix)
			if n > bigChunk {
				if err := flush(); err != nil {
					return buf, out, err
				}
				ow := &countWriter{w: io.NewOffsetWriter(w, off)}
				bw := bufio.NewWriterSize(ow, 64<<10)
				if err := streamChunk(bw, p, ix); err != nil {
					return buf, out, err
				}
				if err := bw.Flush(); err != nil {
					return buf, out, err
				}
				off += ow.n
				continue
			}
			raw, err := chunkRaw(p, ix, buf)
			if err != nil {
				return buf, out, err
			}
			buf = raw
			var cs *chunkSum
			if ix < int64(len(p.sums)) {
				cs = &p.sums[ix]
			}
			out = appendChunk(out, ix, coff, raw, cs)
			snapshot.Release(p.src, coff, n)
		}
		if sg.tail {
			out = append(out, endarrLine...)
		}
	}
	if j.end {
		out = append(out, endLine+"\n"...)
	}
	if err := flush(); err != nil {
		return buf, out, err
	}
	if off != j.off+j.size {
		return buf, out, fmt.Errorf("wtxt: internal error: body range at %d rendered %d bytes, layout says %d", j.off, off-j.off, j.size)
	}
	return buf, out, nil
}
