// Command densebench writes generation G of a synthetic safetensors
// checkpoint in which every element changes from one generation to the
// next, as weights and optimizer moments do under Adam, for
// scripts/dense-bench.sh: a weight matrix and its two Adam moments
// (exp_avg, exp_avg_sq) for each of two layers of 1024 f32 columns, about
// -size raw bytes in all.
//
// Element i of an array at generation g is a function of (array, i, g)
// only: a fixed value plus a drift proportional to g plus a small
// per-generation noise, so every element moves by a small relative amount
// each generation (never by a bit-identical value) and generation G is
// the same file however it is produced. The file is written through a
// temporary name and renamed, and never held in memory whole.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/snapshot"
)

const cols = 1024

func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// unit maps z to [-1, 1).
func unit(z uint64) float64 { return float64(z>>11)/float64(1<<52) - 1 }

// array is one f32 array of the checkpoint at generation gen; kind 0 is a
// weight, 1 a first moment, 2 a second moment (positive).
type array struct {
	seed uint64
	kind int
	gen  uint64
	size int64
}

func (a array) Size() int64 { return a.size }

func (a array) value(i int64) float32 {
	z := mix(a.seed ^ uint64(i)*0x9e3779b97f4a7c15)
	base, dir := unit(z), unit(mix(z))
	// |step| >= 0.5 and the noise moves by at most 0.2 from one
	// generation to the next: each generation moves the element by at
	// least 0.3 of its scale, never to the same value.
	step := math.Copysign(0.5+0.5*math.Abs(dir), dir)
	noise := 0.1 * unit(mix(z^a.gen*0xd1b54a32d192ed03))
	g := float64(a.gen)
	switch a.kind {
	case 1:
		return float32(1e-3*base + 1e-4*(g*step+noise))
	case 2:
		return float32(1e-6*(1+base*base) + 1e-8*(g*(1.5+step)+1+noise))
	}
	return float32(0.05*base - 1e-3*(g*step+noise))
}

func (a array) ReadAt(b []byte, off int64) (int, error) {
	if off >= a.size {
		return 0, nil
	}
	n := min(int64(len(b)), a.size-off)
	var word [4]byte
	for k := int64(0); k < n; {
		i := (off + k) / 4
		u := math.Float32bits(a.value(i))
		word = [4]byte{byte(u), byte(u >> 8), byte(u >> 16), byte(u >> 24)}
		c := copy(b[k:n], word[(off+k)%4:])
		k += int64(c)
	}
	return int(n), nil
}

func main() {
	size := flag.Int64("size", 40<<20, "approximate raw bytes")
	gen := flag.Uint64("gen", 1, "generation (>= 1)")
	flag.Parse()
	if flag.NArg() != 1 || *gen < 1 || *size < 6*cols*4 {
		fmt.Fprintln(os.Stderr, "usage: densebench [-size N] -gen G OUT.safetensors")
		os.Exit(2)
	}
	rows := *size / 6 / (cols * 4)
	s := &snapshot.Snapshot{}
	for l := range 2 {
		for k, name := range []string{"model.layer%d.weight", "optimizer.state.%d.exp_avg", "optimizer.state.%d.exp_avg_sq"} {
			s.Arrays = append(s.Arrays, &snapshot.Array{Name: fmt.Sprintf(name, l), DType: snapshot.F32, Shape: []int64{rows, cols},
				Data: array{seed: uint64(l*3+k+1) << 56, kind: k, gen: *gen, size: rows * cols * 4}})
		}
	}
	tmp := flag.Arg(0) + ".tmp"
	f, err := os.Create(tmp)
	if err == nil {
		err = safetensors.New().Encode(context.Background(), f, s, formats.EncodeOptions{})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, flag.Arg(0))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "densebench:", err)
		os.Exit(1)
	}
}
