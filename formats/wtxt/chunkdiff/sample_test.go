package chunkdiff

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/snapshot/diffsvg"
)

// TestPictureSampledDense: with SampleBytes, a densely changed array is
// drawn from a sample (every bin of changed chunks shown, its max |Δ| a
// lower bound of the exact one, the text saying so) while a sparsely
// changed one is still read whole, as without sampling.
func TestPictureSampledDense(t *testing.T) {
	ctx := context.Background()
	f32 := func(rows, cols int, f func(i int) float32) []byte {
		b := make([]byte, 4*rows*cols)
		for i := 0; i < rows*cols; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f(i)))
		}
		return b
	}
	mk := func(step float32) *snapshot.Snapshot {
		s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta()}
		s.Meta.TS = s.Meta.TS.AddDate(2026, 0, 0)
		s.Arrays = []*snapshot.Array{
			{Name: "dense.w", DType: snapshot.F32, Shape: []int64{2048, 64},
				Data: snapshot.Bytes(f32(2048, 64, func(i int) float32 { return float32(math.Sin(float64(i))) + step*float32(i%7+1)*1e-3 }))},
			{Name: "sparse.w", DType: snapshot.F32, Shape: []int64{64, 16},
				Data: snapshot.Bytes(f32(64, 16, func(i int) float32 {
					if i/16 == 5 {
						return step
					}
					return float32(i)
				}))},
		}
		return s
	}
	dir := t.TempDir()
	base, head := filepath.Join(dir, "1.wtxt"), filepath.Join(dir, "2.wtxt")
	for p, s := range map[string]*snapshot.Snapshot{base: mk(1), head: mk(2)} {
		if err := os.WriteFile(p, encode(t, s, wtxt.EncodeOptions{RowsPerChunk: 8}), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exact, err := Picture(ctx, base, head, 0, diffsvg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const sample = 16 << 10 // of the dense array's 512 KiB
	sampled, err := Picture(ctx, base, head, 0, diffsvg.Options{SampleBytes: sample})
	if err != nil {
		t.Fatal(err)
	}
	if len(exact.Strips) != 2 || len(sampled.Strips) != 2 {
		t.Fatalf("strips: %d exact, %d sampled", len(exact.Strips), len(sampled.Strips))
	}
	// Natural order: dense.w, then sparse.w.
	e, s := exact.Strips[0], sampled.Strips[0]
	if e.Sampled != 0 || s.Sampled == 0 || s.Sampled*4 > sample || s.Change != snapshot.Modified {
		t.Fatalf("dense strip: exact sampled %d, sampled %d elements (budget %d bytes), change %v", e.Sampled, s.Sampled, sample, s.Change)
	}
	// Bins 4 pixels wide, every one changed, its rows all counted.
	if s.ChangedRows != 2048 || e.ChangedRows != 2048 || e.Bins != 720 || s.Bins != 720/4 || len(s.Changed) != s.Bins {
		t.Fatalf("dense strip: sampled %d rows in %d of %d bins, exact %d rows in %d of %d bins", s.ChangedRows, len(s.Changed), s.Bins, e.ChangedRows, len(e.Changed), e.Bins)
	}
	for i, sb := range s.Changed {
		// The exact statistics of the same rows bound the sample's.
		var maxAbs, maxOld float64
		for _, eb := range e.Changed {
			if eb.Row0 >= sb.Row0 && eb.Row1 <= sb.Row1 {
				maxAbs, maxOld = max(maxAbs, eb.MaxAbs), max(maxOld, eb.MaxOld)
			}
		}
		if sb.Index != i || sb.Changed != sb.Row1-sb.Row0 || sb.MaxAbs <= 0 || sb.MaxAbs > maxAbs || sb.MaxOld > maxOld {
			t.Fatalf("bin %d: sampled %+v, exact max |Δ| %g (old %g) over its rows", i, sb, maxAbs, maxOld)
		}
	}
	if svg := string(sampled.SVG()); !strings.Contains(svg, "statistics of a sample of") || !strings.Contains(svg, "in changed chunks, max |Δ| of a sample") {
		t.Error("the sampled strip's text does not say it is a sample")
	}
	// With the indexes given (as the daemon's delta plan has them), the
	// same picture; an index of another size is refused.
	index := func(path string) *wtxt.Index {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		x, err := wtxt.ReadIndex(ctx, path, snapshot.Bytes(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	bx, hx := index(base), index(head)
	indexed, err := PictureIndexed(ctx, base, bx, head, hx, 0, diffsvg.Options{SampleBytes: sample})
	if err != nil {
		t.Fatal(err)
	}
	if string(indexed.SVG()) != string(sampled.SVG()) {
		t.Error("the picture from given indexes differs")
	}
	// Several arrays at once (the daemon's way): the same picture, the
	// files' descriptors shared by the arrays' sources.
	parallel, err := PictureIndexed(ctx, base, bx, head, hx, 0, diffsvg.Options{SampleBytes: sample, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	if string(parallel.SVG()) != string(sampled.SVG()) {
		t.Error("the picture drawn with 4 workers differs")
	}
	other := *hx
	other.Size++
	if _, err := PictureIndexed(ctx, base, bx, head, &other, 0, diffsvg.Options{}); err == nil || !strings.Contains(err.Error(), head) {
		t.Errorf("an index read at another size: %v", err)
	}
	// A sample of damaged lines: an error naming the file, array, chunk
	// and check (every base64 line of the dense array is damaged).
	hb, err := os.ReadFile(head)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range hx.Array("dense.w").Chunks {
		for k := int64(0); k < c.Lines; k++ {
			hb[c.Data+k*(wtxt.B64Width+3)] ^= 'A' ^ 'B'
		}
	}
	bad := filepath.Join(dir, "bad.wtxt")
	if err := os.WriteFile(bad, hb, 0o644); err != nil {
		t.Fatal(err)
	}
	var we *wtxt.Error
	for _, workers := range []int{1, 4} {
		if _, err := Picture(ctx, base, bad, 0, diffsvg.Options{SampleBytes: sample, Workers: workers}); !errors.As(err, &we) || we.File != bad || we.Array != "dense.w" || we.Check != wtxt.CheckParity || !strings.Contains(err.Error(), "sampled") {
			t.Fatalf("sampled damaged lines, %d workers: %v", workers, err)
		}
	}
	// The sparse array is read whole either way.
	if e, s := exact.Strips[1], sampled.Strips[1]; s.Sampled != 0 || s.ChangedRows != 1 || len(s.Changed) != 1 || s.Changed[0] != e.Changed[0] {
		t.Fatalf("sparse strip: sampled %+v, exact %+v", s, e)
	}
}
