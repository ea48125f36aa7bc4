package dcp

import (
	"context"
	"errors"
	"io"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// errDirectory: a DCP checkpoint is a directory; Codec reads and writes
// no single file.
var errDirectory = errors.New("a DCP checkpoint is a directory (.metadata and __R_N.distcp files): read it by naming the directory, write it with a directory output and --to dcp")

// Codec names the DCP format in a formats.Registry (for --to dcp). It
// sniffs nothing, has no extension, and its Decode and Encode fail: a DCP
// checkpoint is a directory, read by Open and written by Write.
type Codec struct{}

// New returns the DCP codec.
func New() formats.Codec { return Codec{} }

// Name implements formats.Codec.
func (Codec) Name() string { return "dcp" }

// Extensions implements formats.Codec: none (.distcp files are parts of
// a directory, not checkpoints of their own).
func (Codec) Extensions() []string { return nil }

// Sniff implements formats.Codec: never (an item file alone is not a
// checkpoint).
func (Codec) Sniff([]byte) bool { return false }

// Decode implements formats.Codec: it always fails.
func (Codec) Decode(_ context.Context, _ io.ReaderAt, _ int64, opts formats.DecodeOptions) (*snapshot.Snapshot, error) {
	return nil, &formats.Error{Format: "dcp", File: opts.Name, Offset: -1, Check: errDirectory.Error(), Err: ErrUnsupported}
}

// Encode implements formats.Codec: it always fails.
func (Codec) Encode(context.Context, io.Writer, *snapshot.Snapshot, formats.EncodeOptions) error {
	return errDirectory
}

// IsCodec reports whether c is this package's Codec.
func IsCodec(c formats.Codec) bool {
	_, ok := c.(Codec)
	return ok
}
