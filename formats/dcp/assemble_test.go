package dcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/torch"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/dirfs"
	"github.com/snapd-ml/snapd/snapshot"
)

// fill returns n pseudo-random bytes (seeded).
func fill(seed uint64, n int64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// stateDict is a small job state: tensors of several dtypes and ranks, a
// scalar, an empty tensor and a non-tensor leaf.
func stateDict(t testing.TB) *snapshot.Snapshot {
	t.Helper()
	arr := func(name string, dt snapshot.DType, shape ...int64) *snapshot.Array {
		n, _ := snapshot.NumElements(shape)
		return &snapshot.Array{Name: name, DType: dt, Shape: shape, Data: snapshot.Bytes(fill(uint64(len(name)), n*int64(dt.Size())))}
	}
	// torch.save bytes of the int 42, as DCP writes a non-tensor leaf.
	leaf := torchSaveOf(t, "int 42")
	return &snapshot.Snapshot{Meta: snapshot.DefaultMeta(), Arrays: []*snapshot.Array{
		arr("model.emb", snapshot.F32, 12, 8),
		arr("model.w", snapshot.BF16, 10, 6),
		arr("model.cube", snapshot.I64, 4, 6, 5),
		arr("model.bias", snapshot.F16, 7),
		arr("optim.state.0.step", snapshot.F32),
		arr("model.empty", snapshot.F32, 0, 3),
		{Name: "step", DType: snapshot.U8, Shape: []int64{int64(len(leaf))}, Data: snapshot.Bytes(leaf), Attrs: map[string]string{AttrKind: kindBytes}},
	}}
}

// torchSaveOf is the torch codec's archive of a Python int (what the
// torch codec writes for the tree {"int":"42"}).
func torchSaveOf(t testing.TB, what string) []byte {
	t.Helper()
	var buf bytes.Buffer
	s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta(), Attrs: map[string]string{"torch.tree": `{"int":"42"}`}}
	if err := torch.New().Encode(context.Background(), &buf, s, formats.EncodeOptions{}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return buf.Bytes()
}

// sliceBox copies box b of a C-order tensor of shape into a new buffer.
func sliceBox(full []byte, shape []int64, esize int64, b box) []byte {
	n := volume(b.size)
	out := make([]byte, 0, n*esize)
	if n == 0 {
		return out
	}
	rank := len(shape)
	if rank == 0 {
		return append(out, full...)
	}
	idx := append([]int64(nil), b.off...)
	row := b.size[rank-1] * esize
	for {
		lin := int64(0)
		for d := 0; d < rank; d++ {
			lin = lin*shape[d] + idx[d]
		}
		out = append(out, full[lin*esize:lin*esize+row]...)
		d := rank - 2
		for ; d >= 0; d-- {
			idx[d]++
			if idx[d] < b.off[d]+b.size[d] {
				break
			}
			idx[d] = b.off[d]
		}
		if d < 0 {
			return out
		}
	}
}

// layoutFunc splits a tensor into chunks, each with the rank that writes
// it (several ranks may write the same chunk: only the first is kept,
// as torch's dedup does).
type layoutFunc func(shape []int64) []box

// split cuts dimension dim into parts (uneven when it does not divide).
func split(dim, parts int) layoutFunc {
	return func(shape []int64) []box {
		if len(shape) <= dim {
			return []box{{off: make([]int64, len(shape)), size: shape}}
		}
		var out []box
		n := shape[dim]
		per := (n + int64(parts) - 1) / int64(parts)
		for o := int64(0); o < n; o += per {
			off := make([]int64, len(shape))
			size := append([]int64(nil), shape...)
			off[dim], size[dim] = o, min(per, n-o)
			out = append(out, box{off: off, size: size})
		}
		if len(out) == 0 {
			out = []box{{off: make([]int64, len(shape)), size: shape}}
		}
		return out
	}
}

// mesh cuts dimensions 0 and 1 (a 2-D device mesh).
func mesh(p0, p1 int) layoutFunc {
	return func(shape []int64) []box {
		var out []box
		for _, a := range split(0, p0)(shape) {
			for _, b := range split(1, p1)(a.size) {
				off := append([]int64(nil), a.off...)
				for d := range off {
					off[d] += b.off[d]
				}
				out = append(out, box{off: off, size: b.size})
			}
		}
		return out
	}
}

// writeLayout writes s as a DCP directory whose tensors are cut by lay;
// chunk i goes to rank i%ranks's file __<rank>_0.distcp.
func writeLayout(t testing.TB, dir string, s *snapshot.Snapshot, lay layoutFunc, ranks int) *Metadata {
	t.Helper()
	items, planner, err := plan(s, formats.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.kind != Tensor {
			continue
		}
		full, err := snapshot.ReadAll(it.data)
		if err != nil {
			t.Fatal(err)
		}
		it.chunks = nil
		for i, b := range lay(it.size) {
			it.chunks = append(it.chunks, outChunk{box: b, file: fmt.Sprintf("__%d_0%s", i%ranks, Suffix),
				data: snapshot.Bytes(sliceBox(full, it.size, int64(it.dtype.Size()), b))})
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	md, err := writeItems(context.Background(), dir, items, planner, WriteOptions{Torch: torch.New()})
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// openMD reads dir with the metadata md (bypassing .metadata).
func openMD(t testing.TB, dir string, md *Metadata) (*Dir, error) {
	t.Helper()
	r, err := dirfs.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return assemble(context.Background(), r, md, DefaultLimits, Options{Torch: torch.New()})
}

func toWTXT(t testing.TB, s *snapshot.Snapshot) []byte {
	t.Helper()
	c := *s
	c.Meta = snapshot.DefaultMeta()
	c.Meta.TS = time.Unix(1767225600, 0).UTC()
	var buf bytes.Buffer
	if err := wtxt.New().Encode(context.Background(), &buf, &c, formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestShardingInvariance: one state dict written with different world
// sizes and shardings (dim 0, dim 1, uneven, a 2-D mesh, the one-chunk
// layout of Write) reads back as the same snapshot, byte for byte in
// WTXT, equal to the state dict.
func TestShardingInvariance(t *testing.T) {
	s := stateDict(t)
	var want []byte
	layouts := []struct {
		name  string
		lay   layoutFunc
		ranks int
	}{
		{"whole", split(0, 1), 1},
		{"dim0-2ranks", split(0, 2), 2},
		{"dim0-uneven-3ranks", split(0, 3), 3},
		{"dim1-4ranks", split(1, 4), 4},
		{"dim1-uneven-onefile", split(1, 5), 1},
		{"mesh-2x2", mesh(2, 2), 4},
		{"mesh-3x2-uneven", mesh(3, 2), 6},
		{"dim2", split(2, 2), 2},
	}
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			dir := t.TempDir()
			md := writeLayout(t, dir, s, l.lay, l.ranks)
			d, err := openMD(t, dir, md)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if len(d.Snapshot.Arrays) != len(s.Arrays) {
				t.Fatalf("%d arrays, want %d", len(d.Snapshot.Arrays), len(s.Arrays))
			}
			for _, a := range s.Sorted() {
				b := d.Snapshot.Array(a.Name)
				x, _ := snapshot.ReadAll(a.Data)
				y, err := snapshot.ReadAll(b.Data)
				if !bytes.Equal(x, y) || b.DType != a.DType || fmt.Sprint(b.Shape) != fmt.Sprint(a.Shape) {
					t.Errorf("array %s differs (%v)", a.Name, err)
				}
			}
			if v := d.Snapshot.Array("step").Attrs[AttrValue]; v != `{"int":"42"}` {
				t.Errorf("step: %s = %q", AttrValue, v)
			}
			got := toWTXT(t, d.Snapshot)
			if want == nil {
				want = got
			} else if !bytes.Equal(got, want) {
				t.Fatal("WTXT differs from that of the one-chunk layout")
			}
		})
	}
}

// TestGatherReads: reads at every offset and length agree with the
// whole tensor (runs that start and end inside elements and chunks).
func TestGatherReads(t *testing.T) {
	shape := []int64{5, 7, 3}
	full := fill(3, 5*7*3*2)
	for _, lay := range []layoutFunc{split(1, 3), mesh(2, 3), split(2, 2), split(0, 5)} {
		boxes := lay(shape)
		tl, err := planTiling(shape, boxes, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]snapshot.Source, len(boxes))
		for i, b := range boxes {
			data[i] = snapshot.Bytes(sliceBox(full, shape, 2, b))
		}
		g, err := newGather(tl, 2, data)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(full); off += 3 {
			for _, n := range []int{1, 2, 5, 17, 64, len(full)} {
				p := make([]byte, n)
				k, err := g.ReadAt(p, int64(off))
				end := min(off+n, len(full))
				if k != end-off || !bytes.Equal(p[:k], full[off:end]) {
					t.Fatalf("ReadAt(%d, %d) = %d, %v: wrong bytes", n, off, k, err)
				}
				if end < off+n && err == nil {
					t.Fatalf("short read without EOF")
				}
			}
		}
	}
}

// TestTilingRefused: overlapping chunks, holes, chunks beyond the tensor
// and rank mismatches are located errors of class ErrCorrupt.
func TestTilingRefused(t *testing.T) {
	shape := []int64{4, 4}
	b := func(o0, o1, s0, s1 int64) box { return box{off: []int64{o0, o1}, size: []int64{s0, s1}} }
	for _, tc := range []struct {
		name  string
		boxes []box
		want  string
	}{
		{"overlap", []box{b(0, 0, 3, 4), b(2, 0, 2, 4)}, "chunk 1 overlaps chunk 0"},
		{"hole", []box{b(0, 0, 2, 4), b(3, 0, 1, 4)}, "no chunk holds the element at [2 0]"},
		{"exceeds", []box{b(0, 0, 4, 4), b(4, 0, 1, 4)}, "chunk 1: dimension 0 spans [4, 4+1)"},
		{"exceeds-size", []box{b(0, 0, 5, 4)}, "beyond the tensor's 4"},
		{"rank", []box{{off: []int64{0}, size: []int64{4}}}, "offsets of 1 and sizes of 1 dimensions for a tensor of 2"},
		{"negative", []box{b(-1, 0, 4, 4)}, "negative offset or size"},
		{"partial-dup", []box{b(0, 0, 4, 4), b(0, 0, 2, 4)}, "overlaps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := planTiling(shape, tc.boxes, 1<<20, nil)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrCorrupt with %q", err, tc.want)
			}
		})
	}
	// The same chunk listed twice is one chunk.
	if _, err := planTiling(shape, []box{b(0, 0, 4, 4), b(0, 0, 4, 4)}, 1<<20, nil); err != nil {
		t.Fatal(err)
	}
	// An irregular layout that would need a huge grid is refused.
	var many []box
	for i := int64(0); i < 64; i++ {
		many = append(many, box{off: []int64{i, 0}, size: []int64{1, 64 - i}}, box{off: []int64{i, 64 - i}, size: []int64{1, i}})
	}
	if _, err := planTiling([]int64{64, 64}, many, 100, nil); !errors.Is(err, ErrLimit) {
		t.Fatalf("irregular layout: %v, want ErrLimit", err)
	}
}
