package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/chunkdiff"
	"github.com/snapd-ml/snapd/pipeline/ring"
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
// 91 elements per array, about 0.03× the encode's CPU; a 39 MB MLP
// checkpoint with AdamW's moments, 32 arrays, about 0.09×; what it costs
// is mostly one pread per two bins on each side).
const (
	pictureSampleMin   = 64 << 10
	pictureSampleShare = 1024
)

// drawPicture writes the SVG of the change from the base generation (the
// chain head, plaintext: base, open, at basePath) to generation gen just
// written into the ring by g (gen-N.diff.svg) and records it in
// it.res.Picture, to be committed beside the WTXT; baseIndex and
// targetIndex are the files' indexes the delta plan read. It runs once
// the WTXT's commit is done: during its fsync, reads of the file being
// written back wait for it. Off with cfg.NoPicture, and for encrypted
// generations (the picture would show in plaintext which rows changed and
// by how much). A failure is logged, never fatal: the generation is fine
// without its picture.
func (d *Daemon) drawPicture(ctx context.Context, it *item, base *os.File, basePath string, g *ring.Gen, baseIndex, targetIndex *wtxt.Index, baseGen, gen uint64, cfg *Config) {
	if cfg.NoPicture || len(cfg.Recipients) > 0 {
		return
	}
	t := d.now()
	it.stageStart("picture")
	p, err := d.computePicture(ctx, base, basePath, g, baseIndex, targetIndex, baseGen, gen)
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

// computePicture is drawPicture's picture: the target read through
// g.PlainFile (or, without one, opened at g.PlainPath).
func (d *Daemon) computePicture(ctx context.Context, base *os.File, basePath string, g *ring.Gen, baseIndex, targetIndex *wtxt.Index, baseGen, gen uint64) (*diffsvg.Picture, error) {
	tf := g.PlainFile()
	if tf == nil {
		f, err := os.Open(g.PlainPath())
		if err != nil {
			return nil, err
		}
		defer f.Close()
		tf = f
	}
	side := func(f *os.File, name string, x *wtxt.Index) (chunkdiff.PictureFile, error) {
		st, err := f.Stat()
		if err != nil {
			return chunkdiff.PictureFile{}, err
		}
		return chunkdiff.PictureFile{Name: name, R: f, Size: st.Size(), Index: x}, nil
	}
	bp, err := side(base, basePath, baseIndex)
	if err != nil {
		return nil, err
	}
	tp, err := side(tf, g.PlainPath(), targetIndex)
	if err != nil {
		return nil, err
	}
	return diffPicture(ctx, bp, tp, baseGen, gen)
}

// diffPicture computes the picture of the change from the plaintext WTXT
// base (generation baseGen) to target (gen): the changed chunks' rows, or
// a sample of them for arrays that changed densely (pictureSampleMin).
func diffPicture(ctx context.Context, base, target chunkdiff.PictureFile, baseGen, gen uint64) (*diffsvg.Picture, error) {
	sample := max(int64(pictureSampleMin), target.Size/pictureSampleShare)
	return chunkdiff.PictureFiles(ctx, base, target, pictureBudget,
		diffsvg.Options{Title: fmt.Sprintf("gen %s → %s", wtxt.FormatGen(baseGen), wtxt.FormatGen(gen)), SampleBytes: sample})
}
