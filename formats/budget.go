package formats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
)

// Default decode budget: a file may decode to DefaultBudgetRatio times its
// size, at least DefaultBudgetFloor and never more than DefaultBudgetCap
// bytes (DecodeOptions.MaxDecoded overrides all three). The ratio leaves
// room for checkpoints with large all-zero tensors (zstd compresses those
// far beyond 256:1 only in files of at least 64 MiB, where the cap
// applies); decompression bombs inflate 100 KB to GiBs.
const (
	DefaultBudgetFloor = 256 << 20
	DefaultBudgetRatio = 256
	DefaultBudgetCap   = 16 << 30
)

// Zstd window limits of DecompressZstd: a frame may always use an 8 MiB
// window (every zstd level up to 19 fits); above that the window may grow
// to the output limit, up to 128 MiB (windowLog 27, the largest of any
// non-long zstd level).
const (
	minZstdWindow = 8 << 20
	maxZstdWindow = 128 << 20
)

// DefaultMaxDecoded is the decode budget of a file of size bytes when
// DecodeOptions.MaxDecoded is not set: min(DefaultBudgetCap,
// max(DefaultBudgetFloor, DefaultBudgetRatio × size)).
func DefaultMaxDecoded(size int64) int64 {
	if size < 0 {
		size = 0
	}
	n := int64(DefaultBudgetCap)
	if size <= n/DefaultBudgetRatio {
		n = size * DefaultBudgetRatio
	}
	return min(max(n, DefaultBudgetFloor), DefaultBudgetCap)
}

// Budget is the one cap on the bytes a single Decode call decompresses or
// materialises (copies out of the file into new memory: decompressed
// chunks, byte-swapped or gathered tensors, views rebuilt from a shared
// storage). A decoder charges the budget with Take before it allocates, so
// a small hostile file (a decompression bomb, many views of one storage)
// fails with an error wrapping ErrLimit instead of exhausting memory.
// Bytes that stay in the file (zero-copy sections of a mapping) are not
// charged. A Budget is safe for concurrent use.
type Budget struct {
	limit int64
	used  atomic.Int64
	peak  atomic.Int64
}

// NewBudget returns a budget of limit bytes (limit <= 0: nothing may be
// materialised).
func NewBudget(limit int64) *Budget { return &Budget{limit: max(limit, 0)} }

// Limit is the budget's total size.
func (b *Budget) Limit() int64 { return b.limit }

// Used is what is charged now (taken and not given back).
func (b *Budget) Used() int64 { return b.used.Load() }

// Peak is the most that was ever charged at once; it never exceeds Limit.
// Tests read it to check what a decode materialised.
func (b *Budget) Peak() int64 { return b.peak.Load() }

// Remaining is what Take can still grant.
func (b *Budget) Remaining() int64 { return max(b.limit-b.used.Load(), 0) }

// Take charges n bytes for what (e.g. `chunk "w" (index 2): zstd
// payload`) and fails, charging nothing, when they exceed the remaining
// budget. The error wraps ErrLimit and names what, n and the budget.
func (b *Budget) Take(n int64, what string) error {
	if n < 0 {
		return fmt.Errorf("%w: %s: negative size %d", ErrCorrupt, what, n)
	}
	for {
		used := b.used.Load()
		if n > b.limit-used {
			return fmt.Errorf("%w: %s: %d bytes exceed the remaining decode budget of %d bytes (%d for this file; DecodeOptions.MaxDecoded)",
				ErrLimit, what, n, max(b.limit-used, 0), b.limit)
		}
		if b.used.CompareAndSwap(used, used+n) {
			for {
				p := b.peak.Load()
				if used+n <= p || b.peak.CompareAndSwap(p, used+n) {
					return nil
				}
			}
		}
	}
}

// Give returns n bytes taken earlier (e.g. a temporary buffer that was
// freed). It never raises the budget above its limit.
func (b *Budget) Give(n int64) {
	if n > 0 {
		b.used.Add(-min(n, b.used.Load()))
	}
}

// DecompressZstd decodes the zstd frames read from src into memory and
// charges the budget for them before allocating.
//
// With exact, the output must be exactly limit bytes: limit is charged up
// front, the buffer allocated once, and a frame whose header declares a
// different content size is refused before anything is decoded (ErrCorrupt).
// Without exact, limit is an upper bound (as a shape allows) and the
// output buffer grows with the real output, never beyond min(limit,
// remaining budget); the bytes produced are charged.
//
// Output beyond limit is ErrCorrupt ("decompresses to more than ..."),
// beyond the budget ErrLimit, a window larger than the frame may need
// ErrLimit, bad zstd data ErrCorrupt. Errors name what and never quote the
// data. ctx is checked between reads.
func (b *Budget) DecompressZstd(ctx context.Context, src io.Reader, limit int64, exact bool, what string) ([]byte, error) {
	if limit < 0 {
		return nil, fmt.Errorf("%w: %s: negative size %d", ErrCorrupt, what, limit)
	}
	if exact {
		if err := b.Take(limit, what+": zstd output"); err != nil {
			return nil, err
		}
		// The buffer grows with the real output (never beyond limit), so a
		// declared size alone does not make anything allocate.
		buf := &growBuffer{max: limit}
		if _, err := b.zstdCopy(ctx, buf, src, limit, limit, true, what); err != nil {
			b.Give(limit)
			return nil, err
		}
		return buf.b, nil
	}
	stop := min(limit, b.Remaining())
	buf := &growBuffer{max: stop}
	n, err := b.zstdCopy(ctx, buf, src, limit, stop, false, what)
	if err != nil {
		return nil, err
	}
	if err := b.Take(n, what+": zstd output"); err != nil {
		return nil, err
	}
	return buf.b, nil
}

