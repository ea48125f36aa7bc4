package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

func TestAutoSegmentSize(t *testing.T) {
	for _, c := range []struct{ wtxt, want int64 }{
		{0, 4 << 20}, {1 << 30, 4 << 20}, {40 << 30, 4 << 20}, {48 << 30, 8 << 20},
		{190e9, 32 << 20}, // 70B bf16: 140 GB raw, ~190 GB WTXT
		{1 << 62, wtxt.DefaultMaxSegment},
	} {
		if got := AutoSegmentSize(c.wtxt); got != c.want {
			t.Errorf("AutoSegmentSize(%d) = %d, want %d", c.wtxt, got, c.want)
		}
	}
}

// TestScaleOnPaper measures the per-item sizes of the layout (skeleton
// bytes per chunk and per segment, manifest and config bytes per layer)
// and extrapolates them to a 70B bf16 checkpoint; it asserts that the
// automatic segment size keeps its manifest under the 4 MiB registries
// accept while the 4 MiB default would not.
func TestScaleOnPaper(t *testing.T) {
	// Skeleton bytes per chunk: two models differing only in chunk count.
	skelOf := func(rows int64) int {
		w := make([]byte, rows*8192*2) // bf16 rows of 8192: 16 KiB, 4 rows per 64 KiB chunk
		for i := 0; i+8 <= len(w); i += 8 {
			binary.LittleEndian.PutUint64(w[i:], uint64(i)*0x9e3779b97f4a7c15)
		}
		m := snapshot.DefaultMeta()
		m.Gen, m.TS, m.Build = 1, time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC), "scale"
		s := &snapshot.Snapshot{Meta: m, Arrays: []*snapshot.Array{{Name: "model.layers.0.mlp.down_proj.weight", DType: snapshot.BF16, Shape: []int64{rows, 8192}, Data: snapshot.Bytes(w)}}}
		var b, skel bytes.Buffer
		if _, err := wtxt.Encode(context.Background(), &b, s, wtxt.EncodeOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := wtxt.Split(context.Background(), &b, &skel, nil, wtxt.SplitOptions{}); err != nil {
			t.Fatal(err)
		}
		return skel.Len()
	}
	s1, s2 := skelOf(4*64), skelOf(4*128) // 64 and 128 chunks; 1 and 2 segments
	perChunk := float64(s2-s1) / 64       // includes one seg line per 64 chunks
	// Manifest and config bytes per layer.
	gen := func(n int) Generation {
		g := Generation{Gen: "000001", TS: "2026-11-24T00:00:00Z", MerkleThis: fmt.Sprintf("%064x", 1), SHA256All: fmt.Sprintf("%064x", 2), KeyID: "0123456789abcdef", SegmentSize: 4 << 20}
		for i := range n {
			g.Segments = append(g.Segments, wtxt.Segment{Digest: sha256.Sum256([]byte{byte(i), byte(i >> 8), byte(i >> 16)}), Size: 4 << 20,
				Array: "model.layers.0.mlp.down_proj.weight", FirstChunk: int64(i) * 64, Chunks: 64})
		}
		return g
	}
	size := func(n int) (int, int) {
		cfg, err := BuildConfig(gen(n))
		if err != nil {
			t.Fatal(err)
		}
		man, err := BuildManifest(gen(n), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return len(man), len(cfg)
	}
	m1, c1 := size(1000)
	m2, c2 := size(2000)
	perLayer, perCfg := float64(m2-m1)/1000, float64(c2-c1)/1000
	t.Logf("per chunk: %.1f B of skeleton; per layer: %.1f B of manifest, %.1f B of config", perChunk, perLayer, perCfg)

	const raw70B = 140e9 // 70e9 bf16 parameters
	wtxt70B := int64(raw70B) / 57 * 78
	for _, chunk := range []float64{64 << 10, 256 << 10, 1 << 20} {
		n := raw70B / chunk
		t.Logf("70B, %4.0f KiB chunks: %9.0f chunks, skeleton %6.0f MB", chunk/1024, n, n*perChunk/1e6)
	}
	for _, seg := range []int64{4 << 20, 16 << 20, AutoSegmentSize(wtxt70B)} {
		n := raw70B / float64(seg)
		t.Logf("70B, %2d MiB segments: %6.0f segments, manifest %5.2f MB, config %5.2f MB", seg>>20, n, n*perLayer/1e6, n*perCfg/1e6)
	}
	if n := raw70B / float64(4<<20); n*perLayer < maxManifestBytes {
		t.Fatalf("at 4 MiB segments the 70B manifest (%.0f B) would fit %d B: the scale argument is wrong", n*perLayer, maxManifestBytes)
	}
	if n := raw70B / float64(AutoSegmentSize(wtxt70B)); n*perLayer > maxManifestBytes/2 {
		t.Fatalf("auto segment size leaves a %.0f B manifest", n*perLayer)
	}
}
