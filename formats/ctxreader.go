package formats

import (
	"context"
	"io"
)

// ContextReader returns a reader of r that fails with ctx.Err() once ctx
// is done, checked before every Read, so a long copy (hashing a tensor,
// decompressing, streaming a blob) stops when its caller gives up.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return &ctxReader{ctx: ctx, r: r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
