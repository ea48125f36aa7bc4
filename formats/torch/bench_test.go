package torch_test

import (
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/torch"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// benchModel is a state_dict-like snapshot of about size bytes: four
// large f32 matrices and sixteen small vectors of random values.
func benchModel(size int64) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta()}
	r := rand.New(rand.NewPCG(1, 2))
	add := func(name string, shape ...int64) {
		n := int64(4)
		for _, d := range shape {
			n *= d
		}
		b := make([]byte, n)
		for i := int64(0); i+8 <= n; i += 8 {
			binary.LittleEndian.PutUint64(b[i:], r.Uint64())
		}
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: name, DType: snapshot.F32, Shape: shape, Data: snapshot.Bytes(b)})
	}
	for _, name := range []string{"embed.weight", "layer0.weight", "layer1.weight", "head.weight"} {
		add(name, size/4/4096, 1024)
	}
	for i := range 16 {
		add("layer.bias"+string(rune('a'+i)), 1024)
	}
	return s
}

func writeFile(b *testing.B, c formats.Codec, s *snapshot.Snapshot, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Encode(context.Background(), f, s, formats.EncodeOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkConvert256MiB: `snapd convert` of a 256 MiB state_dict to a
// signed, HMAC'd WTXT file, from a .pt written by this package's encoder
// and from a safetensors file holding the same tensors. MB/s are of raw
// tensor bytes; the target is torch >= 90% of safetensors.
func BenchmarkConvert256MiB(b *testing.B) {
	dir := b.TempDir()
	s := benchModel(256 << 20)
	var raw int64
	for _, a := range s.Arrays {
		raw += a.Data.Size()
	}
	inputs := []struct {
		name string
		c    formats.Codec
	}{{"torch", torch.New()}, {"safetensors", safetensors.New()}}
	for _, in := range inputs {
		writeFile(b, in.c, s, filepath.Join(dir, "in."+in.name))
	}
	key := ed25519.NewKeyFromSeed(make([]byte, 32))
	opts := wtxt.EncodeOptions{SignKey: key, HMACKey: []byte("0123456789abcdef0123456789abcdef")}
	for _, in := range inputs {
		b.Run(in.name, func(b *testing.B) {
			out := filepath.Join(dir, "out.wtxt")
			b.SetBytes(raw)
			for range b.N {
				m, err := snapshot.MapFile(filepath.Join(dir, "in."+in.name))
				if err != nil {
					b.Fatal(err)
				}
				snap, err := in.c.Decode(context.Background(), m, m.Size(), formats.DecodeOptions{})
				if err != nil {
					b.Fatal(err)
				}
				snap.Meta = snapshot.DefaultMeta()
				snap.Meta.TS = time.Unix(1767225600, 0).UTC()
				os.Remove(out)
				f, err := os.Create(out)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := wtxt.Encode(context.Background(), f, snap, opts); err != nil {
					b.Fatal(err)
				}
				f.Close()
				m.Close()
			}
		})
	}
}

// BenchmarkWrite256MiB: writing a 256 MiB state_dict as .pt.
func BenchmarkWrite256MiB(b *testing.B) {
	s := benchModel(256 << 20)
	path := filepath.Join(b.TempDir(), "out.pt")
	b.SetBytes(256 << 20)
	for range b.N {
		os.Remove(path)
		writeFile(b, torch.New(), s, path)
	}
}
