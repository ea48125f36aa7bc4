package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/chunkdiff"
	"github.com/snapd-ml/snapd/snapshot/diffsvg"
)

// pictureBudget bounds the raw bytes of changed chunks drawPicture
// decodes (on each side); a denser change gets no picture (logged).
const pictureBudget = 256 << 20

// An array with more changed bytes than the larger of pictureSampleMin
// and 1/pictureSampleShare of the generation's WTXT is drawn from a
// sample of that many bytes (diffsvg.Options.SampleBytes): a dense
// update's picture costs a small share of its encode (BenchmarkPictureDense
// against BenchmarkEncodeDense: 40 MiB of f32 in four matrices, 180 bins of
// 91 elements per array, about 0.02× the encode's CPU; a 39 MB MLP
// checkpoint with AdamW's moments, 32 arrays, about 0.08×; what it costs
// is mostly one small pread per bin on each side).
const (
	pictureSampleMin   = 64 << 10
	pictureSampleShare = 1024
)

// pictureWorkersMax bounds the arrays the picture compares at once: each
// holds its own read buffers (up to 2 MiB), and beyond a few the preads
// gain nothing.
const pictureWorkersMax = 4

// drawPicture writes the SVG of the change from the base generation (the
// chain head, plaintext) to the generation just written into the ring
// (gen-N.diff.svg) and records it in it.res.Picture, to be committed
// beside the WTXT. Off with cfg.NoPicture, and for encrypted generations
// (the picture would show in plaintext which rows changed and by how
// much). It runs once the WTXT's commit is done: during that fsync, reads
// of the file being written back wait for it (tried: 105 ms instead of
// 20). A failure is logged, never fatal: the generation is fine
// without its picture.
func (d *Daemon) drawPicture(ctx context.Context, it *item, base, target string, baseIndex, targetIndex *wtxt.Index, baseGen, gen uint64, cfg *Config) {
	if cfg.NoPicture || len(cfg.Recipients) > 0 {
		return
	}
	t := d.now()
	it.stageStart("picture")
	p, err := diffPicture(ctx, base, target, baseIndex, targetIndex, baseGen, gen, cfg.Workers)
	if err == nil {
		path := ringPath(d.ringDir, gen, ExtPicture)
		if err = d.ring.WriteFile(path, 0o644, func(w io.Writer) error { return p.WriteSVG(w) }); err == nil {
			it.res.Picture = path
		}
	}
	switch {
	case errors.Is(err, chunkdiff.ErrPictureBudget):
		d.log.Info("no diff picture: the change is too large to draw", "gen", gen, "error", err)
	case err != nil && ctx.Err() == nil:
		d.log.Warn("could not draw the diff picture", "gen", gen, "error", err)
	}
	it.stage1("picture", d.now().Sub(t))
}

// diffPicture computes the picture of the change from the plaintext WTXT
// base (generation baseGen) to target (gen), with their indexes when the
// delta read them already (nil: read here): the changed chunks' rows, or a
// sample of them for arrays that changed densely (pictureSampleMin).
// It compares 2×workers arrays at a time (workers: the encoder's), at
// most pictureWorkersMax: the encode itself keeps more than its workers
// busy, its hashers run beside them (about 1.5 cores with one worker on 2
// CPUs); the picture of a 39 MB AdamW checkpoint took 16–17 ms that way
// against 21 one array at a time.
func diffPicture(ctx context.Context, base, target string, baseIndex, targetIndex *wtxt.Index, baseGen, gen uint64, workers int) (*diffsvg.Picture, error) {
	sample := int64(pictureSampleMin)
	if st, err := os.Stat(target); err == nil {
		sample = max(sample, st.Size()/pictureSampleShare)
	}
	return chunkdiff.PictureIndexed(ctx, base, baseIndex, target, targetIndex, pictureBudget,
		diffsvg.Options{Title: fmt.Sprintf("gen %s → %s", wtxt.FormatGen(baseGen), wtxt.FormatGen(gen)), SampleBytes: sample, Workers: min(2*workers, pictureWorkersMax)})
}