// growBuffer collects output, doubling its capacity as data arrives but
// never beyond max (more input than max is accepted and dropped: the
// caller's limit reader stops one byte past it and reports the excess).
type growBuffer struct {
	b   []byte
	max int64
}

func (g *growBuffer) Write(p []byte) (int, error) {
	room := g.max - int64(len(g.b))
	k := int64(len(p))
	if k > room {
		k = max(room, 0)
	}
	if need := int64(len(g.b)) + k; need > int64(cap(g.b)) {
		c := min(max(2*int64(cap(g.b)), need, 64<<10), g.max)
		nb := make([]byte, len(g.b), c)
		copy(nb, g.b)
		g.b = nb
	}
	g.b = append(g.b, p[:k]...)
	return len(p), nil
}

// DecompressZstdTo streams the zstd frames read from src into w (a hash,
// a file) without holding them, and charges the budget for the bytes
// produced (decompression costs time even when nothing is kept). exact and
// limit are as in DecompressZstd. It returns the number of bytes written.
func (b *Budget) DecompressZstdTo(ctx context.Context, w io.Writer, src io.Reader, limit int64, exact bool, what string) (int64, error) {
	if limit < 0 {
		return 0, fmt.Errorf("%w: %s: negative size %d", ErrCorrupt, what, limit)
	}
	cap := min(limit, b.Remaining())
	n, err := b.zstdCopy(ctx, w, src, limit, cap, exact, what)
	if err != nil {
		return n, err
	}
	if err := b.Take(n, what+": zstd output"); err != nil {
		return n, err
	}
	return n, nil
}

// zstdCopy decodes src into w, producing at most stop bytes; limit is the
// format's bound, stop = min(limit, what the budget allows).
func (b *Budget) zstdCopy(ctx context.Context, w io.Writer, src io.Reader, limit, stop int64, exact bool, what string) (int64, error) {
	br := &peekReader{r: src}
	// Declared content size of the first frame, checked before decoding.
	if hdr, err := br.peek(zstd.HeaderMaxSize); err == nil || len(hdr) > 0 {
		var h zstd.Header
		if h.Decode(hdr) == nil && !h.Skippable && h.HasFCS {
			switch {
			case h.FrameContentSize > uint64(limit):
				return 0, fmt.Errorf("%w: %s: zstd frame declares %d bytes of content, more than the %d allowed", ErrCorrupt, what, h.FrameContentSize, limit)
			case h.FrameContentSize > uint64(stop):
				return 0, fmt.Errorf("%w: %s: zstd frame declares %d bytes of content, more than the remaining decode budget of %d bytes (%d for this file)", ErrLimit, what, h.FrameContentSize, stop, b.limit)
			}
		}
	}
	window := uint64(min(max(stop, minZstdWindow), maxZstdWindow))
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(window),
		zstd.WithDecoderMaxMemory(window))
	if err != nil {
		return 0, fmt.Errorf("%s: zstd decoder: %w", what, err)
	}
	defer dec.Close()
	if err := dec.Reset(br); err != nil {
		return 0, fmt.Errorf("%w: %s: zstd: %s", ErrCorrupt, what, zstdReason(err))
	}
	n, err := io.Copy(tagWriter{w}, ContextReader(ctx, io.LimitReader(dec, satAdd(stop, 1))))
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return n, cerr
		}
		if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
			return n, fmt.Errorf("%w: %s: zstd frame needs a window larger than %d bytes", ErrLimit, what, window)
		}
		var we writeError
		if errors.As(err, &we) {
			return n, we.error
		}
		return n, fmt.Errorf("%w: %s: zstd: %s", ErrCorrupt, what, zstdReason(err))
	}
	switch {
	case n > limit:
		return n, fmt.Errorf("%w: %s: zstd data decompresses to more than the %d bytes allowed", ErrCorrupt, what, limit)
	case n > stop:
		return n, fmt.Errorf("%w: %s: zstd data decompresses to more than the remaining decode budget of %d bytes (%d for this file; DecodeOptions.MaxDecoded)", ErrLimit, what, stop, b.limit)
	case exact && n != limit:
		return n, fmt.Errorf("%w: %s: zstd data decompresses to %d bytes, %d declared", ErrCorrupt, what, n, limit)
	}
	return n, nil
}

type writeError struct{ error }

// tagWriter marks the destination's errors so they are not mistaken for
// bad zstd data.
type tagWriter struct{ w io.Writer }

func (t tagWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	if err != nil {
		err = writeError{err}
	}
	return n, err
}

func (e writeError) Unwrap() error { return e.error }

// zstdReason is the library's message for err; it describes the frame
// structure, never the data.
func zstdReason(err error) string { return err.Error() }

// peekReader lets the frame header be inspected before decoding.
type peekReader struct {
	r    io.Reader
	head []byte
}

func (p *peekReader) peek(n int) ([]byte, error) {
	for len(p.head) < n {
		buf := make([]byte, n-len(p.head))
		k, err := p.r.Read(buf)
		p.head = append(p.head, buf[:k]...)
		if err != nil {
			return p.head, err
		}
		if k == 0 {
			break
		}
	}
	return p.head, nil
}

func (p *peekReader) Read(b []byte) (int, error) {
	if len(p.head) > 0 {
		n := copy(b, p.head)
		p.head = p.head[n:]
		return n, nil
	}
	return p.r.Read(b)
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
