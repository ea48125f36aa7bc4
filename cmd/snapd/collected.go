package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
)

// hintCollected follows a "content collected" error (checkout, assemble).
const hintCollected = "retention (snapd gc --remote --keep K, then the registry's garbage collection) removed this generation's tensor bytes on purpose; check out a generation the registry still holds, or restore from another copy. snapd verify-repo reports it as collected, not as a failure (unless --require-content)"

// explainCollected returns the assembly error err of generation gen
// (DEC6, as the skeleton's header or generation.txt write it; tag: its
// oci_tag, or "" when unknown) as the
// "content collected" error when retention removed the generation's
// content from src (oci.Repository.ExplainMissing: a blob and the
// gen-NNNNNN manifest not found), after checking the skeleton alone:
// every line (every ch hash present and well-formed, every seg line
// against its ch lines) and the header's Merkle value; skel writes the
// skeleton again, name labels it in errors. Any other err is returned
// unchanged. Exit status 1 either way (docs/COMMANDS.md).
func explainCollected(ctx context.Context, src *oci.Repository, gen, tag string, skel func(io.Writer) error, name string, err error) error {
	err = src.ExplainMissing(ctx, gen, tag, err)
	var ce *oci.CollectedError
	if !errors.As(err, &ce) {
		return err
	}
	if serr := checkSkeletonAlone(ctx, skel, name); serr != nil {
		ce.Skeleton = fmt.Sprintf("and its skeleton fails its own checks: %v", serr)
		return ce
	}
	ce.Skeleton = "its skeleton in the ledger is intact (every line and ch hash, the header's Merkle value; snapd verify-repo --pubkey checks its signatures)"
	return withHint(ce, hintCollected)
}

// checkSkeletonAlone checks a skeleton without any blob: every line, as
// wtxt.CheckSkeletonSample reads it with no segment picked, and the
// header's merkle_this against its declared values.
func checkSkeletonAlone(ctx context.Context, skel func(io.Writer) error, name string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(skel(pw)) }()
	head := &headBytes{max: 64 << 10}
	_, _, err := wtxt.CheckSkeletonSample(ctx, io.TeeReader(pr, head), name, nil, func(int, wtxt.Segment) bool { return false })
	pr.CloseWithError(errors.New("skeleton check ended"))
	if err != nil {
		return err
	}
	h, err := wtxt.ReadHeader(bytes.NewReader(bytes.TrimPrefix(head.buf, []byte(wtxt.SkeletonMagic+"\n"))))
	if err != nil {
		return fmt.Errorf("%s: header: %w", name, err)
	}
	if m := wtxt.Merkle(h.MerklePrev, h.SHA256All, h.TS, h.Gen, h.Meta.Build); !h.Pending && m != h.MerkleThis {
		return fmt.Errorf("%s: merkle_this is %x, SHA-256(merkle_prev || sha256_all || ts || gen || build) gives %x", name, h.MerkleThis, m)
	}
	return nil
}

// headBytes keeps the first max bytes written to it.
type headBytes struct {
	buf []byte
	max int
}

func (h *headBytes) Write(p []byte) (int, error) {
	if n := h.max - len(h.buf); n > 0 {
		h.buf = append(h.buf, p[:min(n, len(p))]...)
	}
	return len(p), nil
}
