package main

import (
	"bytes"
	"context"
	"os"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
)

// openPrevWTXT opens --prev for incremental encoding (wtxt.EncodeOptions.Prev)
// when it is a plaintext WTXT file: unchanged chunks' lines are then copied
// from it, each checked to encode the new bytes, and the output is the
// same bytes as without it. A WSUM, an armored file or one that does not
// index is not used for that (a warning says why when it looked like a
// WTXT); the caller closes the returned file.
func openPrevWTXT(ctx context.Context, e *env, path string) (*os.File, *wtxt.PrevWTXT) {
	head, err := readHead(path, 16)
	if err != nil || !bytes.HasPrefix(head, []byte("WTXT 1\n")) || armor.IsArmored(head) {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, nil
	}
	x, err := wtxt.ReadIndex(ctx, path, f, st.Size())
	if err != nil {
		e.logger.Warn("--prev is not used to copy unchanged chunks (every chunk is encoded)", "error", err)
		f.Close()
		return nil, nil
	}
	return f, &wtxt.PrevWTXT{R: f, Index: x}
}
