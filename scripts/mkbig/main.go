// Command mkbig writes a synthetic safetensors checkpoint of about the
// given size for benchmarks (`scripts/bench.sh`): a few large f32 matrices
// and small biases filled from a seeded PRNG, streamed to disk (the data
// never sits in memory). With -change P it writes the same checkpoint with
// about P percent of rows altered (a "next generation").
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/snapshot"
)

// prng is a Source of deterministic pseudo-random bytes; rows listed in
// changed get different bytes.
type prng struct {
	seed    uint64
	size    int64
	rowSize int64
	changed func(row int64) bool
}

func (p prng) Size() int64 { return p.size }

func (p prng) ReadAt(b []byte, off int64) (int, error) {
	var v uint64
	word := int64(-1)
	for i := range b {
		pos := off + int64(i)
		if pos/8 != word {
			word = pos / 8
			// SplitMix64 of (seed, word): fast, deterministic.
			z := p.seed*0x9e3779b97f4a7c15 + uint64(word)*0xbf58476d1ce4e5b9 + 1
			z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
			z = (z ^ (z >> 27)) * 0x94d049bb133111eb
			v = z ^ (z >> 31)
			if p.changed != nil && p.changed(pos/p.rowSize) {
				v = ^v
			}
		}
		b[i] = byte(v >> (8 * (pos % 8)))
	}
	return len(b), nil
}

func main() {
	size := flag.Int64("size", 256<<20, "approximate raw bytes")
	change := flag.Float64("change", 0, "percent of rows to alter")
	gen := flag.Uint64("gen", 0, "generation (varies which rows change)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: mkbig [-size N] [-change P -gen G] OUT.safetensors")
		os.Exit(2)
	}
	s := &snapshot.Snapshot{}
	const cols = 1024
	per := *size / 4 / (cols * 4)
	for i, name := range []string{"embed", "layer0.w", "layer1.w", "head.w"} {
		rowSize := int64(cols * 4)
		src := prng{seed: uint64(i), size: per * rowSize, rowSize: rowSize}
		if *change > 0 {
			every := int64(100 / *change)
			g := int64(*gen)
			src.changed = func(row int64) bool { return (row+g*7919)%every == 0 }
		}
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: name, DType: snapshot.F32, Shape: []int64{per, cols}, Data: src})
	}
	for i := range 8 {
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: fmt.Sprintf("bias%d", i), DType: snapshot.F32, Shape: []int64{cols},
			Data: prng{seed: uint64(100 + i), size: cols * 4, rowSize: cols * 4}})
	}
	f, err := os.Create(flag.Arg(0))
	if err == nil {
		err = safetensors.New().Encode(context.Background(), f, s, formats.EncodeOptions{})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkbig:", err)
		os.Exit(1)
	}
}
