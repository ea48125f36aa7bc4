package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/sharddir"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

func f32Array(name string, seed float32, n int) *snapshot.Array {
	b := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(seed+float32(i)))
	}
	return &snapshot.Array{Name: name, DType: snapshot.F32, Shape: []int64{int64(n)}, Data: snapshot.Bytes(b)}
}

// makeShardedDir writes a Hugging Face style sharded safetensors
// checkpoint: two shards, model.safetensors.index.json, config.json.
func makeShardedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	st := safetensors.New()
	put := func(name string, arrays ...*snapshot.Array) {
		var buf bytes.Buffer
		s := &snapshot.Snapshot{Arrays: arrays, Attrs: map[string]string{"safetensors.metadata": `{"format":"pt"}`}}
		if err := st.Encode(context.Background(), &buf, s, formats.EncodeOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put("model-00001-of-00002.safetensors", f32Array("model.embed.weight", 1, 64), f32Array("model.layers.0.w", 2, 32))
	put("model-00002-of-00002.safetensors", f32Array("lm_head.weight", 3, 64))
	idx, err := sharddir.MarshalIndex([]byte(`{"total_size":640}`), map[string]string{
		"model.embed.weight": "model-00001-of-00002.safetensors", "model.layers.0.w": "model-00001-of-00002.safetensors",
		"lm_head.weight": "model-00002-of-00002.safetensors"})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"tiny"}`+"\n"), 0o644)
	return dir
}

func dirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		out[e.Name()] = b
	}
	return out
}

// TestConvertShardedDir: snapd convert DIR -> WTXT (signed, verified) ->
// DIR reproduces the directory byte for byte, and DIR -> WTXT -> DIR ->
// WTXT is a fixed point; --shard-size reshards.
func TestConvertShardedDir(t *testing.T) {
	k := vectorKeys(t)
	in := makeShardedDir(t)
	d := t.TempDir()
	w1, w2 := filepath.Join(d, "g1.wtxt"), filepath.Join(d, "g2.wtxt")
	flags := []string{"--ts", "2026-01-01T00:00:00Z", "--sign-key", filepath.Join(k, "sign_ed25519"), "--hmac-key", filepath.Join(k, "hmac.key")}
	mustRun(t, append([]string{"convert", in, w1}, flags...)...)
	mustRun(t, "verify", w1, "--pubkey", filepath.Join(k, "sign_ed25519.pub"), "--hmac-key", filepath.Join(k, "hmac.key"), "--require-signature")
	out := filepath.Join(d, "back")
	mustRun(t, "convert", w1, out+"/")
	if a, b := dirFiles(t, in), dirFiles(t, out); !reflect.DeepEqual(a, b) {
		t.Fatalf("directory after the round trip differs")
	}
	mustRun(t, append([]string{"convert", out, w2}, flags...)...)
	x, _ := os.ReadFile(w1)
	y, _ := os.ReadFile(w2)
	if !bytes.Equal(x, y) {
		t.Fatal("DIR -> WTXT -> DIR -> WTXT is not a fixed point")
	}
	if js := mustRun(t, "inspect", in, "--json"); !strings.Contains(js, `"sharddir"`) || !strings.Contains(js, "lm_head.weight") {
		t.Errorf("inspect of a directory: %s", js)
	}

	// Reshard: 256 B per tensor of 64 floats, 128 B for the 32: shards of
	// at most 300 B hold one tensor each except where two fit.
	re := filepath.Join(d, "resharded")
	mustRun(t, "convert", w1, re, "--shard-size", "300B")
	got := dirFiles(t, re)
	for _, n := range []string{"model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors", "model.safetensors.index.json", "config.json"} {
		if _, ok := got[n]; !ok {
			t.Errorf("resharded dir lacks %s (has %v)", n, keysOf(got))
		}
	}
	if !strings.Contains(string(got["model.safetensors.index.json"]), `"total_size": 640`) {
		t.Errorf("index:\n%s", got["model.safetensors.index.json"])
	}
	reg := newRegistry()
	a, err := openSnapshot(context.Background(), reg, in, "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := openSnapshot(context.Background(), reg, re, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, x := range a.Sorted() {
		y := b.Array(x.Name)
		xb, _ := snapshot.ReadAll(x.Data)
		yb, _ := snapshot.ReadAll(y.Data)
		if y == nil || !bytes.Equal(xb, yb) {
			t.Errorf("array %s lost in resharding", x.Name)
		}
	}
}

func keysOf(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestConvertShardedDirRefusals(t *testing.T) {
	in := makeShardedDir(t)
	idx, _ := sharddir.MarshalIndex(nil, map[string]string{"lm_head.weight": "../model-00002-of-00002.safetensors"})
	os.WriteFile(filepath.Join(in, "model.safetensors.index.json"), idx, 0o644)
	code, _, errs := snapd(t, nil, "convert", in, filepath.Join(t.TempDir(), "x.wtxt"))
	if code != 1 || !strings.Contains(errs, `model.safetensors.index.json`) || !strings.Contains(errs, `tensor "lm_head.weight"`) || !strings.Contains(errs, "path with a directory part refused") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	code, _, errs = snapd(t, nil, "convert", makeShardedDir(t), filepath.Join(t.TempDir(), "o"), "--shard-size", "lots")
	if code != 2 || !strings.Contains(errs, "--shard-size") {
		t.Fatalf("bad --shard-size: exit %d: %s", code, errs)
	}
}

// TestRequestAndGCDirectoryGenerations: request-snapshot takes a sharded
// directory generation; gc reclaims a snapshotted one whole.
func TestRequestAndGCDirectoryGenerations(t *testing.T) {
	state := t.TempDir()
	store, err := snapshot.OpenGenStore(filepath.Join(state, "gens"))
	if err != nil {
		t.Fatal(err)
	}
	src := makeShardedDir(t)
	var paths []string
	for g := uint64(1); g <= 2; g++ {
		gen, err := store.PublishDir(g, "", func(dir string) error {
			for n, b := range dirFiles(t, src) {
				if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, gen.Path)
		code, out, errs := runWALCmds(t, "request-snapshot", "--state-dir", state, "--gen", fmt.Sprint(g), "--source", gen.Path+"/")
		if code != 0 || !strings.Contains(out, "src="+gen.Path) {
			t.Fatalf("request-snapshot: %d %s %s", code, out, errs)
		}
	}
	c, err := wal.OpenConsumer(filepath.Join(state, "wal"), wal.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := wal.NewReader(c.Dir(), c.Cursor(), wal.ReaderOptions{})
	for i := 0; i < 2 && r.Next(); i++ {
		if _, err := c.Complete(r.Record(), wal.Done, ""); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	c.Close()
	code, out, errs := runWALCmds(t, "gc", "--state-dir", state, "--keep", "0")
	if code != 0 {
		t.Fatalf("gc: %d %s %s", code, out, errs)
	}
	if _, err := os.Stat(paths[0]); !os.IsNotExist(err) {
		t.Fatalf("gen 1 directory not reclaimed: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(paths[1], "model.safetensors.index.json")); err != nil {
		t.Fatalf("gen 2 (newest snapshotted) touched: %v", err)
	}
}

// mkTorchShards writes a Hugging Face style sharded PyTorch checkpoint
// with the real torch.save: pytorch_model-0000i-of-00002.bin, the index
// and config.json.
const mkTorchShards = `
import json, os, sys, torch
d = sys.argv[1]
torch.manual_seed(0)
sd = {"model.embed.weight": torch.randn(16, 8), "model.layers.0.w": torch.randn(8, 8),
      "model.layers.1.w": torch.randn(8, 8), "lm_head.weight": torch.randn(16, 8)}
shards = [["lm_head.weight", "model.embed.weight"], ["model.layers.0.w", "model.layers.1.w"]]
wm, total = {}, 0
for i, keys in enumerate(shards):
    name = "pytorch_model-%05d-of-%05d.bin" % (i + 1, len(shards))
    torch.save({k: sd[k] for k in keys}, os.path.join(d, name))
    for k in keys:
        wm[k] = name
        total += sd[k].numel() * sd[k].element_size()
with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
    f.write(json.dumps({"metadata": {"total_size": total}, "weight_map": wm}, indent=2, sort_keys=True) + "\n")
with open(os.path.join(d, "config.json"), "w") as f:
    json.dump({"model_type": "tiny"}, f)
`

// checkTorchShards loads both directories' shards with torch and compares.
const checkTorchShards = `
import json, sys, torch
a, b = sys.argv[1], sys.argv[2]
idx = json.load(open(b + "/pytorch_model.bin.index.json"))
def load(d):
    out = {}
    for f in sorted(set(idx["weight_map"].values())):
        out.update(torch.load(d + "/" + f, weights_only=True))
    return out
x, y = load(a), load(b)
assert set(x) == set(y) == set(idx["weight_map"]), (sorted(x), sorted(y))
assert all(torch.equal(x[k], y[k]) for k in x)
`

// TestTorchShardedDir: a sharded PyTorch checkpoint written by torch.save
// (pytorch_model.bin.index.json + .bin shards) goes DIR -> WTXT -> DIR
// with the torch codec, torch loads the result, and DIR -> WTXT -> DIR ->
// WTXT is a fixed point. It runs once a "torch" codec is registered.
func TestTorchShardedDir(t *testing.T) {
	t.Parallel()
	if _, err := newRegistry().ByName("torch"); err != nil {
		t.Skip("no torch codec registered")
	}
	py := torchPython(t)
	d := t.TempDir()
	in := filepath.Join(d, "hf")
	os.Mkdir(in, 0o755)
	if out, err := exec.Command(py, "-c", mkTorchShards, in).CombinedOutput(); err != nil {
		t.Fatalf("torch.save: %v\n%s", err, out)
	}
	w1, w2, back := filepath.Join(d, "1.wtxt"), filepath.Join(d, "2.wtxt"), filepath.Join(d, "back")
	mustRun(t, "convert", in, w1, "--ts", "2026-01-01T00:00:00Z")
	mustRun(t, "convert", w1, back+"/")
	for _, n := range []string{"pytorch_model.bin.index.json", "config.json"} {
		a, _ := os.ReadFile(filepath.Join(in, n))
		b, _ := os.ReadFile(filepath.Join(back, n))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs after the round trip", n)
		}
	}
	if out, err := exec.Command(py, "-c", checkTorchShards, in, back).CombinedOutput(); err != nil {
		t.Fatalf("torch.load of the written shards: %v\n%s", err, out)
	}
	mustRun(t, "convert", back, w2, "--ts", "2026-01-01T00:00:00Z")
	x, _ := os.ReadFile(w1)
	y, _ := os.ReadFile(w2)
	if !bytes.Equal(x, y) {
		t.Fatal("DIR -> WTXT -> DIR -> WTXT is not a fixed point")
	}
}
