package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/safeopen"
	"github.com/snapd-ml/snapd/snapshot"
)

// sourcePath checks a request's file source (directory sources are read
// by prepareDir). The source is opened without blocking and judged by the
// opened descriptor (safeopen), so a FIFO or device — also one swapped in
// after a check — is refused at once instead of hanging the daemon.
func sourcePath(gen uint64, src string) (string, error) {
	f, err := safeopen.Open(src, safeopen.AllowDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", permanent{fmt.Errorf("%w: gen %d: %s does not exist", ErrSource, gen, src)}
		}
		if errors.Is(err, safeopen.ErrNotRegular) {
			return "", permanent{fmt.Errorf("%w: gen %d: not a regular file or directory: %v", ErrSource, gen, err)}
		}
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if st.Mode().IsRegular() {
		return src, nil
	}
	return "", permanent{fmt.Errorf("%w: gen %d: %s is not a regular file or directory", ErrSource, gen, src)}
}

// prepare pins the request's generation (when its source is in the
// generation store) and decodes the source.
func (d *Daemon) prepare(ctx context.Context, it *item) error {
	it.release()
	gen, src := it.rec.Gen, it.rec.Source
	if err := snapshot.CheckGen(gen); err != nil {
		// Written by a tool that does not bound it (wal.Writer does): a
		// chain must not reach a generation that no later one can follow
		// or that the WTXT parser rejects.
		return permanent{fmt.Errorf("request: %w", err)}
	}
	if done, err := d.prepareRank(it); done || err != nil {
		return err
	}
	// A store entry, or a file inside a directory generation, is pinned.
	if g, ok := d.gens.GenOf(src); ok {
		if g != gen {
			return permanent{fmt.Errorf("%w: request for gen %d names %s, which is generation %d", ErrSource, gen, src, g)}
		}
		pin, err := d.gens.Pin(ctx, gen)
		if errors.Is(err, snapshot.ErrGenNotFound) {
			return permanent{fmt.Errorf("%w: gen %d: %s is not published (or was reclaimed): %v", ErrSource, gen, src, err)}
		}
		if err != nil {
			return err
		}
		it.pin = pin
	}
	if st, err := os.Stat(src); err == nil && st.IsDir() {
		return d.prepareDir(ctx, it)
	}
	path, err := sourcePath(gen, src)
	if err != nil {
		return err
	}
	m, err := snapshot.MapFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, safeopen.ErrNotRegular) {
			return permanent{fmt.Errorf("%w: gen %d: %v", ErrSource, gen, err)}
		}
		return err
	}
	it.m = m
	// The source may change while mapped (a trainer or an attacker
	// truncates it): decoders and encoder workers read it only through
	// the fault-safe view, so a vanished page fails this generation
	// (snapshot.ErrSourceFault) instead of killing the daemon with SIGBUS.
	gm := m.Guarded()
	c, err := d.deps.Registry.Detect(path, gm, gm.Size())
	if err != nil {
		return permanent{fmt.Errorf("%w: gen %d: %s: %v", ErrSource, gen, path, err)}
	}
	s, err := c.Decode(ctx, gm, gm.Size(), formats.DecodeOptions{Name: path, Diagnostic: func(dg formats.Diagnostic) {
		d.log.Info("source diagnostic", "gen", gen, "path", path, "where", dg.Where, "note", dg.Message)
	}})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if strings.HasPrefix(err.Error(), c.Name()+":") { // the codec named itself
			return permanent{fmt.Errorf("%w: gen %d: %s: %w", ErrSource, gen, path, err)}
		}
		return permanent{fmt.Errorf("%w: gen %d: %s: %s: %w", ErrSource, gen, path, c.Name(), err)}
	}
	it.snap = s
	it.res.Format, it.res.SourceBytes = c.Name(), m.Size()
	d.m.bytes.WithLabelValues("source").Add(float64(m.Size()))
	return nil
}
