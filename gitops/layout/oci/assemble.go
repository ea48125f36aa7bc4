package oci

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/atomicfile"
)

// AssembleFile rebuilds the WTXT of the skeleton at skelPath from src into
// outPath, atomically: on any error (a missing, short, long or wrong blob,
// a skeleton whose seg lines disagree with its ch lines) nothing is left
// at outPath and the error is a *wtxt.Error naming the skeleton line,
// array, chunk and check.
func AssembleFile(ctx context.Context, skelPath string, src wtxt.BlobSource, outPath string) (*wtxt.AssembleInfo, error) {
	return AssembleFileCounting(ctx, skelPath, src, outPath, nil)
}

// AssembleFileCounting is AssembleFile calling count (when not nil) with
// the length of every write to outPath as it happens, for a progress
// line: the counts add up to AssembleInfo.Written on success. count is
// called from the assembling goroutine and must not block.
func AssembleFileCounting(ctx context.Context, skelPath string, src wtxt.BlobSource, outPath string, count func(n int64)) (*wtxt.AssembleInfo, error) {
	f, err := os.OpenFile(skelPath, os.O_RDONLY|nonBlock, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", skelPath)
	}
	out, err := atomicfile.Create(outPath, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Abort()
	var w io.Writer = out
	if count != nil {
		w = countingWriter{w: out, count: count}
	}
	info, err := wtxt.AssembleNamed(ctx, f, filepath.Base(skelPath), src, w)
	if err != nil {
		return nil, err
	}
	if err := out.Commit(); err != nil {
		return nil, err
	}
	return info, nil
}

// countingWriter passes writes on to w and reports their lengths.
type countingWriter struct {
	w     io.Writer
	count func(int64)
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if n > 0 {
		c.count(int64(n))
	}
	return n, err
}
