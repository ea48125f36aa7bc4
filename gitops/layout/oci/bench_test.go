package oci

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestBenchPushClustered measures (SNAPD_BENCH_OCI=MiB, e.g. 256) pushes of
// generations with 1% of rows changing in one cluster: bytes uploaded vs
// the changed segments' raw bytes, skeleton size vs raw size, wall time.
// Numbers only; nothing timed is asserted.
func TestBenchPushClustered(t *testing.T) {
	mib, _ := strconv.Atoi(os.Getenv("SNAPD_BENCH_OCI"))
	if mib <= 0 {
		t.Skip("set SNAPD_BENCH_OCI=MiB to run")
	}
	reg := registrytest.Start(t, "", "")
	repo, err := Open(reg.Host+"/snapd/bench", Options{})
	if err != nil {
		t.Fatal(err)
	}
	const rowSize = 4096 // 1024 f32 columns
	rows := int64(mib) << 20 / rowSize
	data := make([]byte, rows*rowSize)
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i+8 <= len(data); i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			data[i+k] = byte(v >> (8 * k))
		}
	}
	var prev []wtxt.Segment
	for gen := uint64(1); gen <= 4; gen++ {
		if gen > 1 {
			lo := (int64(gen) * 7919 % (rows - rows/100)) * rowSize
			for i := lo; i < lo+rows/100*rowSize; i++ {
				data[i] ^= byte(gen)
			}
		}
		m := snapshot.DefaultMeta()
		m.Gen, m.TS, m.Build = gen, time.Date(2026, 11, 24, 6, 0, int(gen), 0, time.UTC), "bench"
		s := &snapshot.Snapshot{Meta: m, Arrays: []*snapshot.Array{{Name: "W", DType: snapshot.F32, Shape: []int64{rows, 1024}, Data: snapshot.Bytes(data)}}}
		var w bytes.Buffer
		if _, err := wtxt.Encode(context.Background(), &w, s, wtxt.EncodeOptions{}); err != nil {
			t.Fatal(err)
		}
		var skel bytes.Buffer
		start := time.Now()
		res, err := repo.PushWTXT(context.Background(), bytes.NewReader(w.Bytes()), "bench.wtxt", &skel, 0)
		if err != nil {
			t.Fatal(err)
		}
		el := time.Since(start)
		var changed int64
		for i, sg := range res.Generation.Segments {
			if prev == nil || sg.Digest != prev[i].Digest {
				changed += sg.Size
			}
		}
		prev = res.Generation.Segments
		t.Logf("gen %d: raw %d MiB, WTXT %d B, skeleton %d B (%.3f%% of raw), segments %d, uploaded %d B (%.2fx the changed segments' %d B), push %.2fs",
			gen, mib, w.Len(), skel.Len(), 100*float64(skel.Len())/float64(len(data)), res.Segments, res.UploadedBytes, float64(res.UploadedBytes)/float64(changed), changed, el.Seconds())
	}
}
