package pipeline

import (
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
		b := make([]byte, per)
		for i := 0; i+4 <= len(b); i += 4 {
			v := float32(rng.NormFloat64()*0.02) + float32(step)*1e-3*float32(rng.NormFloat64())
			u := math.Float32bits(v)
			b[i], b[i+1], b[i+2], b[i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		}
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: "layer" + strconv.Itoa(a) + ".weight", DType: snapshot.F32,
			Shape: []int64{int64(per / 4096), 1024}, Data: snapshot.Bytes(b)})
	}
	return s
}
