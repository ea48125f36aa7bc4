package dcp

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/torch"
)

// realTorchPy checks, with torch 2.x, DCP directories snapd wrote and
// writes one of its own from two ranks with other shardings than the
// fixtures' (dim 1, uneven dim 0). argv: mode, directory.
const realTorchPy = `
import hashlib, json, os, sys, tempfile
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

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

def full():
    torch.manual_seed(5)
    return {"emb": torch.randn(10, 6), "w": torch.randn(7, 4).bfloat16(), "b": torch.randn(5)}

def worker(rank, world, port, mode, d):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor, Shard, Replicate
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), USE_LIBUV="0")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    f = full()
    pl = {"emb": [Shard(1)], "w": [Shard(0)], "b": [Replicate()]}
    if mode == "save":
        sd = {k: distribute_tensor(v.float(), mesh, pl[k]) for k, v in f.items()}
        sd = {k: (v.to(f[k].dtype) if k == "w" else v) for k, v in sd.items()}
        sd["lr"] = 0.5
        dcp.save(sd, checkpoint_id=d)
    else:
        sd = {k: distribute_tensor(torch.zeros_like(v), mesh, pl[k]) for k, v in f.items()}
        sd["lr"] = 0.0
        dcp.load(sd, checkpoint_id=d)
        got = flat("", {k: v.full_tensor() for k, v in sd.items() if k != "lr"}, {})
        if rank == 0:
            print(json.dumps({"tensors": got, "lr": sd["lr"]}))
    dist.destroy_process_group()

if __name__ == "__main__":
    mode, d = sys.argv[1], sys.argv[2]
    if mode == "flat":
        out = tempfile.mktemp(suffix=".pt")
        dcp_to_torch_save(d, out)
        print(json.dumps(flat("", torch.load(out, weights_only=False), {})))
    elif mode == "expect":
        print(json.dumps(flat("", full(), {})))
    else:
        import torch.multiprocessing as mp
        mp.spawn(worker, args=(2, 29500 + os.getpid() % 1000, mode, d), nprocs=2, join=True)
`

// TestRealTorch: torch 2.x (a chroot named by SNAPD_TORCH2_CHROOT, see
// shared/fixtures/torch2/README.md) reads what Write makes of both
// fixtures (dcp_to_torch_save: every tensor equal to EXPECTED.json, the
// nested state dict rebuilt from planner_data), loads it into two ranks
// with other shardings, and a checkpoint torch writes from two ranks
// sharded along dim 1 and unevenly along dim 0 reads here whole.
func TestRealTorch(t *testing.T) {
	root := os.Getenv("SNAPD_TORCH2_CHROOT")
	if root == "" {
		t.Skip("SNAPD_TORCH2_CHROOT is not set: no torch 2.x to check against")
	}
	ctx := context.Background()
	d, err := os.MkdirTemp(filepath.Join(root, "tmp"), "snapd-dcp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	inside := "/tmp/" + filepath.Base(d)
	if err := os.WriteFile(filepath.Join(d, "t.py"), []byte(realTorchPy), 0o644); err != nil {
		t.Fatal(err)
	}
	py := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command("chroot", append([]string{root, "python3", inside + "/t.py"}, args...)...)
		cmd.Env = append(os.Environ(), "USE_LIBUV=0")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("python %v: %v\n%s", args, err, stderr.String())
		}
		return out
	}
	for _, name := range []string{"dcp1", "dcp2"} {
		src, err := Open(ctx, filepath.Join(fixtures, name), Options{Torch: torch.New()})
		if err != nil {
			t.Fatal(err)
		}
		if err := Write(ctx, filepath.Join(d, name), src.Snapshot, WriteOptions{Torch: torch.New()}); err != nil {
			t.Fatal(err)
		}
		src.Close()
		var got map[string][3]any
		if err := json.Unmarshal(py("flat", inside+"/"+name), &got); err != nil {
			t.Fatal(err)
		}
		want := expected(t, name)
		if len(got) != len(want) {
			t.Fatalf("%s: torch read %d tensors, want %d", name, len(got), len(want))
		}
		for k, w := range want {
			if g, ok := got[k]; !ok || g[2] != w[2] || g[0] != w[0] {
				t.Errorf("%s: torch reads tensor %s as %v, want %v", name, k, g, w)
			}
		}
	}
	// torch writes from two ranks (dim 1, uneven dim 0, replicated, a float).
	py("save", inside+"/torchsaved")
	var want map[string][3]any
	if err := json.Unmarshal(py("expect", ""), &want); err != nil {
		t.Fatal(err)
	}
	dd, err := Open(ctx, filepath.Join(d, "torchsaved"), Options{Torch: torch.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer dd.Close()
	checkExpected(t, dd.Snapshot, want)
	if v := dd.Snapshot.Array("lr").Attrs[AttrValue]; v != `{"float":"0.5"}` {
		t.Errorf("lr: %s = %q", AttrValue, v)
	}
	// ... and loads snapd's one-rank rewrite of it into two ranks.
	if err := Write(ctx, filepath.Join(d, "rewritten"), dd.Snapshot, WriteOptions{Torch: torch.New()}); err != nil {
		t.Fatal(err)
	}
	var loaded struct {
		Tensors map[string][3]any `json:"tensors"`
		LR      float64           `json:"lr"`
	}
	if err := json.Unmarshal(py("load", inside+"/rewritten"), &loaded); err != nil {
		t.Fatal(err)
	}
	if loaded.LR != 0.5 || len(loaded.Tensors) != len(want) {
		t.Fatalf("two ranks loaded %v", loaded)
	}
	for k, w := range want {
		if g := loaded.Tensors[k]; g[2] != w[2] {
			t.Errorf("two ranks load tensor %s as %v, want %v", k, g, w)
		}
	}
}
