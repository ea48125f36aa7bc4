package sharddir

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/ztensor"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

func registry() *formats.Registry {
	return formats.NewRegistry(wtxt.New(), safetensors.New(), ztensor.New())
}

// f32 returns an F32 array of the given shape filled from seed.
func f32(name string, seed float32, shape ...int64) *snapshot.Array {
	n, _ := snapshot.NumElements(shape)
	b := make([]byte, 4*n)
	for i := int64(0); i < n; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(seed+float32(i)))
	}
	return &snapshot.Array{Name: name, DType: snapshot.F32, Shape: shape, Data: snapshot.Bytes(b)}
}

// writeFile encodes arrays with codec c into dir/name.
func writeFile(t testing.TB, c formats.Codec, dir, name string, attrs map[string]string, arrays ...*snapshot.Array) {
	t.Helper()
	var buf bytes.Buffer
	s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta(), Arrays: arrays, Attrs: attrs}
	if err := c.Encode(context.Background(), &buf, s, formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

const (
	shard1 = "model-00001-of-00002.safetensors"
	shard2 = "model-00002-of-00002.safetensors"
	hfIdx  = "model.safetensors.index.json"
)

// makeHF builds a Hugging Face style sharded directory: two safetensors
// shards with {"format":"pt"} metadata, the index HF writes, config.json,
// README.md and a binary tokenizer file.
func makeHF(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	md := map[string]string{"safetensors.metadata": `{"format":"pt"}`}
	st := safetensors.New()
	writeFile(t, st, dir, shard1, md, f32("model.embed.weight", 1, 4, 3), f32("model.layers.0.w", 2, 3, 3))
	writeFile(t, st, dir, shard2, md, f32("model.layers.1.w", 3, 3, 3), f32("lm_head.weight", 4, 4, 3))
	wm := map[string]string{"model.embed.weight": shard1, "model.layers.0.w": shard1, "model.layers.1.w": shard2, "lm_head.weight": shard2}
	idx, err := MarshalIndex([]byte(`{"total_size":168}`), wm)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(dir, hfIdx), idx, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte("{\n  \"hidden_size\": 3\n}\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("# tiny model\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "tokenizer.model"), []byte{0, 1, 2, 0xff}, 0o644))
	return dir
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func open(t testing.TB, dir string) *Dir {
	t.Helper()
	d, err := Open(context.Background(), dir, registry(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func names(s *snapshot.Snapshot) []string {
	var out []string
	for _, a := range s.Arrays {
		out = append(out, a.Name)
	}
	return out
}

func TestIndexDir(t *testing.T) {
	dir := makeHF(t)
	var logs testutil.SyncBuffer
	d, err := Open(context.Background(), dir, registry(), Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s := d.Snapshot
	want := []string{"lm_head.weight", "model.embed.weight", "model.layers.0.w", "model.layers.1.w"}
	if got := names(s); !reflect.DeepEqual(got, want) {
		t.Fatalf("arrays %v, want %v", got, want)
	}
	if got := s.Array("model.layers.1.w").Attrs[AttrFile]; got != shard2 {
		t.Errorf("model.layers.1.w from %q, want %s", got, shard2)
	}
	b, _ := snapshot.ReadAll(s.Array("lm_head.weight").Data)
	if math.Float32frombits(binary.LittleEndian.Uint32(b[4:])) != 5 {
		t.Errorf("lm_head.weight[1] wrong")
	}
	if d.Layout.Kind != KindIndex || d.Layout.Index != hfIdx || string(d.Layout.Metadata) != `{"total_size":168}` || len(d.Layout.Files) != 2 {
		t.Errorf("layout %+v", d.Layout)
	}
	if s.Attrs[AttrTextPrefix+"config.json"] == "" || s.Attrs[AttrTextPrefix+"README.md"] != "# tiny model\n" {
		t.Errorf("text attrs missing: %v", s.Attrs)
	}
	if _, ok := s.Attrs[AttrTextPrefix+"tokenizer.model"]; ok {
		t.Error("binary tokenizer.model kept")
	}
	if !strings.Contains(logs.String(), "tokenizer.model") {
		t.Errorf("no note about tokenizer.model in the log:\n%s", logs.String())
	}
}

func TestPlainDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, safetensors.New(), dir, "b.safetensors", nil, f32("w", 1, 2), f32("v", 2, 1))
	writeFile(t, ztensor.New(), dir, "a.zt", nil, f32("w", 3, 2))
	must(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("run 7\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, ".hidden"), []byte("x"), 0o644))
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(t, os.Symlink("sub", filepath.Join(dir, "link-to-sub")))
	d := open(t, dir)
	want := []string{"a.zt/w", "b.safetensors/v", "b.safetensors/w"}
	if got := names(d.Snapshot); !reflect.DeepEqual(got, want) {
		t.Fatalf("arrays %v, want %v", got, want)
	}
	for _, a := range d.Snapshot.Arrays {
		if !snapshot.PortableName(a.Name) {
			t.Errorf("%q is not portable", a.Name)
		}
	}
	if d.Layout.Kind != KindPlain || len(d.Layout.Files) != 2 || d.Layout.Files[0].Codec != "ztensor" {
		t.Errorf("layout %+v", d.Layout)
	}
	if d.Snapshot.Attrs[AttrTextPrefix+"notes.txt"] != "run 7\n" {
		t.Errorf("notes.txt not kept")
	}

	// One checkpoint file: its array names are kept as they are.
	one := t.TempDir()
	writeFile(t, safetensors.New(), one, "model.safetensors", nil, f32("w", 1, 2))
	if got := names(open(t, one).Snapshot); !reflect.DeepEqual(got, []string{"w"}) {
		t.Errorf("single-file dir arrays %v", got)
	}

	// A file name that is not a portable array name gets a stable prefix.
	odd := t.TempDir()
	writeFile(t, safetensors.New(), odd, "my model.safetensors", nil, f32("w", 1, 2))
	writeFile(t, safetensors.New(), odd, "x.safetensors", nil, f32("w", 1, 2))
	got := names(open(t, odd).Snapshot)
	if !strings.HasPrefix(got[0], "my_model.safetensors-") || !strings.HasSuffix(got[0], "/w") {
		t.Errorf("odd file name gave %v", got)
	}
}

// readDir returns every file of dir with its bytes.
func readDir(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	must(t, err)
	out := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		must(t, err)
		out[e.Name()] = b
	}
	return out
}

func toWTXT(t testing.TB, s *snapshot.Snapshot) []byte {
	t.Helper()
	s.Meta = snapshot.DefaultMeta()
	s.Meta.TS = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	if _, err := wtxt.Encode(context.Background(), &buf, s, wtxt.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func fromWTXT(t testing.TB, b []byte) *snapshot.Snapshot {
	t.Helper()
	s, err := wtxt.New().Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: "x.wtxt"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRoundTrip: DIR -> WTXT -> DIR -> WTXT is a fixed point, and the
// second directory is the first one byte for byte (minus ignored files).
func TestRoundTrip(t *testing.T) {
	plain := t.TempDir()
	writeFile(t, safetensors.New(), plain, "b.safetensors", map[string]string{"safetensors.metadata": `{"step":"7"}`}, f32("w", 1, 2), f32("v", 2, 1))
	writeFile(t, ztensor.New(), plain, "a.zt", nil, f32("w", 3, 2))
	must(t, os.WriteFile(filepath.Join(plain, "config.json"), []byte(`{"a":1}`), 0o644))
	single := t.TempDir()
	writeFile(t, safetensors.New(), single, "model.safetensors", nil, f32("w", 1, 3, 2))
	for name, dir := range map[string]string{"index": makeHF(t), "plain": plain, "single": single} {
		t.Run(name, func(t *testing.T) {
			w1 := toWTXT(t, open(t, dir).Snapshot)
			out := filepath.Join(t.TempDir(), "out")
			if _, err := Write(context.Background(), out, fromWTXT(t, w1), WriteOptions{Codecs: registry()}); err != nil {
				t.Fatal(err)
			}
			w2 := toWTXT(t, open(t, out).Snapshot)
			if !bytes.Equal(w1, w2) {
				t.Fatalf("WTXT differs after DIR -> WTXT -> DIR -> WTXT")
			}
			a, b := readDir(t, dir), readDir(t, out)
			delete(a, "tokenizer.model") // ignored (binary)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("directory differs: %v vs %v", keys(a), keys(b))
				for k := range a {
					if !bytes.Equal(a[k], b[k]) {
						t.Errorf("%s differs:\n%s\n%s", k, a[k], b[k])
					}
				}
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	out := slices.Sorted(maps.Keys(m))
	sort.Strings(out)
	return out
}

// TestReshard: a single-file snapshot written as a directory is sharded
// by size the way HF does, with an index HF's loader reads.
func TestReshard(t *testing.T) {
	s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta(),
		Attrs:  map[string]string{"safetensors.metadata": `{"format":"pt"}`},
		Arrays: []*snapshot.Array{f32("a", 0, 10), f32("b", 0, 10), f32("big", 0, 40), f32("c", 0, 10), f32("d", 0, 5)}}
	out := filepath.Join(t.TempDir(), "out")
	p, err := Write(context.Background(), out, s, WriteOptions{Codecs: registry(), ShardSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	// big (160 bytes > 100) gets the first shard of its own; a+b = 80;
	// c would make 120, so c+d start the third.
	want := []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors", hfIdx}
	if !reflect.DeepEqual(p.Files(), want) {
		t.Fatalf("files %v, want %v", p.Files(), want)
	}
	idx, _ := os.ReadFile(filepath.Join(out, hfIdx))
	wantIdx := `{
  "metadata": {
    "total_size": 300
  },
  "weight_map": {
    "a": "model-00002-of-00003.safetensors",
    "b": "model-00002-of-00003.safetensors",
    "big": "model-00001-of-00003.safetensors",
    "c": "model-00003-of-00003.safetensors",
    "d": "model-00003-of-00003.safetensors"
  }
}
`
	if string(idx) != wantIdx {
		t.Errorf("index:\n%s\nwant:\n%s", idx, wantIdx)
	}
	d := open(t, out)
	if got := names(d.Snapshot); !reflect.DeepEqual(got, []string{"a", "b", "big", "c", "d"}) {
		t.Errorf("read back %v", got)
	}
	if d.Layout.Files[0].Attrs["safetensors.metadata"] != `{"format":"pt"}` {
		t.Errorf("shard metadata %v", d.Layout.Files[0].Attrs)
	}
}

// TestWriteOtherFormat: a recorded layout written in another format gets
// that format's names; attributes of the old format need Lossy.
func TestWriteOtherFormat(t *testing.T) {
	src := open(t, makeHF(t)).Snapshot
	out := filepath.Join(t.TempDir(), "zt")
	_, err := Write(context.Background(), out, src, WriteOptions{Codecs: registry(), Codec: ztensor.New()})
	if !errors.Is(err, formats.ErrLossy) {
		t.Fatalf("want ErrLossy for safetensors metadata, got %v", err)
	}
	p, err := Write(context.Background(), out, src, WriteOptions{Codecs: registry(), Codec: ztensor.New(), Encode: formats.EncodeOptions{Lossy: true}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"model-00001-of-00002.zt", "model-00002-of-00002.zt", "model.zt.index.json", "README.md", "config.json"}
	if !reflect.DeepEqual(p.Files(), want) {
		t.Fatalf("files %v, want %v", p.Files(), want)
	}
	back := open(t, out)
	if !reflect.DeepEqual(names(back.Snapshot), names(src)) || back.Layout.Files[0].Codec != "ztensor" {
		t.Fatalf("read back %v %+v", names(back.Snapshot), back.Layout)
	}
	for _, a := range src.Arrays {
		x, _ := snapshot.ReadAll(a.Data)
		y, _ := snapshot.ReadAll(back.Snapshot.Array(a.Name).Data)
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs", a.Name)
		}
	}
}
