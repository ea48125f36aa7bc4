// Package layouttest is the conformance suite of gitops/layout: every
// Layout over every Blobs store (memory, Git objects, an OCI registry)
// must write a WTXT and assemble it byte for byte, and fail clearly,
// naming where, on a missing blob, a corrupt piece or blob, a size budget
// exceeded and hostile names.
package layouttest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/internal/gittest"
)

// Store is a Blobs store under test.
type Store struct {
	Name string
	// New returns an empty store (or one the test may share: every
	// blob is named by its content).
	New func(t testing.TB) layout.Blobs
}

// WTXT returns the suite's generation: several arrays, chunks from a few
// bytes to many segments, so every layout cuts it into several pieces.
func WTXT(seed int) []byte {
	w, _ := gittest.WTXT(uint64(seed), "", []gittest.Array{
		{Name: "a.weight", Data: gittest.Pseudo(seed, 200_000), Chunk: 4096},
		{Name: "b/bias", Data: gittest.Pseudo(seed+1, 1000)},
		{Name: "c.large", Data: gittest.Pseudo(seed+2, 100_000), Chunk: 70_000},
		{Name: "d:small", Data: gittest.Pseudo(seed+3, 57*3), Chunk: 57},
	})
	return w
}

// opts cuts WTXT into several parts and segments.
var opts = layout.WriteOptions{PartLimit: layout.MinPartLimit, SegmentSize: 16 << 10}

// Run runs the store's own checks and then every layout over it.
func Run(t *testing.T, s Store) {
	t.Run("blobs", func(t *testing.T) { runBlobs(t, s) })
	for _, l := range layout.All() {
		t.Run(string(l.Name()), func(t *testing.T) { runLayout(t, s, l) })
	}
}

// runBlobs: Put, Has, Get round trip; an unknown digest is
// wtxt.ErrBlobNotFound; a wrong size or digest is refused.
func runBlobs(t *testing.T, s Store) {
	ctx := t.Context()
	b := s.New(t)
	data := gittest.Pseudo(99, 5000)
	d := sha256.Sum256(data)
	if err := b.Put(ctx, d, data); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if ok, err := b.Has(ctx, d); !ok || err != nil {
		t.Fatalf("Has after Put: %v, %v", ok, err)
	}
	if got := get(t, b, d, int64(len(data))); !bytes.Equal(got, data) {
		t.Fatal("Get returned other bytes")
	}
	unknown := sha256.Sum256([]byte("never put"))
	if ok, err := b.Has(ctx, unknown); ok || err != nil {
		t.Errorf("Has of an unknown digest: %v, %v", ok, err)
	}
	if rc, err := b.Get(ctx, unknown, 9); !errors.Is(err, wtxt.ErrBlobNotFound) {
		closeIf(rc)
		t.Errorf("Get of an unknown digest: %v, want wtxt.ErrBlobNotFound", err)
	}
	// A wrong size is refused (before reading, or at the latest when the
	// read comes short).
	if rc, err := b.Get(ctx, d, int64(len(data))+1); err == nil {
		n, rerr := io.Copy(io.Discard, rc)
		rc.Close()
		if rerr == nil && n == int64(len(data))+1 {
			t.Errorf("Get with a wrong size served %d bytes", n)
		}
	}
	if err := b.Put(ctx, unknown, data); err == nil {
		t.Error("Put under another digest: no error")
	}
}

func get(t *testing.T, b layout.Blobs, d [32]byte, size int64) []byte {
	t.Helper()
	rc, err := b.Get(t.Context(), d, size)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get: read: %v", err)
	}
	return got
}

func closeIf(rc io.ReadCloser) {
	if rc != nil {
		rc.Close()
	}
}

// written is one layout's write of WTXT(seed).
type written struct {
	wtxt  []byte
	tree  fstest.MapFS
	blobs *recording
}

func write(t *testing.T, s Store, l layout.Layout, seed int) *written {
	t.Helper()
	w := WTXT(seed)
	var tree layout.MapTree
	blobs := &recording{Blobs: s.New(t)}
	if err := l.Write(t.Context(), bytes.NewReader(w), int64(len(w)), &tree, blobs, opts); err != nil {
		t.Fatalf("Write: %v", err)
	}
	m := fstest.MapFS{}
	for n, d := range tree.Files {
		m[n] = &fstest.MapFile{Data: d}
	}
	return &written{wtxt: w, tree: m, blobs: blobs}
}

