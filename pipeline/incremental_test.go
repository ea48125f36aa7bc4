package pipeline

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/wal"
)

// TestIncrementalEncode: the daemon encodes each later generation with the
// previous ring file as wtxt.EncodeOptions.Prev (unchanged chunks copied),
// and the ring file is byte for byte the full encode of the same snapshot.
func TestIncrementalEncode(t *testing.T) {
	f := newFixture(t)
	f.start(t, nil)
	for g := uint64(1); g <= 3; g++ {
		request(t, f.dir, g, publish(t, f.dir, g))
	}
	for g := uint64(1); g <= 3; g++ {
		if r := f.wait(t, g); r.State != wal.Done {
			t.Fatalf("gen %d: %s %s", g, r.StateName, r.Error)
		}
	}
	f.stop(t)
	verifyChain(t, f.dir, f.keys, []uint64{1, 2, 3})
	re := regexp.MustCompile(`incremental encode gen=(\d+) copied_chunks=(\d+) check_failed=(\d+)`)
	seen := map[string]int{}
	for _, m := range re.FindAllStringSubmatch(f.logs.String(), -1) {
		n, _ := strconv.Atoi(m[2])
		if m[3] != "0" || n == 0 {
			t.Fatalf("gen %s: copied %s chunks, %s failed checks", m[1], m[2], m[3])
		}
		seen[m[1]] = n
	}
	if len(seen) != 2 || seen["2"] == 0 || seen["3"] == 0 {
		t.Fatalf("incremental encodes logged: %v\n%s", seen, f.logs.String())
	}
	// Gen 3 encoded in full from its own decoded content: the same bytes.
	ctx := context.Background()
	got, err := os.ReadFile(ringPath(f.dir+"/"+RingDir, 3, ExtWTXT))
	if err != nil {
		t.Fatal(err)
	}
	s, err := wtxt.New().Decode(ctx, bytes.NewReader(got), int64(len(got)), formats.DecodeOptions{Name: "gen3"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := wtxt.ReadHeader(bytes.NewReader(got))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(f.dir, f.keys)
	var want bytes.Buffer
	if _, err := wtxt.Encode(ctx, &want, s, wtxt.EncodeOptions{RowsPerChunk: cfg.RowsPerChunk, SignKey: cfg.SignKey, HMACKey: cfg.HMACKey, PrevMerkle: h.MerklePrev}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want.Bytes(), got) {
		t.Fatal("the daemon's incremental WTXT differs from a full encode")
	}
}
