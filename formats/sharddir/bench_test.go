package sharddir

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// benchArrays are 8 f32 matrices of 16 MiB (128 MiB).
func benchArrays() []*snapshot.Array {
	var out []*snapshot.Array
	for i := 0; i < 8; i++ {
		out = append(out, f32("layers."+string(rune('0'+i))+".w", float32(i), 4096, 1024))
	}
	return out
}

// BenchmarkEncodeSharded compares DIR (4 shards + index) -> WTXT with the
// same tensors from one safetensors file: the directory layer should cost
// nothing measurable.
//
//	go test -run XXX -bench EncodeSharded -benchtime 3x ./formats/sharddir/
func BenchmarkEncodeSharded(b *testing.B) {
	arrays := benchArrays()
	single := b.TempDir()
	writeFile(b, safetensors.New(), single, "model.safetensors", nil, arrays...)
	sharded := filepath.Join(b.TempDir(), "dir")
	s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta(), Arrays: arrays}
	if _, err := Write(context.Background(), sharded, s, WriteOptions{Codecs: registry(), ShardSize: 40 << 20}); err != nil {
		b.Fatal(err)
	}
	encode := func(b *testing.B, s *snapshot.Snapshot) {
		s.Meta = snapshot.DefaultMeta()
		s.Meta.TS = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		if _, err := wtxt.Encode(context.Background(), io.Discard, s, wtxt.EncodeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("file", func(b *testing.B) {
		b.SetBytes(128 << 20)
		for i := 0; i < b.N; i++ {
			m, err := snapshot.MapFile(filepath.Join(single, "model.safetensors"))
			if err != nil {
				b.Fatal(err)
			}
			s, err := safetensors.New().Decode(context.Background(), m, m.Size(), formats.DecodeOptions{})
			if err != nil {
				b.Fatal(err)
			}
			encode(b, s)
			m.Close()
		}
	})
	b.Run("dir", func(b *testing.B) {
		b.SetBytes(128 << 20)
		for i := 0; i < b.N; i++ {
			d, err := Open(context.Background(), sharded, registry(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			encode(b, d.Snapshot)
			d.Close()
		}
	})
	if ents, _ := os.ReadDir(sharded); len(ents) != 5 {
		b.Fatalf("%d files in the sharded dir", len(ents))
	}
}
