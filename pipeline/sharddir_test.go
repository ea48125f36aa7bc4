//go:build unix

package pipeline

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/sharddir"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// publishSharded publishes step's model as a Hugging Face style sharded
// directory generation: one safetensors shard per array, the index and a
// config.json. indexFor may change the weight_map before it is written.
func publishSharded(t testing.TB, stateDir string, gen uint64, indexFor func(wm map[string]string)) string {
	t.Helper()
	st, err := snapshot.OpenGenStore(filepath.Join(stateDir, GensDir))
	if err != nil {
		t.Fatal(err)
	}
	g, err := st.PublishDir(gen, "", func(dir string) error {
		m := model(int(gen))
		wm := map[string]string{}
		for i, a := range m.Sorted() {
			name := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i%2]
			wm[a.Name] = name
			var buf bytes.Buffer
			s := &snapshot.Snapshot{Arrays: []*snapshot.Array{a}, Attrs: map[string]string{"safetensors.metadata": `{"format":"pt"}`}}
			if err := safetensors.New().Encode(context.Background(), &buf, s, formats.EncodeOptions{}); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
				return err
			}
		}
		if indexFor != nil {
			indexFor(wm)
		}
		b, err := sharddir.MarshalIndex(nil, wm)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), b, 0o644); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"tiny"}`), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return g.Path
}

// TestShardedDirectoryGeneration: generations published as sharded
// directories are pinned, read as one snapshot each, chained with deltas,
// and reclaimed whole by gc; a file inside a directory generation pins
// that generation; a hostile index fails its request only.
func TestShardedDirectoryGeneration(t *testing.T) {
	f := newFixture(t)
	f.start(t, nil)
	request(t, f.dir, 1, publishSharded(t, f.dir, 1, nil))
	request(t, f.dir, 2, publishSharded(t, f.dir, 2, nil)+"/") // trailing slash: same generation
	bad := publishSharded(t, f.dir, 3, func(wm map[string]string) { wm["head.weight"] = "../gen-000001/model-00001-of-00002.safetensors" })
	request(t, f.dir, 3, bad)
	// Generation 4: a single file inside a directory generation.
	st, err := snapshot.OpenGenStore(filepath.Join(f.dir, GensDir))
	if err != nil {
		t.Fatal(err)
	}
	g4, err := st.PublishDir(4, "", func(dir string) error {
		var buf bytes.Buffer
		if err := safetensors.New().Encode(context.Background(), &buf, model(4), formats.EncodeOptions{}); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "model.safetensors"), buf.Bytes(), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	request(t, f.dir, 4, filepath.Join(g4.Path, "model.safetensors"))
	// Generation 5: a FIFO in the directory fails the request at once.
	g5, err := st.PublishDir(5, "", func(dir string) error {
		return syscall.Mkfifo(filepath.Join(dir, "model-00001-of-00002.safetensors"), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	request(t, f.dir, 5, g5.Path)

	for _, g := range []uint64{1, 2} {
		r := f.wait(t, g)
		if r.State != wal.Done || r.Format != "sharddir" || r.SourceBytes == 0 {
			t.Fatalf("gen %d: %+v", g, r)
		}
	}
	r3 := f.wait(t, 3)
	if r3.State != wal.Failed || !strings.Contains(r3.Error, `tensor "head.weight"`) || !strings.Contains(r3.Error, "path with a directory part refused") {
		t.Fatalf("gen 3: %s %q", r3.StateName, r3.Error)
	}
	if r := f.wait(t, 4); r.State != wal.Done || r.Format != "safetensors" {
		t.Fatalf("gen 4: %+v", r)
	}
	if r := f.wait(t, 5); r.State != wal.Failed || !strings.Contains(r.Error, "not a regular file (a FIFO)") {
		t.Fatalf("gen 5: %s %q", r.StateName, r.Error)
	}
	verifyChain(t, f.dir, f.keys, []uint64{1, 2, 4})
	r2 := f.wait(t, 2)
	if r2.DeltaChanged == 0 || r2.DeltaChanged >= r2.DeltaChunks {
		t.Errorf("gen 2 delta: %d of %d chunks", r2.DeltaChanged, r2.DeltaChunks)
	}

	// The WTXT of gen 1 holds the model's arrays under their own names,
	// the layout and config.json.
	p := ringPath(filepath.Join(f.dir, RingDir), 1, ExtWTXT)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s, err := wtxt.New().Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: p})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range s.Arrays {
		names = append(names, a.Name)
	}
	if !reflect.DeepEqual(names, []string{"embed.weight", "head.weight"}) || s.Attrs[sharddir.AttrLayout] == "" || s.Attrs[sharddir.AttrTextPrefix+"config.json"] == "" {
		t.Fatalf("gen 1 WTXT: arrays %v attrs %v", names, s.Attrs)
	}
	want, _ := snapshot.ReadAll(model(1).Array("embed.weight").Data)
	got, _ := snapshot.ReadAll(s.Array("embed.weight").Data)
	if !bytes.Equal(want, got) {
		t.Fatal("gen 1 embed.weight differs from the published model")
	}
	f.stop(t)

	// Every pin was released; gc reclaims whole directory generations.
	if pins, err := st.Pins(); err != nil || len(pins) != 0 {
		t.Fatalf("pins left: %v %v", pins, err)
	}
	rep, err := st.Reclaim(context.Background(), snapshot.ReclaimOptions{Snapshotted: func(g uint64) bool { return g != 3 && g != 5 }, Abandoned: func(g uint64) bool { return g == 3 || g == 5 }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deleted) != 4 { // 1, 2, 3 and 5 (4 is the newest snapshotted)
		t.Fatalf("reclaimed %+v", rep)
	}
	for _, g := range []uint64{1, 2, 3} {
		if _, err := os.Stat(filepath.Join(f.dir, GensDir, snapshot.GenName(g, ""))); !os.IsNotExist(err) {
			t.Errorf("gen %d still there: %v", g, err)
		}
	}
}

// TestPythonPublishesShardedDirectory: a trainer publishes a sharded
// checkpoint directory with scripts/snapd_trainer.py's
// publish_generation_dir and requests it with request_snapshot; the
// daemon snapshots it.
func TestPythonPublishesShardedDirectory(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	scripts, _ := filepath.Abs(filepath.Join("..", "scripts"))
	f := newFixture(t)
	// Stage the shard files the "trainer" writes (as save_pretrained would).
	stage := filepath.Join(t.TempDir(), "stage")
	os.Rename(publishSharded(t, t.TempDir(), 1, nil), stage)
	f.start(t, nil)
	prog := `
import os, shutil, sys
sys.path.insert(0, sys.argv[1])
import snapd_trainer as st
state, stage = sys.argv[2], sys.argv[3]
def fill(d):
    for n in sorted(os.listdir(stage)):
        shutil.copyfile(os.path.join(stage, n), os.path.join(d, n))
p = st.publish_generation_dir(os.path.join(state, "gens"), 1, fill)
st.request_snapshot(1, p, state_dir=state)
print(p)
`
	out, err := exec.Command(py, "-c", prog, scripts, f.dir, stage).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	if r := f.wait(t, 1); r.State != wal.Done || r.Format != "sharddir" || !strings.HasSuffix(r.Source, "gen-000001") {
		t.Fatalf("gen 1: %+v", r)
	}
	verifyChain(t, f.dir, f.keys, []uint64{1})
	f.stop(t)
}
