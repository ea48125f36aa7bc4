//go:build linux

package dcp

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/torch"
)

// hostileDir writes the state dict with tensors split in two along dim 0
// over two rank files, lets edit change the metadata, and rewrites
// .metadata from it.
func hostileDir(t *testing.T, edit func(dir string, md *Metadata)) string {
	t.Helper()
	dir := t.TempDir()
	md := writeLayout(t, dir, stateDict(t), split(0, 2), 2)
	edit(dir, md)
	if err := os.WriteFile(filepath.Join(dir, metadataName), encodeMetadata(md, "test"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func item(md *Metadata, fqn string) *Item {
	for _, it := range md.Items {
		if it.FQN == fqn {
			return it
		}
	}
	panic(fqn)
}

// TestHostileDirectories: every inconsistent or unsafe directory fails
// with a located error of the right class (file, chunk, tensor, check),
// and none quotes file content.
func TestHostileDirectories(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(dir string, md *Metadata)
		want error
		msg  []string
	}{
		{"overlap", func(_ string, md *Metadata) {
			c := &item(md, "model.emb").Chunks[1]
			c.Offsets = []int64{5, 0}
		}, ErrCorrupt, []string{`tensor "model.emb"`, "chunk 1 overlaps chunk 0"}},
		{"hole", func(_ string, md *Metadata) {
			it := item(md, "model.emb")
			it.Size = []int64{13, 8}
		}, ErrCorrupt, []string{`tensor "model.emb"`, "no chunk holds the element at [12 0]"}},
		{"exceeds", func(_ string, md *Metadata) {
			it := item(md, "model.cube")
			it.Chunks[1].Offsets = []int64{3, 0, 0}
		}, ErrCorrupt, []string{`tensor "model.cube"`, "chunk 1: dimension 0 spans [3, 3+2), beyond the tensor's 4"}},
		{"sizes-disagree-with-item", func(_ string, md *Metadata) {
			it := item(md, "model.emb")
			it.Chunks[0].Sizes = []int64{6, 4}
			it.Chunks = append(it.Chunks, Chunk{Offsets: []int64{0, 4}, Sizes: []int64{6, 4}, Storage: it.Chunks[0].Storage})
		}, ErrCorrupt, []string{"chunk 0", `tensor "model.emb"`, "item tensor has shape [6 8], the chunk's sizes are [6 4]"}},
		{"outside-file", func(_ string, md *Metadata) {
			item(md, "model.w").Chunks[1].Storage.Offset = 1 << 30
		}, ErrIncomplete, []string{"__1_0.distcp", "chunk 1", `tensor "model.w"`, "beyond the file's"}},
		{"short-file", func(dir string, md *Metadata) {
			p := filepath.Join(dir, "__1_0"+Suffix)
			st, _ := os.Stat(p)
			if err := os.Truncate(p, st.Size()-10); err != nil {
				panic(err)
			}
		}, ErrIncomplete, []string{"__1_0.distcp", "beyond the file's"}},
		{"missing-file", func(dir string, md *Metadata) {
			os.Remove(filepath.Join(dir, "__1_0"+Suffix))
		}, ErrIncomplete, []string{"__1_0.distcp", "does not exist"}},
		{"dotdot", func(_ string, md *Metadata) {
			item(md, "model.w").Chunks[0].Storage.File = "../x"
		}, ErrUnsafe, []string{"storage_data entry", `tensor "model.w"`, "leaves the directory"}},
		{"subdir", func(_ string, md *Metadata) {
			item(md, "model.w").Chunks[0].Storage.File = "sub/x.distcp"
		}, ErrUnsafe, []string{`tensor "model.w"`, "another directory"}},
		{"absolute", func(_ string, md *Metadata) {
			item(md, "step").Storage.File = "/etc/passwd"
		}, ErrUnsafe, []string{`tensor "step"`, "absolute path"}},
		{"metadata-as-item", func(_ string, md *Metadata) {
			item(md, "step").Storage.File = ".metadata"
		}, ErrUnsafe, []string{`tensor "step"`, "dot-file"}},
		{"symlink-out", func(dir string, md *Metadata) {
			out := filepath.Join(t.TempDir(), "outside.distcp")
			b, _ := os.ReadFile(filepath.Join(dir, "__1_0"+Suffix))
			os.WriteFile(out, b, 0o644)
			os.Remove(filepath.Join(dir, "__1_0"+Suffix))
			if err := os.Symlink(out, filepath.Join(dir, "__1_0"+Suffix)); err != nil {
				panic(err)
			}
		}, ErrUnsafe, []string{"__1_0.distcp", "outside the directory"}},
		{"fifo", func(dir string, md *Metadata) {
			p := filepath.Join(dir, "__1_0"+Suffix)
			os.Remove(p)
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				panic(err)
			}
		}, ErrUnsafe, []string{"__1_0.distcp", "a FIFO"}},
		{"wrong-dtype", func(_ string, md *Metadata) {
			item(md, "model.w").DType = 2 // f32 for a bf16 tensor
		}, ErrCorrupt, []string{"chunk 0", `tensor "model.w"`, "item tensor is bf16, the metadata says f32"}},
		{"item-not-torch", func(_ string, md *Metadata) {
			it := item(md, "model.emb")
			it.Chunks[0].Storage = item(md, "step").Storage
			it.Chunks[0].Storage.Length = 10
		}, formats.ErrCorrupt, []string{"chunk 0", `tensor "model.emb"`, "not a readable torch.save archive"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := hostileDir(t, tc.edit)
			d, err := Open(context.Background(), dir, Options{Torch: torch.New()})
			if err == nil {
				d.Close()
				t.Fatal("opened")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v\nwant an error matching %v", err, tc.want)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("%v\nwant it to say %q", err, m)
				}
			}
			var fe *formats.Error
			if !errors.As(err, &fe) {
				t.Errorf("not a *formats.Error: %T", err)
			}
		})
	}
}

// TestIncomplete: a directory still being written (item files, no
// .metadata yet) is recognised as DCP and refused as incomplete.
func TestIncomplete(t *testing.T) {
	dir := t.TempDir()
	writeLayout(t, dir, stateDict(t), split(0, 2), 2)
	if err := os.Remove(filepath.Join(dir, metadataName)); err != nil {
		t.Fatal(err)
	}
	if ok, err := IsDCP(dir); !ok || err != nil {
		t.Fatalf("IsDCP = %v, %v", ok, err)
	}
	_, err := Open(context.Background(), dir, Options{Torch: torch.New()})
	if !errors.Is(err, ErrIncomplete) || !errors.Is(err, formats.ErrTruncated) || !strings.Contains(err.Error(), "no .metadata") {
		t.Fatalf("%v, want ErrIncomplete", err)
	}
	if ok, _ := IsDCP(t.TempDir()); ok {
		t.Fatal("an empty directory is DCP")
	}
}

// TestBudget: what reading materialises (the chunk grid, the torch
// codec's decoding of each item) is charged to the item file's decode
// budget; a budget too small fails with ErrLimit, not an allocation.
func TestBudget(t *testing.T) {
	dir := t.TempDir()
	writeLayout(t, dir, stateDict(t), mesh(2, 2), 2)
	_, err := Open(context.Background(), dir, Options{Torch: torch.New(), MaxDecoded: 16})
	if !errors.Is(err, formats.ErrLimit) {
		t.Fatalf("%v, want ErrLimit", err)
	}
	d, err := Open(context.Background(), dir, Options{Torch: torch.New()})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
}
