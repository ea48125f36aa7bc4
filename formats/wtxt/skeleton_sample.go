package wtxt

import (
	"bufio"
	"context"
	"io"
)

// CheckSkeletonSample reads a skeleton as SkeletonSegments does (every
// line; every seg line against the ch lines it covers) and, for each
// segment pick accepts (called with the segment's index in file order),
// reads its blob from src and checks it exactly as Assemble does: every
// chunk's sha256 and crc32c against its ch line, the blob's length and
// digest. Blobs of segments pick rejects are not opened. Nothing is
// written. It returns every segment in file order and what was read;
// errors are *Error values naming the skeleton line, array, chunk, check
// and, for a blob, its digest. A nil pick checks every segment.
func CheckSkeletonSample(ctx context.Context, skeleton io.Reader, name string, src BlobSource, pick func(index int, s Segment) bool) ([]Segment, *AssembleInfo, error) {
	if pick == nil {
		pick = func(int, Segment) bool { return true }
	}
	a := &assembler{ctx: ctx, lr: newLineReader(skeleton, name), w: bufio.NewWriter(io.Discard), src: src, info: &AssembleInfo{}, pick: pick}
	err := a.run()
	if a.blob != nil {
		a.blob.Close()
	}
	if err != nil {
		return nil, nil, err
	}
	return a.segs, a.info, nil
}
