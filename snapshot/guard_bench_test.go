package snapshot_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// BenchmarkEncodeGuarded measures what reading a mapped source through
// snapshot.Guarded (as the daemon and snapd convert do, for SIGBUS
// safety) costs the WTXT encoder, against reading the mapping in place
// (zero-copy). The variants run alternately in one process, several
// rounds, and the result is the median CPU time (user+sys) of each, so
// other load on the machine disturbs the ratios far less than wall-clock
// numbers taken in separate runs:
//
//	raw        arrays are sections of the *Mapping (zero-copy)
//	guarded    arrays are sections of Guarded: pread on the mapping's descriptor
//	guarded-mm arrays are sections of Guarded without a descriptor: copies
//	           from the mapping under SetPanicOnFault, releasing the pages
//	           read (what Guarded did before)
//
// GUARD_BENCH_MIB sets the source size (default 64).
func BenchmarkEncodeGuarded(b *testing.B) {
	mib := 64
	if n, err := strconv.Atoi(os.Getenv("GUARD_BENCH_MIB")); err == nil && n > 0 {
		mib = n
	}
	dir := b.TempDir()
	src := filepath.Join(dir, "src.bin")
	data := make([]byte, mib<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(data); i += 8 {
		v := rng.Uint64() & 0x3f7f_ffff_3f7f_ffff // finite f32s
		for k := range 8 {
			data[i+k] = byte(v >> (8 * k))
		}
	}
	if err := os.WriteFile(src, data, 0o644); err != nil {
		b.Fatal(err)
	}
	key := make([]byte, 32)
	out := filepath.Join(dir, "out.wtxt")
	encode := func(r interface {
		ReadAt([]byte, int64) (int, error)
	}) {
		s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta()}
		s.Meta.TS = time.Unix(1_700_000_000, 0).UTC()
		per := int64(len(data) / 4)
		for a := range int64(4) {
			s.Arrays = append(s.Arrays, &snapshot.Array{Name: fmt.Sprintf("layer%d.weight", a), DType: snapshot.F32,
				Shape: []int64{per / 1024, 256}, Data: snapshot.Section(r, a*per, per)})
		}
		f, err := os.Create(out)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if _, err := wtxt.Encode(context.Background(), f, s, wtxt.EncodeOptions{HMACKey: key, Workers: 2}); err != nil {
			b.Fatal(err)
		}
	}
	variants := []string{"raw", "guarded", "guarded-mm"}
	cpu := map[string][]time.Duration{}
	for i := 0; i < b.N; i++ {
		for _, v := range variants {
			m, err := snapshot.MapFile(src)
			if err != nil {
				b.Fatal(err)
			}
			var r interface {
				ReadAt([]byte, int64) (int, error)
			} = m
			switch v {
			case "guarded":
				r = m.Guarded()
			case "guarded-mm":
				r = snapshot.GuardedWithoutDescriptor(m)
			}
			c0 := processCPU(b)
			encode(r)
			cpu[v] = append(cpu[v], processCPU(b)-c0)
			m.Close()
		}
	}
	med := func(v string) float64 {
		xs := slices.Clone(cpu[v])
		slices.Sort(xs)
		return xs[len(xs)/2].Seconds()
	}
	for _, v := range variants {
		b.ReportMetric(med(v), v+"-cpu-s")
	}
	b.ReportMetric(med("guarded")/med("raw"), "guarded/raw")
	b.ReportMetric(med("guarded-mm")/med("raw"), "guarded-mm/raw")
	b.Logf("%d MiB, %d rounds, median CPU s: raw %.3f, guarded (pread) %.3f, guarded-mm (copy+release) %.3f", mib, b.N, med("raw"), med("guarded"), med("guarded-mm"))
}

// processCPU is the CPU time (user + system) the process has used so far.
func processCPU(b testing.TB) time.Duration {
	self, _ := testutil.CPUTime(b)
	return self
}