func runLayout(t *testing.T, s Store, l layout.Layout) {
	ctx := context.Background()
	t.Run("roundtrip", func(t *testing.T) {
		g := write(t, s, l, 1)
		if err := l.Check(ctx, g.tree); err != nil {
			t.Fatalf("Check: %v", err)
		}
		var out bytes.Buffer
		if err := l.Assemble(ctx, g.tree, g.blobs, &out, layout.Budget{}); err != nil {
			t.Fatalf("Assemble: %v", err)
		}
		if !bytes.Equal(out.Bytes(), g.wtxt) {
			t.Fatalf("Assemble gave %d bytes, not the %d written", out.Len(), len(g.wtxt))
		}
		var names []string
		for n := range g.tree {
			names = append(names, n)
		}
		if got, err := layout.Detect(func(n string) bool { return hasTop(names, n) }); err != nil || got != l.Name() {
			t.Errorf("Detect of the written tree: %q, %v", got, err)
		}
		if !l.Holds(func(n string) bool { return hasTop(names, n) }) {
			t.Error("Holds of the written tree: false")
		}
		// Written twice: the tree is the same (deterministic) and the
		// blobs already stored are not put again.
		again := &layout.MapTree{}
		before := g.blobs.puts()
		if err := l.Write(ctx, bytes.NewReader(g.wtxt), int64(len(g.wtxt)), again, g.blobs, opts); err != nil {
			t.Fatalf("second Write: %v", err)
		}
		for n, d := range again.Files {
			if !bytes.Equal(d, g.tree[n].Data) {
				t.Errorf("second Write: %s differs", n)
			}
		}
		if g.blobs.puts() != before {
			t.Errorf("second Write put %d blobs the store had", g.blobs.puts()-before)
		}
	})
	t.Run("missing-blob", func(t *testing.T) {
		g := write(t, s, l, 2)
		d, ok := g.blobs.first()
		if !ok {
			t.Skipf("%s keeps no blobs", l.Name())
		}
		var out bytes.Buffer
		err := l.Assemble(ctx, g.tree, hiding{g.blobs, d}, &out, layout.Budget{})
		wantWhere(t, err, hexOf(d))
		if !errors.Is(err, wtxt.ErrBlobNotFound) {
			t.Errorf("err %v does not wrap wtxt.ErrBlobNotFound", err)
		}
	})
	t.Run("corrupt-blob", func(t *testing.T) {
		g := write(t, s, l, 3)
		d, ok := g.blobs.first()
		if !ok {
			t.Skipf("%s keeps no blobs", l.Name())
		}
		var out bytes.Buffer
		err := l.Assemble(ctx, g.tree, flipping{g.blobs, d}, &out, layout.Budget{})
		wantWhere(t, err, hexOf(d))
	})
	t.Run("corrupt-piece", func(t *testing.T) {
		g := write(t, s, l, 4)
		if l.Name() == layout.Single {
			// A single file has no record of its bytes beside it: its
			// own hashes are checked by whoever decodes or verifies the
			// WTXT (generation.txt's wtxt_sha256, verify-repo).
			t.Skip("the single layout stores no hashes of its own")
		}
		victim := piece(g.tree)
		d := g.tree[victim].Data
		i := bytes.LastIndexByte(d[:len(d)-1], '\n') + 1 // a byte of the last line
		d[i] ^= 0x01
		var out bytes.Buffer
		err := l.Assemble(ctx, g.tree, g.blobs, &out, layout.Budget{})
		wantWhere(t, err, path.Base(victim))
		wantWhere(t, err, path.Dir(victim))
	})
	t.Run("budget", func(t *testing.T) {
		g := write(t, s, l, 5)
		var out bytes.Buffer
		err := l.Assemble(ctx, g.tree, g.blobs, &out, layout.Budget{MaxBytes: int64(len(g.wtxt)) / 2})
		if !errors.Is(err, layout.ErrBudget) {
			t.Fatalf("Assemble over budget: %v, want layout.ErrBudget", err)
		}
		if int64(out.Len()) > int64(len(g.wtxt))/2 {
			t.Errorf("%d bytes written past a budget of %d", out.Len(), len(g.wtxt)/2)
		}
		if err := l.Assemble(ctx, g.tree, g.blobs, io.Discard, layout.Budget{MaxBytes: int64(len(g.wtxt))}); err != nil {
			t.Errorf("Assemble at exactly the budget: %v", err)
		}
	})
	t.Run("hostile-names", func(t *testing.T) {
		var tree layout.MapTree
		for _, n := range []string{"../x", "/abs", "a/../b", "a\x00b", `a\b`, "", strings.Repeat("a/", layout.MaxPathLen)} {
			if err := tree.WriteFile(n, []byte("x")); !errors.Is(err, layout.ErrName) {
				t.Errorf("WriteFile(%q): %v, want layout.ErrName", n, err)
			}
		}
		dir := manifestDir(l)
		if dir == "" {
			return
		}
		for _, n := range []string{"../x.part", "/abs.part", "a\x00b.part", strings.Repeat("a", 300) + ".part", "sub/x.part"} {
			g := write(t, s, l, 6)
			m := layout.Manifest{Parts: []layout.Part{{Name: n, Size: 1, SHA256: strings.Repeat("0", 64)}}, Bytes: 1, SHA256: strings.Repeat("0", 64)}
			g.tree[path.Join(dir, layout.ManifestName)] = &fstest.MapFile{Data: m.Encode()}
			err := l.Assemble(ctx, g.tree, g.blobs, io.Discard, layout.Budget{})
			wantWhere(t, err, layout.ManifestName)
			if err != nil && strings.Contains(err.Error(), "\x00") {
				t.Errorf("the error echoes a NUL: %q", err)
			}
		}
	})
}

