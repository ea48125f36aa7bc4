package wtxt

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestReadSkeletonIndex: the skeleton index of every skeleton input has
// the WTXT index's arrays and chunks (geometry, hashes), and its line
// numbers point at the same arr and ch lines in the skeleton as the WTXT
// index's do in the WTXT.
func TestReadSkeletonIndex(t *testing.T) {
	for name, in := range skeletonInputs(t) {
		t.Run(name, func(t *testing.T) {
			want, err := ReadIndex(context.Background(), name, snapshot.Bytes(in), int64(len(in)))
			if err != nil {
				t.Skipf("not indexable as WTXT: %v", err)
			}
			skel, _, _ := splitBytes(t, in, 100)
			got, err := ReadSkeletonIndex(context.Background(), name+".skel", bytes.NewReader(skel), IndexOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wl, sl := strings.Split(string(in), "\n"), strings.Split(string(skel), "\n")
			if len(got.Arrays) != len(want.Arrays) || got.Size != int64(len(skel)) || got.Audit != want.Audit || got.Header.Gen != want.Header.Gen {
				t.Fatalf("index: %d arrays, size %d; want %d arrays, size %d", len(got.Arrays), got.Size, len(want.Arrays), len(skel))
			}
			for i, a := range got.Arrays {
				w := want.Arrays[i]
				if a.Name != w.Name || !a.SameGeometry(&w) || len(a.Chunks) != len(w.Chunks) || sl[a.Line-1] != wl[w.Line-1] {
					t.Fatalf("array %d: %+v\nwant %+v", i, a, w)
				}
				for j, c := range a.Chunks {
					wc := w.Chunks[j]
					if c.IX != wc.IX || c.Off != wc.Off || c.Len != wc.Len || c.SHA256 != wc.SHA256 || c.CRC32C != wc.CRC32C || sl[c.Line-1] != wl[wc.Line-1] {
						t.Fatalf("array %s chunk %d: line %d %q, want line %d %q", a.Name, j, c.Line, sl[c.Line-1], wc.Line, wl[wc.Line-1])
					}
				}
			}
		})
	}
}

// TestSkeletonIndexSegs: the skeleton index's seg entries are the seg
// lines Split wrote, at the segments' first chunks and in their arrays;
// with NoChunks the index is the same without chunks (and needs no
// memory per chunk).
func TestSkeletonIndexSegs(t *testing.T) {
	for name, in := range skeletonInputs(t) {
		t.Run(name, func(t *testing.T) {
			skel, _, segs := splitBytes(t, in, 100)
			x, err := ReadSkeletonIndex(context.Background(), name, bytes.NewReader(skel), IndexOptions{})
			if err != nil {
				t.Skipf("not indexable: %v", err)
			}
			sl := strings.Split(string(skel), "\n")
			if len(x.Segs) != len(segs) {
				t.Fatalf("%d seg entries, Split wrote %d segments", len(x.Segs), len(segs))
			}
			for i, sg := range x.Segs {
				line := sl[sg.Line-1]
				if !strings.HasPrefix(line, "seg ") || !strings.HasPrefix(string(skel[sg.Start:]), line+"\n") ||
					x.Arrays[sg.Array].Name != segs[i].Array || sg.Chunk != segs[i].FirstChunk {
					t.Fatalf("seg %d: %+v (line %q), segment %+v", i, sg, line, segs[i])
				}
			}
			n, err := ReadSkeletonIndex(context.Background(), name, bytes.NewReader(skel), IndexOptions{NoChunks: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(n.Arrays) != len(x.Arrays) || len(n.Segs) != len(x.Segs) || n.TrailerStart != x.TrailerStart || n.Size != x.Size {
				t.Fatalf("NoChunks index differs: %d arrays, trailer %d", len(n.Arrays), n.TrailerStart)
			}
			for i, a := range n.Arrays {
				if len(a.Chunks) != 0 || a.Start != x.Arrays[i].Start || a.End != x.Arrays[i].End {
					t.Fatalf("NoChunks array %d: %+v", i, a)
				}
			}
			// The limit counts arrays and seg lines, not chunks: the exact
			// budget of those is enough with NoChunks and too little with
			// the chunks.
			budget, chunks := int64(len(x.Segs))*int64(unsafe.Sizeof(IndexSeg{})), 0
			for _, a := range x.Arrays {
				budget += int64(unsafe.Sizeof(IndexArray{})+unsafe.Sizeof(arrHead{})) + 2*int64(len(sl[a.Line-1]))
				chunks += len(a.Chunks)
			}
			if _, err := ReadSkeletonIndex(context.Background(), name, bytes.NewReader(skel), IndexOptions{NoChunks: true, MaxBytes: budget}); err != nil {
				t.Fatalf("NoChunks within %d bytes: %v", budget, err)
			}
			if _, err := ReadSkeletonIndex(context.Background(), name, bytes.NewReader(skel), IndexOptions{MaxBytes: budget}); chunks > 0 && !errors.Is(err, formats.ErrLimit) {
				t.Fatalf("%d chunks within %d bytes: %v", chunks, budget, err)
			}
		})
	}
}

// TestReadSkeletonIndexBadInput: a WTXT (with base64 lines), a damaged ch
// line, trailing bytes and an index over its budget are refused with
// located errors that do not echo the input.
func TestReadSkeletonIndexBadInput(t *testing.T) {
	in := skeletonInputs(t)["generated"]
	skel, _, _ := splitBytes(t, in, 100)
	ctx := context.Background()
	lines := strings.Split(string(skel), "\n")
	var chLine int
	for i, l := range lines {
		if strings.HasPrefix(l, "ch ") {
			chLine = i
			break
		}
	}
	badCh := append([]string(nil), lines...)
	badCh[chLine] = strings.Replace(badCh[chLine], "off=", "off=9", 1)
	for _, tc := range []struct {
		name  string
		in    []byte
		check Check
		line  int
	}{
		{"a WTXT", in, CheckSkeleton, 1},
		{"ch line off", []byte(strings.Join(badCh, "\n")), CheckGrammar, chLine + 1},
		{"after endwtxt", append(bytes.Clone(skel), "x\n"...), CheckSkeleton, len(lines)},
		{"truncated", skel[:len(skel)/2], "", 0},
	} {
		_, err := ReadSkeletonIndex(ctx, "s.skel", bytes.NewReader(tc.in), IndexOptions{})
		var we *Error
		if !errors.As(err, &we) || tc.check != "" && (we.Check != tc.check || we.Line != tc.line) || we.File != "s.skel" {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	// NoChunks checks the ch lines' places, not their fields.
	if _, err := ReadSkeletonIndex(ctx, "s.skel", bytes.NewReader([]byte(strings.Join(badCh, "\n"))), IndexOptions{NoChunks: true}); err != nil {
		t.Fatalf("NoChunks, ch line off: %v", err)
	}
	noCh := append([]string(nil), lines...)
	noCh[chLine] = "x" + noCh[chLine]
	var we *Error
	if _, err := ReadSkeletonIndex(ctx, "s.skel", bytes.NewReader([]byte(strings.Join(noCh, "\n"))), IndexOptions{NoChunks: true}); !errors.As(err, &we) ||
		we.Check != CheckGrammar || we.Line != chLine+1 || strings.Contains(err.Error(), "xch") {
		t.Fatalf("NoChunks, no ch line: %v", err)
	}
	if _, err := ReadSkeletonIndex(ctx, "s.skel", bytes.NewReader(skel), IndexOptions{MaxBytes: 100}); !errors.Is(err, formats.ErrLimit) {
		t.Fatalf("over budget: %v", err)
	}
}

func FuzzReadSkeletonIndex(f *testing.F) {
	for _, b := range testutil.Seeds(f, "testdata/golden-*.wtxt") {
		if len(b) < 16<<10 {
			skel, _, _ := splitBytes(f, b, 64)
			f.Add(skel)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// NoChunks checks less (the ch lines' places): it accepts at least
		// what the full index accepts, with the same arrays, segs and
		// trailer.
		nx, nerr := ReadSkeletonIndex(context.Background(), "fuzz", bytes.NewReader(b), IndexOptions{MaxBytes: 1 << 20, NoChunks: true})
		x, err := ReadSkeletonIndex(context.Background(), "fuzz", bytes.NewReader(b), IndexOptions{MaxBytes: 1 << 20})
		if err != nil {
			return
		}
		if nerr != nil || len(nx.Arrays) != len(x.Arrays) || len(nx.Segs) != len(x.Segs) || nx.TrailerStart != x.TrailerStart || nx.Size != x.Size {
			t.Fatalf("NoChunks: %v", nerr)
		}
		line := 0
		for _, a := range x.Arrays {
			if a.Line <= line {
				t.Fatalf("array %q at line %d out of order", a.Name, a.Line)
			}
			line = a.Line
			for _, c := range a.Chunks {
				if c.Line <= line {
					t.Fatalf("array %q chunk %d at line %d out of order", a.Name, c.IX, c.Line)
				}
				line = c.Line
			}
		}
		if x.Size != int64(len(b)) {
			t.Fatalf("size %d, input %d", x.Size, len(b))
		}
	})
}
