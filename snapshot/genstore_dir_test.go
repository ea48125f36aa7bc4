package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestDirectoryGenerationPins: a directory generation (sharded
// checkpoint) is pinned as a whole — also through a path inside it — and
// reclaimed as a whole once unpinned.
func TestDirectoryGenerationPins(t *testing.T) {
	s, err := OpenGenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for g := uint64(1); g <= 2; g++ {
		if _, err := s.PublishDir(g, "", func(dir string) error {
			for _, n := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"} {
				if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	inside := filepath.Join(s.Dir(), GenName(1, ""), "model-00002-of-00002.safetensors")
	for path, want := range map[string]uint64{
		filepath.Join(s.Dir(), GenName(1, "")):       1,
		filepath.Join(s.Dir(), GenName(1, "")) + "/": 1,
		inside: 1,
		filepath.Join(s.Dir(), GenName(2, ""), "x", "..", "y"): 2,
	} {
		if g, ok := s.GenOf(path); !ok || g != want {
			t.Errorf("GenOf(%s) = %d %v, want %d", path, g, ok, want)
		}
	}
	for _, path := range []string{s.Dir(), filepath.Join(s.Dir(), ".tmp-gen-000001-1-ab"), filepath.Join(s.Dir(), "..", "gen-000001"),
		filepath.Join(s.Dir(), GenName(1, ""), "..", "..", "elsewhere"), "/"} {
		if g, ok := s.GenOf(path); ok {
			t.Errorf("GenOf(%s) = %d, want none", path, g)
		}
	}
	g, _ := s.GenOf(inside)
	pin, err := s.Pin(context.Background(), g)
	if err != nil {
		t.Fatal(err)
	}
	all := func(uint64) bool { return true }
	rep, err := s.Reclaim(context.Background(), ReclaimOptions{Snapshotted: all})
	if err != nil || len(rep.Deleted) != 0 || len(rep.Kept) != 2 || rep.Kept[0].Reason != "pinned" {
		t.Fatalf("reclaim while pinned: %+v %v", rep, err)
	}
	if _, err := os.Stat(inside); err != nil {
		t.Fatalf("a shard of the pinned generation is gone: %v", err)
	}
	pin.Release()
	rep, err = s.Reclaim(context.Background(), ReclaimOptions{Snapshotted: all})
	if err != nil || len(rep.Deleted) != 1 || rep.Deleted[0].Gen != 1 || !rep.Deleted[0].IsDir {
		t.Fatalf("reclaim after release: %+v %v", rep, err)
	}
	if _, err := os.Stat(filepath.Dir(inside)); !os.IsNotExist(err) {
		t.Fatalf("directory generation not removed whole: %v", err)
	}
}