// manifestDir is the directory whose MANIFEST names l's pieces ("": none).
func manifestDir(l layout.Layout) string {
	switch l.Name() {
	case layout.Split:
		return layout.DirWTXTParts
	case layout.Segments:
		return layout.DirWTXTSegs
	}
	return ""
}

// piece returns the tree file a corrupt-piece case damages: the last
// part or skeleton piece in name order, or the skeleton file.
func piece(tree fstest.MapFS) string {
	var names []string
	for n := range tree {
		if path.Base(n) != layout.ManifestName {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names[len(names)-1]
}

// wantWhere fails unless err is set and names where (a file or blob).
func wantWhere(t *testing.T, err error, where string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one naming %s", where)
	}
	if !strings.Contains(err.Error(), where) {
		t.Errorf("error %q does not name %s", err, where)
	}
}

func hexOf(d [32]byte) string { return fmt.Sprintf("%x", d[:]) }

func hasTop(names []string, n string) bool {
	for _, x := range names {
		if x == n || strings.HasPrefix(x, n+"/") {
			return true
		}
	}
	return false
}

// recording is a store that notes the blobs put through it.
type recording struct {
	layout.Blobs
	mu  sync.Mutex
	put [][32]byte
}

func (r *recording) Put(ctx context.Context, d [32]byte, data []byte) error {
	r.mu.Lock()
	r.put = append(r.put, d)
	r.mu.Unlock()
	return r.Blobs.Put(ctx, d, data)
}

func (r *recording) puts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.put)
}

func (r *recording) first() ([32]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.put) == 0 {
		return [32]byte{}, false
	}
	return r.put[0], true
}

// hiding is a store view without blob d.
type hiding struct {
	layout.Blobs
	d [32]byte
}

func (h hiding) Has(ctx context.Context, d [32]byte) (bool, error) {
	if d == h.d {
		return false, nil
	}
	return h.Blobs.Has(ctx, d)
}

func (h hiding) Get(ctx context.Context, d [32]byte, size int64) (io.ReadCloser, error) {
	if d == h.d {
		return nil, fmt.Errorf("blob %x: %w", d[:4], wtxt.ErrBlobNotFound)
	}
	return h.Blobs.Get(ctx, d, size)
}

// flipping is a store view whose blob d reads with one bit flipped.
type flipping struct {
	layout.Blobs
	d [32]byte
}

func (f flipping) Get(ctx context.Context, d [32]byte, size int64) (io.ReadCloser, error) {
	rc, err := f.Blobs.Get(ctx, d, size)
	if err != nil || d != f.d {
		return rc, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	b[len(b)/2] ^= 0x10
	return io.NopCloser(bytes.NewReader(b)), nil
}

var _ fs.FS = fstest.MapFS{}
