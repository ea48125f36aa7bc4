package pipeline

import (
	"context"
	"os"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/pipeline/ring"
)

// prevForEncode opens the chain head's WTXT in the ring (base, the
// generation this one chains to) for incremental encoding
// (wtxt.EncodeOptions.Prev): an unchanged chunk's lines are copied from
// it after checking that they encode the new bytes, so the output is the
// same bytes as a full encode. Only a plaintext ring is used (an armored
// one would have to be decrypted first, which costs more than it saves).
// It returns nil when there is nothing to use; release closes the file.
func (d *Daemon) prevForEncode(ctx context.Context, g *ring.Gen, base uint64) (prev *wtxt.PrevWTXT, release func()) {
	if base == 0 || g.Encrypted() {
		return nil, func() {}
	}
	f, err := os.Open(g.BasePath(base))
	if err != nil {
		return nil, func() {} // the delta reports a missing base
	}
	st, err := f.Stat()
	if err == nil && st.Mode().IsRegular() {
		var x *wtxt.Index
		if x, err = wtxt.ReadIndex(ctx, f.Name(), f, st.Size()); err == nil {
			return &wtxt.PrevWTXT{R: f, Index: x}, func() { f.Close() }
		}
	}
	d.log.Warn("previous generation not used for incremental encoding (every chunk is encoded)", "base_gen", base, "error", err)
	f.Close()
	return nil, func() {}
}
