//go:build linux

package sharddir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/internal/testutil"
)

// openErr opens dir expecting a failure; a hang fails the test (the
// timeout is only a guard, the open itself must never block).
func openErr(t *testing.T, dir string, lim Limits) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		d, err := Open(context.Background(), dir, registry(), Options{Limits: lim})
		if err == nil {
			d.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("opened; want an error")
		}
		return err
	case <-time.After(testutil.Guard):
		t.Fatal("Open blocked")
	}
	return nil
}

func setIndex(t *testing.T, dir string, wm map[string]string) {
	t.Helper()
	b, err := MarshalIndex(nil, wm)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, hfIdx), b, 0o644))
}

var hfMap = map[string]string{"model.embed.weight": shard1, "model.layers.0.w": shard1, "model.layers.1.w": shard2, "lm_head.weight": shard2}

func withMap(change func(m map[string]string)) map[string]string {
	m := map[string]string{}
	for k, v := range hfMap {
		m[k] = v
	}
	change(m)
	return m
}

func TestRefusals(t *testing.T) {
	outside := t.TempDir()
	writeFile(t, safetensors.New(), outside, "x.safetensors", nil, f32("model.layers.1.w", 3, 3, 3), f32("lm_head.weight", 4, 4, 3))
	secret := "SECRET-CONTENT-1234"
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		lim   Limits
		is    error
		want  string // in the message
	}{
		{"dotdot shard", func(t *testing.T, dir string) {
			setIndex(t, dir, withMap(func(m map[string]string) { m["lm_head.weight"] = "../x.safetensors" }))
		}, Limits{}, ErrUnsafe, `tensor "lm_head.weight": offset 58: shard "../x.safetensors": path with a directory part refused`},
		{"absolute shard", func(t *testing.T, dir string) {
			setIndex(t, dir, withMap(func(m map[string]string) { m["lm_head.weight"] = filepath.Join(outside, "x.safetensors") }))
		}, Limits{}, ErrUnsafe, "absolute path refused"},
		{"symlink out", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, shard2)))
			must(t, os.Symlink(filepath.Join(outside, "x.safetensors"), filepath.Join(dir, shard2)))
		}, Limits{}, ErrUnsafe, "resolves outside the directory"},
		{"relative symlink out", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, shard2)))
			rel, _ := filepath.Rel(dir, filepath.Join(outside, "x.safetensors"))
			must(t, os.Symlink(rel, filepath.Join(dir, shard2)))
		}, Limits{}, ErrUnsafe, "resolves outside the directory"},
		{"symlink to /dev/zero", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, shard2)))
			must(t, os.Symlink("/dev/zero", filepath.Join(dir, shard2)))
		}, Limits{}, ErrUnsafe, "outside the directory"},
		{"tensor in two shards", func(t *testing.T, dir string) {
			writeFile(t, safetensors.New(), dir, shard2, nil, f32("model.layers.1.w", 3, 3, 3), f32("lm_head.weight", 4, 4, 3), f32("model.embed.weight", 1, 4, 3))
		}, Limits{}, ErrCorrupt, `tensor "model.embed.weight": present in two shards`},
		{"missing shard", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, shard2)))
		}, Limits{}, ErrCorrupt, `tensor "lm_head.weight": the index maps it to shard "model-00002-of-00002.safetensors", which does not exist`},
		{"shard lacks tensor", func(t *testing.T, dir string) {
			setIndex(t, dir, withMap(func(m map[string]string) { m["extra.bias"] = shard1 }))
		}, Limits{}, ErrCorrupt, `tensor "extra.bias": the index maps it to shard "model-00001-of-00002.safetensors", which does not hold it`},
		{"tensor in no index entry", func(t *testing.T, dir string) {
			setIndex(t, dir, withMap(func(m map[string]string) { delete(m, "lm_head.weight") }))
		}, Limits{}, ErrCorrupt, `tensor "lm_head.weight": in this shard but not in the index's weight_map`},
		{"index maps to other shard", func(t *testing.T, dir string) {
			setIndex(t, dir, withMap(func(m map[string]string) { m["lm_head.weight"] = shard1 }))
		}, Limits{}, ErrCorrupt, `in this shard but the index maps it to`},
		{"FIFO shard", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, shard2)))
			must(t, syscall.Mkfifo(filepath.Join(dir, shard2), 0o644))
		}, Limits{}, ErrUnsafe, "not a regular file (a FIFO)"},
		{"FIFO beside the shards", func(t *testing.T, dir string) {
			must(t, syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644))
		}, Limits{}, ErrUnsafe, "not a regular file"},
		{"symlink to a FIFO", func(t *testing.T, dir string) {
			must(t, syscall.Mkfifo(filepath.Join(dir, ".pipe"), 0o644)) // dot-names are not listed
			must(t, os.Remove(filepath.Join(dir, shard2)))
			must(t, os.Symlink(".pipe", filepath.Join(dir, shard2)))
		}, Limits{}, ErrUnsafe, "not a regular file (a FIFO)"},
		{"duplicate weight_map key", func(t *testing.T, dir string) {
			b := `{"weight_map": {"lm_head.weight": "` + shard2 + `", "lm_head.weight": "` + shard1 + `"}}`
			must(t, os.WriteFile(filepath.Join(dir, hfIdx), []byte(b), 0o644))
		}, Limits{}, ErrCorrupt, `tensor "lm_head.weight": offset 68: listed twice in weight_map`},
		{"index too large", nil, Limits{MaxIndexBytes: 100}, ErrLimit, "limit 100"},
		{"too many entries", nil, Limits{MaxIndexEntries: 3}, ErrLimit, "more than 3 entries"},
		{"invalid JSON does not echo", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, hfIdx), []byte(`{"weight_map": {`+secret+`}}`), 0o644))
		}, Limits{}, ErrCorrupt, "offset 16: invalid JSON"},
		{"unknown key", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, hfIdx), []byte(`{"weight_map": {"a": "b"}, "x": 1}`), 0o644))
		}, Limits{}, ErrCorrupt, `offset 25: unknown top-level key (1 bytes; want metadata, weight_map)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := makeHF(t)
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			err := openErr(t, dir, tc.lim)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant %v containing %q", err, tc.is, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error echoes file content: %v", err)
			}
		})
	}
}

// TestSymlinkInside: a shard that is a symlink to a file inside the
// directory is read.
func TestSymlinkInside(t *testing.T) {
	dir := makeHF(t)
	must(t, os.Rename(filepath.Join(dir, shard2), filepath.Join(dir, "blob")))
	must(t, os.Symlink("blob", filepath.Join(dir, shard2)))
	if d := open(t, dir); len(d.Snapshot.Arrays) != 4 {
		t.Fatalf("%d arrays", len(d.Snapshot.Arrays))
	}
}

func TestPlainRefusals(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, safetensors.New(), dir, "a.safetensors", nil, f32("w", 1, 2))
	must(t, syscall.Mkfifo(filepath.Join(dir, "b.safetensors"), 0o644))
	if err := openErr(t, dir, Limits{}); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "b.safetensors") {
		t.Fatalf("FIFO: %v", err)
	}
	empty := t.TempDir()
	must(t, os.WriteFile(filepath.Join(empty, "README.md"), []byte("hi"), 0o644))
	if err := openErr(t, empty, Limits{}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "no checkpoint file") {
		t.Fatalf("no checkpoint: %v", err)
	}
	bad := t.TempDir()
	must(t, os.WriteFile(filepath.Join(bad, "x.safetensors"), []byte("\x10\x00\x00\x00\x00\x00\x00\x00{}"), 0o644))
	if err := openErr(t, bad, Limits{}); !strings.Contains(err.Error(), "x.safetensors") {
		t.Fatalf("corrupt file: %v", err)
	}
	many := t.TempDir()
	for _, n := range []string{"a.safetensors", "b.safetensors", "c.safetensors"} {
		writeFile(t, safetensors.New(), many, n, nil, f32("w", 1, 2))
	}
	if err := openErr(t, many, Limits{MaxFiles: 2}); !errors.Is(err, ErrLimit) {
		t.Fatalf("file limit: %v", err)
	}
	if err := openErr(t, many, Limits{MaxEntries: 2}); !errors.Is(err, ErrLimit) {
		t.Fatalf("entry limit: %v", err)
	}
	file := filepath.Join(many, "a.safetensors")
	if err := openErr(t, file, Limits{}); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("file as dir: %v", err)
	}
}

// TestWriteRefusals: layout attributes come from an untrusted WTXT and
// must not steer writes outside the output directory.
func TestWriteRefusals(t *testing.T) {
	base := func() map[string]string { return map[string]string{} }
	for _, tc := range []struct {
		name  string
		attrs map[string]string
		want  string
	}{
		{"text dotdot", map[string]string{AttrTextPrefix + "../evil": "x"}, "path with a directory part refused"},
		{"text dotname", map[string]string{AttrTextPrefix + ".bashrc": "x"}, "dot-names are refused"},
		{"text slash", map[string]string{AttrTextPrefix + "a/b": "x"}, "path with a directory part refused"},
		{"layout dotdot", map[string]string{AttrLayout: `{"v":1,"kind":"plain","files":[{"name":"../x","codec":"safetensors"}]}`}, "path with a directory part refused"},
		{"layout abs index", map[string]string{AttrLayout: `{"v":1,"kind":"index","index":"/tmp/a.index.json","files":[]}`}, "is not a *.index.json file name"},
		{"layout unknown field", map[string]string{AttrLayout: `{"v":1,"kind":"plain","files":[],"x":1}`}, "attribute is not a layout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, makeHF(t)).Snapshot
			for k, v := range base() {
				s.Attrs[k] = v
			}
			for k, v := range tc.attrs {
				s.Attrs[k] = v
			}
			parent := t.TempDir()
			_, err := Write(context.Background(), filepath.Join(parent, "out"), s, WriteOptions{Codecs: registry()})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if ents, _ := os.ReadDir(parent); len(ents) != 0 {
				t.Fatalf("left %v behind", ents)
			}
		})
	}
	// An existing non-empty directory is not overwritten.
	out := t.TempDir()
	must(t, os.WriteFile(filepath.Join(out, "keep"), nil, 0o644))
	if _, err := Write(context.Background(), out, open(t, makeHF(t)).Snapshot, WriteOptions{Codecs: registry()}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("non-empty dir: %v", err)
	}
}
