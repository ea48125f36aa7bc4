package torch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// flattenPy loads each .pt it is given with torch.load(weights_only=True)
// and prints its tensors as EXPECTED.json does: name -> [dtype, shape,
// sha256], one JSON line per file in argument order (one process for all
// the files: importing torch costs seconds).
const flattenPy = `
import hashlib, json, sys, torch
def h(t):
    t = t.detach().contiguous().cpu()
    return hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()
def flat(prefix, obj, acc):
    if isinstance(obj, torch.Tensor):
        acc[prefix] = [str(obj.dtype).replace("torch.", ""), list(obj.shape), h(obj)]
    elif isinstance(obj, dict):
        for k, v in obj.items():
            flat(f"{prefix}.{k}" if prefix else str(k), v, acc)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flat(f"{prefix}.{i}", v, acc)
    return acc
for path in sys.argv[1:]:
    print(json.dumps(flat("", torch.load(path, weights_only=True), {})))
`

// realTorch is a way to run a Python with torch: the command prefix and
// the directory files must be written to (inside a chroot for one).
type realTorch struct {
	name   string
	cmd    []string
	dir    string // where the files go
	inside string // dir as the command sees it
	files  []string
}

// realTorches finds torch 1.13 (/usr/bin/python3, Debian 12; only with
// system, as probing it imports torch) and a torch 2.x chroot named by
// SNAPD_TORCH2_CHROOT (Debian 13's python3-torch 2.6, see
// shared/fixtures/torch2/README.md).
func realTorches(t *testing.T, system bool) []realTorch {
	var out []realTorch
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if !system {
			break
		}
		if exec.Command(py, "-c", "import torch").Run() != nil {
			continue
		}
		d := t.TempDir()
		out = append(out, realTorch{name: "system", cmd: []string{py}, dir: d, inside: d,
			// torch 1.13 reads no float leaves with weights_only (the
			// optimizer's lr) and no float8 (_rebuild_tensor_v3).
			files: []string{"model.pt", "views.pt", "legacy.pt"}})
		break
	}
	if root := os.Getenv("SNAPD_TORCH2_CHROOT"); root != "" {
		d, err := os.MkdirTemp(filepath.Join(root, "tmp"), "snapd-torch-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		out = append(out, realTorch{name: "chroot", cmd: []string{"chroot", root, "python3"}, dir: d,
			inside: "/tmp/" + filepath.Base(d), files: []string{"model.pt", "train_ckpt.pt", "dtypes.pt", "views.pt", "legacy.pt"}})
	}
	if len(out) == 0 {
		if !system {
			t.Skip("no torch 2.x (SNAPD_TORCH2_CHROOT)")
		}
		t.Skip("no python3 with torch")
	}
	return out
}

// TestRealTorchLoadsEncoded: what Encode writes from each torch 2.6
// fixture loads with torch.load(weights_only=True) in torch 1.13 (the
// files it can hold) and in torch 2.x (all, fp8 and complex included),
// to the fixture's exact tensors.
func TestRealTorchLoadsEncoded(t *testing.T) {
	exp := expected2(t)
	for _, rt := range realTorches(t, true) {
		os.WriteFile(filepath.Join(rt.dir, "flatten.py"), []byte(flattenPy), 0o644)
		args := append(append([]string{}, rt.cmd[1:]...), rt.inside+"/flatten.py")
		for _, file := range rt.files {
			s := decodeFile(t, filepath.Join("testdata/torch2", file))
			var pt bytes.Buffer
			if err := New().Encode(context.Background(), &pt, s, formats.EncodeOptions{}); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			os.WriteFile(filepath.Join(rt.dir, file), pt.Bytes(), 0o644)
			args = append(args, rt.inside+"/"+file)
		}
		out, err := exec.Command(rt.cmd[0], args...).Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("%s: torch.load of %v: %v\n%s", rt.name, rt.files, err, stderr)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != len(rt.files) {
			t.Fatalf("%s: %d lines for %d files:\n%s", rt.name, len(lines), len(rt.files), out)
		}
		for i, file := range rt.files {
			t.Run(rt.name+"/"+file, func(t *testing.T) {
				var got map[string][3]json.RawMessage
				if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
					t.Fatalf("%v: %s", err, lines[i])
				}
				want := exp[file]
				if len(got) != len(want) {
					t.Fatalf("%d tensors, want %d", len(got), len(want))
				}
				for name, g := range got {
					var dt, sum string
					var shape []int64
					json.Unmarshal(g[0], &dt)
					json.Unmarshal(g[1], &shape)
					json.Unmarshal(g[2], &sum)
					w, ok := want[name]
					if shape == nil {
						shape = []int64{}
					}
					if !ok || dt != w.DType || !reflect.DeepEqual(shape, w.Shape) || sum != w.SHA256 {
						t.Errorf("%s: %s %v %s, want %+v", name, dt, shape, strings.TrimSpace(sum), w)
					}
				}
			})
		}
	}
}

// TestRealTorch2LoadsNewDTypes: arrays of the dtypes without a typed
// storage class (and complex128) load in torch 2.x as the dtype they
// were, with their bytes. (f8e8m0 is written the same way, but torch
// 2.6's weights_only loader does not allow torch.float8_e8m0fnu, not even
// in its own files.)
func TestRealTorch2LoadsNewDTypes(t *testing.T) {
	var rt *realTorch
	for _, r := range realTorches(t, false) {
		if r.name == "chroot" {
			rt = &r
		}
	}
	if rt == nil {
		t.Skip("no torch 2.x (SNAPD_TORCH2_CHROOT)")
	}
	s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta()}
	want := map[string]expTensor{}
	for name, dt := range map[string]snapshot.DType{"u16": snapshot.U16, "u32": snapshot.U32, "u64": snapshot.U64,
		"f8e4m3": snapshot.F8E4M3, "f8e5m2": snapshot.F8E5M2, "c128": snapshot.C128} {
		b := make([]byte, 6*dt.Size())
		for i := range b {
			b[i] = byte(i*7 + 3)
		}
		if dt == snapshot.F8E4M3 {
			for i := range b {
				b[i] &= 0x7e // no NaNs
			}
		}
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: name, DType: dt, Shape: []int64{2, 3}, Data: snapshot.Bytes(b)})
		sum := sha256.Sum256(b)
		var tn string
		for n, d := range torchDTypeNames {
			if d == dt {
				tn = n
			}
		}
		want[name] = expTensor{DType: tn, Shape: []int64{2, 3}, SHA256: hex.EncodeToString(sum[:])}
	}
	var pt bytes.Buffer
	if err := New().Encode(context.Background(), &pt, s, formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(rt.dir, "flatten.py"), []byte(flattenPy), 0o644)
	os.WriteFile(filepath.Join(rt.dir, "new.pt"), pt.Bytes(), 0o644)
	out, err := exec.Command(rt.cmd[0], append(append([]string{}, rt.cmd[1:]...), rt.inside+"/flatten.py", rt.inside+"/new.pt")...).CombinedOutput()
	if err != nil {
		t.Fatalf("torch.load: %v\n%s", err, out)
	}
	var got map[string]expTensor
	var raw map[string][3]json.RawMessage
	if err := json.Unmarshal(bytes.TrimSpace(out), &raw); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got = map[string]expTensor{}
	for n, g := range raw {
		var e expTensor
		json.Unmarshal(g[0], &e.DType)
		json.Unmarshal(g[1], &e.Shape)
		json.Unmarshal(g[2], &e.SHA256)
		got[n] = e
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("torch loaded %v\nwant %v", got, want)
	}
}
