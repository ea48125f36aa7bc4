package main

import (
	"context"
	"fmt"
	"io"

	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/snapshot/diffsvg"
)

// pictureOptions are `snapd diff`'s picture flags.
type pictureOptions struct {
	svg, html string // output paths ("" = none)
	scale     string // "abs" or "rel"
	width     int
}

// pictureScale checks --scale before anything is read (a usage error).
func (o *pictureOptions) pictureScale() (diffsvg.Scale, error) {
	switch o.scale {
	case "", "abs":
		return diffsvg.ScaleAbs, nil
	case "rel":
		return diffsvg.ScaleRel, nil
	}
	return 0, usageError{fmt.Errorf("--scale %q: want abs or rel", o.scale)}
}

// checkPictureFlags validates the picture flags (usage errors, before any
// input is opened).
func (o *pictureOptions) check() error {
	if _, err := o.pictureScale(); err != nil {
		return err
	}
	if o.width != 0 && (o.width < diffsvg.MinWidth || o.width > diffsvg.MaxWidth) {
		return usageError{fmt.Errorf("--width %d: want %d..%d pixels", o.width, diffsvg.MinWidth, diffsvg.MaxWidth)}
	}
	return nil
}

// writeDiffPictures draws the diff ds of a → b into --svg and --html
// (each written atomically). Only the rows ds names as changed are read
// again.
func writeDiffPictures(ctx context.Context, o *pictureOptions, title string, a, b *snapshot.Snapshot, ds []snapshot.ArrayDiff) error {
	if o.svg == "" && o.html == "" {
		return nil
	}
	scale, err := o.pictureScale()
	if err != nil {
		return err
	}
	changed := make(map[string][]snapshot.RowRange, len(ds))
	for _, d := range ds {
		changed[d.Name] = d.ChangedRows
	}
	cand := func(name string) ([]snapshot.RowRange, bool) {
		rs, ok := changed[name]
		return rs, ok
	}
	p, err := diffsvg.Compute(ctx, a, b, diffsvg.Options{Title: title, Scale: scale, Width: o.width, Candidates: cand})
	if err != nil {
		return err
	}
	if o.svg != "" {
		if err := atomicfile.WriteFrom(o.svg, 0o644, p.WriteSVG); err != nil {
			return ioError{err}
		}
	}
	if o.html != "" {
		if err := atomicfile.WriteFrom(o.html, 0o644, func(w io.Writer) error { return p.WriteHTML(w, ds) }); err != nil {
			return ioError{err}
		}
	}
	return nil
}
