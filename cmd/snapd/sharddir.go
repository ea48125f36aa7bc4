package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/dcp"
	"github.com/snapd-ml/snapd/formats/sharddir"
	"github.com/snapd-ml/snapd/snapshot"
)

// dirCodec stands for a directory input in openedSnapshot.Codec (a
// directory is read by formats/sharddir, not by one codec): it names the
// input format "sharddir" and reads or writes nothing itself.
type dirCodec struct{}

var errDirCodec = errors.New("a checkpoint directory is read and written by formats/sharddir, not through a codec")

func (dirCodec) Name() string         { return "sharddir" }
func (dirCodec) Extensions() []string { return nil }
func (dirCodec) Sniff([]byte) bool    { return false }
func (dirCodec) Decode(context.Context, io.ReaderAt, int64, formats.DecodeOptions) (*snapshot.Snapshot, error) {
	return nil, errDirCodec
}
func (dirCodec) Encode(context.Context, io.Writer, *snapshot.Snapshot, formats.EncodeOptions) error {
	return errDirCodec
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// openDir reads a checkpoint directory (HF shard index, or every
// checkpoint file) as one snapshot; notes about ignored files go to log.
func openDir(ctx context.Context, reg *formats.Registry, path, from string, log *slog.Logger) (*openedSnapshot, error) {
	return openDirStrict(ctx, reg, path, from, log, false)
}

// openDirStrict is openDir with formats.DecodeOptions.Strict for every
// file (a DCP directory has no pickles Strict would refuse).
func openDirStrict(ctx context.Context, reg *formats.Registry, path, from string, log *slog.Logger, strict bool) (*openedSnapshot, error) {
	if isDCP, err := dcp.IsDCP(path); err == nil && isDCP {
		if from != "" && from != "dcp" {
			return nil, usageError{fmt.Errorf("--from %s: %s is a DCP checkpoint directory", from, path)}
		}
		return openDCP(ctx, reg, path)
	}
	if from != "" {
		return nil, usageError{fmt.Errorf("--from %s: %s is a directory; its files' formats are detected one by one", from, path)}
	}
	d, err := sharddir.Open(ctx, path, reg, sharddir.Options{Log: log, Strict: strict})
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) && !errors.Is(err, sharddir.ErrUnsafe) {
			return nil, ioError{err}
		}
		if errors.Is(err, sharddir.ErrOutside) {
			return nil, withHint(err, "copy the files into the directory (cp -L); a Hugging Face cache snapshot links to ../../blobs, download with --local-dir instead")
		}
		return nil, err
	}
	return &openedSnapshot{Snapshot: d.Snapshot, Codec: dirCodec{}, closer: d}, nil
}

// openDCP reads a torch.distributed.checkpoint directory (formats/dcp).
func openDCP(ctx context.Context, reg *formats.Registry, path string) (*openedSnapshot, error) {
	tc, err := reg.ByName("torch")
	if err != nil {
		return nil, err
	}
	d, err := dcp.Open(ctx, path, dcp.Options{Torch: tc})
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, ioError{err}
		}
		if errors.Is(err, dcp.ErrIncomplete) {
			return nil, withHint(err, "the checkpoint is incomplete or still being written (torch writes .metadata last): wait for torch.distributed.checkpoint.save to finish")
		}
		return nil, err
	}
	return &openedSnapshot{Snapshot: d.Snapshot, Codec: dcp.New(), closer: d}, nil
}

// wantsDirOutput reports whether convert writes a directory: --to dcp,
// --shard-size given, OUT ending in '/', or OUT an existing directory.
func wantsDirOutput(o *convertOptions) bool {
	return o.to == "dcp" || o.shardSize != "" || strings.HasSuffix(o.out, "/") || isDir(o.out)
}

// convertToDir writes s as a checkpoint directory (formats/sharddir, or
// a DCP directory with --to dcp); lost, when not nil, is told each item
// --lossy drops.
func convertToDir(ctx context.Context, reg *formats.Registry, s *snapshot.Snapshot, o *convertOptions, lost func(formats.Loss)) error {
	if o.w.encryptTo != "" || o.w.stream != "" {
		return usageError{errors.New("--encrypt-to and --stream apply to WTXT output only")}
	}
	if o.to == "dcp" {
		if o.shardSize != "" {
			return usageError{errors.New("--shard-size applies to sharded (index) directories, not --to dcp")}
		}
		tc, err := reg.ByName("torch")
		if err != nil {
			return err
		}
		err = dcp.Write(ctx, strings.TrimSuffix(o.out, "/"), s, dcp.WriteOptions{Torch: tc, Encode: formats.EncodeOptions{Lossy: o.lossy, Lost: lost}})
		var pe *os.PathError
		if errors.As(err, &pe) {
			return ioError{err}
		}
		return err
	}
	wo := sharddir.WriteOptions{Codecs: reg, Encode: formats.EncodeOptions{Lossy: o.lossy, Lost: lost}}
	if o.to != "" {
		c, err := reg.ByName(o.to)
		if err != nil {
			return usageError{err}
		}
		wo.Codec = c
	}
	if o.shardSize != "" {
		n, err := sharddir.ParseSize(o.shardSize)
		if err != nil {
			return usageError{fmt.Errorf("--shard-size: %w", err)}
		}
		wo.ShardSize = n
	}
	if _, err := sharddir.Write(ctx, strings.TrimSuffix(o.out, "/"), s, wo); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return ioError{err}
		}
		return err
	}
	return nil
}
