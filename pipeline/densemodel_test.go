package pipeline

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/snapd-ml/snapd/snapshot"
)

// denseModel is about mib MiB of f32 in 4 arrays of 4 KiB rows whose
// every element moves at every step, as with an Adam-like optimizer.
func denseModel(mib, step int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{}
	per := mib << 20 / 4
	for a := 0; a < 4; a++ {
		rng := rand.New(rand.NewPCG(uint64(a), 7))
		b := f32Bytes(int64(per/4), func() float32 {
			return float32(rng.NormFloat64()*0.02) + float32(step)*1e-3*float32(rng.NormFloat64())
		})
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: "layer" + strconv.Itoa(a) + ".weight", DType: snapshot.F32,
			Shape: []int64{int64(per / 4096), 1024}, Data: snapshot.Bytes(b)})
	}
	return s
}

// adamMLP is a checkpoint like scripts/densebench/trainer.py's (about
// 39 MB): a 4-layer MLP's weights and biases (1024 wide, 128 outputs) with
// AdamW's exp_avg, exp_avg_sq and step per parameter, every element moving
// at every step: many small arrays beside a few large ones.
func adamMLP(step int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{}
	f32 := func(name string, shape []int64, seed uint64, gen func(r *rand.Rand) float32) {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		rng := rand.New(rand.NewPCG(seed, uint64(step)))
		b := f32Bytes(n, func() float32 { return gen(rng) })
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: name, DType: snapshot.F32, Shape: shape, Data: snapshot.Bytes(b)})
	}
	outs := []int64{1024, 1024, 1024, 128}
	for l, out := range outs {
		p := 2 * l
		for k, shape := range [][]int64{{out, 1024}, {out}} {
			param := strconv.Itoa(2*l + k)
			seed := uint64(16*p + 4*k)
			f32("model."+strconv.Itoa(p)+"."+[]string{"weight", "bias"}[k], shape, seed, func(r *rand.Rand) float32 {
				return float32(r.NormFloat64()*0.02) + float32(step)*1e-3*float32(r.NormFloat64())
			})
			f32("optimizer.state."+param+".exp_avg", shape, seed+1, func(r *rand.Rand) float32 { return float32(r.NormFloat64() * 1e-3) })
			f32("optimizer.state."+param+".exp_avg_sq", shape, seed+2, func(r *rand.Rand) float32 { return float32(r.ExpFloat64() * 1e-7) })
			f32("optimizer.state."+param+".step", []int64{}, seed+3, func(*rand.Rand) float32 { return float32(5 * step) })
		}
	}
	return s
}

// f32Bytes returns n little-endian f32 values, next's in order.
func f32Bytes(n int64, next func() float32) []byte {
	b := make([]byte, 4*n)
	for i := int64(0); i < n; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(next()))
	}
	return b
}
