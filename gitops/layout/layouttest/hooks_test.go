package layouttest

import (
	"bytes"
	"context"
	"io"
	"path"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout"
)

// hookTree is a MapTree with the optional writer hooks, counting their
// calls.
type hookTree struct {
	layout.MapTree
	from, parts, manifests int
}

func (t *hookTree) WriteFrom(_ context.Context, name string, src io.ReaderAt, size int64) error {
	t.from++
	var b bytes.Buffer
	if _, err := io.Copy(&b, io.NewSectionReader(src, 0, size)); err != nil {
		return err
	}
	return t.WriteFile(name, b.Bytes())
}

func (t *hookTree) WritePart(dir string, p layout.Part, data []byte) error {
	t.parts++
	if int64(len(data)) != p.Size {
		return io.ErrShortWrite
	}
	return t.WriteFile(path.Join(dir, p.Name), data)
}

func (t *hookTree) WriteManifest(dir string, m *layout.Manifest) error {
	t.manifests++
	return t.WriteFile(path.Join(dir, layout.ManifestName), m.Encode())
}

// genBlobs is a Memory store with the generation hooks: it knows the
// segments of known by key and records what it is told to hold.
type genBlobs struct {
	*layout.Memory
	known map[wtxt.SegmentKey][32]byte
	held  map[wtxt.SegmentKey][32]byte
	puts  int
}

func (g *genBlobs) Put(ctx context.Context, d [32]byte, data []byte) error {
	g.puts++
	return g.Memory.Put(ctx, d, data)
}

func (g *genBlobs) Known(k wtxt.SegmentKey) ([32]byte, bool) {
	d, ok := g.known[k]
	return d, ok
}

func (g *genBlobs) Hold(_ context.Context, s wtxt.Segment, k wtxt.SegmentKey) error {
	g.held[k] = s.Digest
	return nil
}

// TestWriteHooks: a tree and a store with the optional hooks (FileWriter,
// PartsWriter, GenerationBlobs) get the same tree as plain ones; every
// segment is held; a second write whose store knows every segment by key
// puts nothing and writes the same tree.
func TestWriteHooks(t *testing.T) {
	ctx := t.Context()
	w := WTXT(7)
	for _, l := range layout.All() {
		t.Run(string(l.Name()), func(t *testing.T) {
			var plain layout.MapTree
			if err := l.Write(ctx, bytes.NewReader(w), int64(len(w)), &plain, layout.NewMemory(), opts); err != nil {
				t.Fatalf("plain Write: %v", err)
			}
			write := func(known map[wtxt.SegmentKey][32]byte, mem *layout.Memory) (*hookTree, *genBlobs) {
				t.Helper()
				tree := &hookTree{}
				blobs := &genBlobs{Memory: mem, known: known, held: map[wtxt.SegmentKey][32]byte{}}
				if err := l.Write(ctx, bytes.NewReader(w), int64(len(w)), tree, blobs, opts); err != nil {
					t.Fatalf("Write with hooks: %v", err)
				}
				if len(tree.Files) != len(plain.Files) {
					t.Fatalf("Write with hooks: %d files, plain %d", len(tree.Files), len(plain.Files))
				}
				for n, d := range plain.Files {
					if !bytes.Equal(tree.Files[n], d) {
						t.Fatalf("Write with hooks: %s differs", n)
					}
				}
				return tree, blobs
			}
			mem := layout.NewMemory()
			tree, blobs := write(nil, mem)
			switch l.Name() {
			case layout.Single:
				if tree.from != 1 {
					t.Errorf("WriteFrom called %d times", tree.from)
				}
			case layout.Split, layout.Segments:
				if tree.parts == 0 || tree.manifests != 1 {
					t.Errorf("WritePart %d, WriteManifest %d calls", tree.parts, tree.manifests)
				}
			}
			if l.Name() != layout.Segments && l.Name() != layout.Skeleton {
				return
			}
			if len(blobs.held) == 0 || blobs.puts == 0 {
				t.Fatalf("held %d segments, put %d", len(blobs.held), blobs.puts)
			}
			_, again := write(blobs.held, mem)
			if again.puts != 0 {
				t.Errorf("a store knowing every segment was put %d blobs", again.puts)
			}
			if len(again.held) != len(blobs.held) {
				t.Errorf("held %d segments, then %d", len(blobs.held), len(again.held))
			}
		})
	}
}
