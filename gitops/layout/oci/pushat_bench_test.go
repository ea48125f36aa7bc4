package oci

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestBenchPushAt measures (SNAPD_BENCH_OCI_AT=MiB, e.g. 256; a test
// because the registry helper takes a *testing.T; run with -cpuprofile for
// the profile) `snapd oci push` of generation 2 of an f32 model (four
// matrices of 1024 columns, 1% of each one's rows changed in one cluster)
// to a local docker-registry that holds generation 1, alternately: "split"
// re-reads and decodes the whole WTXT (PushWTXT), "indexed" reuses the
// unchanged segments' digests from generation 1's keys (PushWTXTAt). It
// logs wall and process CPU seconds (which include the test's own
// goroutines, not the registry's); nothing timed is asserted.
func TestBenchPushAt(t *testing.T) {
	mib, _ := strconv.Atoi(os.Getenv("SNAPD_BENCH_OCI_AT"))
	if mib <= 0 {
		t.Skip("set SNAPD_BENCH_OCI_AT=MiB to run")
	}
	b := t
	reg := registrytest.Start(b, "", "")
	repo, err := Open(reg.Host+"/snapd/bench", Options{})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	const rowSize = 4096
	rows := int64(mib) << 20 / 4 / rowSize
	mats := make([][]byte, 4)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range mats {
		mats[i] = make([]byte, rows*rowSize)
		for j := range mats[i] {
			mats[i][j] = byte(r.Uint32())
		}
	}
	write := func(gen uint64) string {
		m := snapshot.DefaultMeta()
		m.Gen, m.TS, m.Build = gen, time.Date(2026, 11, 24, 6, 0, int(gen), 0, time.UTC), "bench"
		s := &snapshot.Snapshot{Meta: m}
		for i, w := range mats {
			s.Arrays = append(s.Arrays, &snapshot.Array{Name: "m" + strconv.Itoa(i), DType: snapshot.F32, Shape: []int64{rows, 1024}, Data: snapshot.Bytes(w)})
		}
		p := filepath.Join(dir, "gen"+strconv.Itoa(int(gen))+".wtxt")
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if _, err := wtxt.Encode(context.Background(), f, s, wtxt.EncodeOptions{}); err != nil {
			b.Fatal(err)
		}
		return p
	}
	p1 := write(1)
	for i, w := range mats {
		k := rows / 100
		lo := (int64(i)*7919 + 11) % (rows - k) * rowSize
		for j := lo; j < lo+k*rowSize; j++ {
			w[j] ^= 0x3c
		}
	}
	p2 := write(2)
	ctx := context.Background()
	f1, _ := os.Open(p1)
	st1, _ := f1.Stat()
	r1, err := repo.PushWTXTAt(ctx, f1, st1.Size(), "gen1", io.Discard, 0, Previous{})
	f1.Close()
	if err != nil {
		b.Fatal(err)
	}
	f2, _ := os.Open(p2)
	defer f2.Close()
	st2, _ := f2.Stat()
	cpu := func() time.Duration {
		self, _ := testutil.CPUTime(t)
		return self
	}
	for round := range 3 {
		for _, mode := range []string{"split", "indexed"} {
			w0, c0 := time.Now(), cpu()
			var res *PushResult
			if mode == "split" {
				res, err = repo.PushWTXT(ctx, io.NewSectionReader(f2, 0, st2.Size()), "gen2", io.Discard, 0)
			} else {
				res, err = repo.PushWTXTAt(ctx, f2, st2.Size(), "gen2", io.Discard, 0, r1.Keys)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("round %d %-7s: wall %.3fs cpu %.3fs; segments %d, reused %d, uploaded %d (%d B)", round, mode,
				time.Since(w0).Seconds(), (cpu() - c0).Seconds(), res.Segments, res.Reused, res.Uploaded, res.UploadedBytes)
		}
	}
}
