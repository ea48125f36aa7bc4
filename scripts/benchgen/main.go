// Command benchgen writes generation G of a synthetic safetensors model
// whose rows change cumulatively from generation to generation, for
// scripts/bench-git.sh: four f32 matrices of 1024 columns (plus small
// biases) of about -size raw bytes. In generation g >= 2 about -change
// percent of each matrix's rows get new values:
//
//	-pattern clustered  one contiguous run of rows per matrix, at a
//	                    position that moves with g
//	-pattern uniform    each row independently with probability change%
//
// A row's bytes depend only on (matrix, row, the last generation that
// changed it), so generation G is the same file however it is produced,
// and the changed bytes between G-1 and G are exactly the changed rows.
// With -report it prints the raw bytes of the rows changed from G-1 to G.
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

const cols = 1024

func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

type model struct {
	rows    int64
	gen     uint64
	change  float64
	pattern string
}

// changedIn reports whether row of matrix m changes in generation g.
func (md *model) changedIn(m int, row int64, g uint64) bool {
	if g < 2 {
		return false
	}
	switch md.pattern {
	case "clustered":
		k := int64(float64(md.rows) * md.change / 100)
		if k < 1 {
			k = 1
		}
		start := int64(mix(uint64(m)<<32^g) % uint64(md.rows))
		d := row - start
		if d < 0 {
			d += md.rows
		}
		return d < k
	default:
		return float64(mix(uint64(m)<<40^uint64(row)<<8^g)%1_000_000) < md.change*10_000
	}
}

// last returns the last generation <= g that changed the row (0: never).
func (md *model) last(m int, row int64, g uint64) uint64 {
	for x := g; x >= 2; x-- {
		if md.changedIn(m, row, x) {
			return x
		}
	}
	return 0
}

type matrix struct {
	md   *model
	m    int
	size int64
}

func (a matrix) Size() int64 { return a.size }

func (a matrix) ReadAt(b []byte, off int64) (int, error) {
	const rowBytes = cols * 4
	var v uint64
	word, row, seed := int64(-1), int64(-1), uint64(0)
	for i := range b {
		pos := off + int64(i)
		if r := pos / rowBytes; r != row {
			row = r
			var lg uint64
			if a.m < 100 {
				lg = a.md.last(a.m, row, a.md.gen)
			}
			seed = mix(uint64(a.m+1)<<48 ^ uint64(row)<<8 ^ lg)
		}
		if w := pos / 4; w != word {
			word = w
			// Small f32 values (|x| < 1), like trained weights.
			x := mix(seed ^ uint64(word)*0x9e3779b97f4a7c15)
			v = uint64(0x3c000000 | uint32(x)&0x037fffff | uint32(x>>32)&0x80000000)
		}
		b[i] = byte(v >> (8 * (pos % 4)))
	}
	return len(b), nil
}

func main() {
	size := flag.Int64("size", 50<<20, "approximate raw bytes")
	change := flag.Float64("change", 1, "percent of rows changed per generation")
	pattern := flag.String("pattern", "clustered", "clustered or uniform")
	gen := flag.Uint64("gen", 1, "generation (>= 1)")
	report := flag.Bool("report", false, "print the raw bytes of the rows changed from gen-1 to gen, write nothing")
	flag.Parse()
	if (flag.NArg() != 1 && !*report) || *gen < 1 || (*pattern != "clustered" && *pattern != "uniform") {
		fmt.Fprintln(os.Stderr, "usage: benchgen [-size N] [-change P] [-pattern clustered|uniform] -gen G OUT.safetensors | -report")
		os.Exit(2)
	}
	md := &model{rows: *size / 4 / (cols * 4), gen: *gen, change: *change, pattern: *pattern}
	if *report {
		var n int64
		for m := range 4 {
			for r := int64(0); r < md.rows; r++ {
				if md.changedIn(m, r, *gen) {
					n += cols * 4
				}
			}
		}
		fmt.Println(n)
		return
	}
	s := &snapshot.Snapshot{}
	for i, name := range []string{"embed", "layer0.w", "layer1.w", "head.w"} {
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: name, DType: snapshot.F32, Shape: []int64{md.rows, cols},
			Data: matrix{md: md, m: i, size: md.rows * cols * 4}})
	}
	for i := range 4 {
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: fmt.Sprintf("bias%d", i), DType: snapshot.F32, Shape: []int64{cols},
			Data: matrix{md: md, m: 100 + i, size: cols * 4}})
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
		fmt.Fprintln(os.Stderr, "benchgen:", err)
		os.Exit(1)
	}
}
