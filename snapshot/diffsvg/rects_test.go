package diffsvg

import (
	"context"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// rectsOf returns the rectangle lines of strip i of p's SVG (those after
// its background).
func rectsOf(t *testing.T, p *Picture, i int) []string {
	t.Helper()
	var b strings.Builder
	p.strip(&b, i)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("strip %d: %q", i, b.String())
	}
	return lines[2:]
}

// Each rectangle's tooltip names its rows, the changed count and the
// statistics, worded by the strip's kind: exact or sampled, absolute or
// relative, with NaN/Inf.
func TestRectTooltips(t *testing.T) {
	bins := []Bin{
		{Index: 0, Row0: 0, Row1: 1, Changed: 1, MaxAbs: 0.5, MaxOld: 2},
		{Index: 3, Row0: 3, Row1: 5, Changed: 2, MaxAbs: 1e-7, MaxOld: 0, NonFinite: true},
	}
	y := strconv.Itoa(stripTop(0))
	for _, tc := range []struct {
		name    string
		scale   Scale
		sampled int64
		want    []string
	}{
		{"exact", ScaleAbs, 0, []string{
			`<rect x="10" y="` + y + `" width="10" height="14" fill="#67000d"><title>rows 0: 1 changed, max |Δ| 0.5</title></rect>`,
			`<rect x="40" y="` + y + `" width="10" height="14" fill="#e7298a"><title>rows 3–4: 2 changed, max |Δ| 1e-07, NaN/Inf involved</title></rect>`,
		}},
		{"sampled relative", ScaleRel, 91, []string{
			`<rect x="10" y="` + y + `" width="10" height="14" fill="#67000d"><title>rows 0: 1 in changed chunks, max |Δ| of a sample 0.5, relative 0.25</title></rect>`,
			`<rect x="40" y="` + y + `" width="10" height="14" fill="#e7298a"><title>rows 3–4: 2 in changed chunks, max |Δ| of a sample 1e-07, relative inf, NaN/Inf involved</title></rect>`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Picture{Width: 100, Scale: tc.scale, Arrays: 1, Strips: []Strip{{Name: "w", DType: "f32", Shape: []int64{10}, Change: snapshot.Modified,
				Rows: 10, Bins: 10, ChangedRows: 3, Sampled: tc.sampled, Changed: bins}}}
			got := rectsOf(t, p, 0)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("rectangles:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

var rectRE = regexp.MustCompile(`^<rect x="(\d+)" y="\d+" width="(\d+)" height="14" fill="(#[0-9a-f]{6})"><title>rows (\d+)(?:–(\d+))?: (\d+) changed, max \|Δ\| ([^<,]+)</title></rect>$`)

// A strip whose changed bins outnumber a sampled strip's bins (a dense
// change) is drawn in cells sampleBinWidth pixels wide, each with its
// largest change and the count of its rows; a sparse one bin by bin.
func TestDenseStripCells(t *testing.T) {
	const rows = 1024
	old := make([]byte, rows*4)
	dense, sparse := make([]byte, rows*4), make([]byte, rows*4)
	for r := range rows {
		// Every row moves, by an amount that varies from row to row.
		putF32(dense, r, float32(1+r%7)*1e-3)
		if r == 100 || r == 900 {
			putF32(sparse, r, 1)
		}
	}
	mk := func(data []byte) *snapshot.Snapshot {
		return &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("b", snapshot.F32, []int64{rows}, data)}}
	}
	for _, tc := range []struct {
		name  string
		data  []byte
		cells bool
	}{{"dense", dense, true}, {"sparse", sparse, false}} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Compute(context.Background(), mk(old), mk(tc.data), Options{})
			if err != nil {
				t.Fatal(err)
			}
			s := &p.Strips[0]
			if s.Bins != DefaultWidth {
				t.Fatalf("bins %d, want %d (one per pixel: exact)", s.Bins, DefaultWidth)
			}
			lines := rectsOf(t, p, 0)
			var changed, maxRow int64
			var maxAbs float64
			prevEnd := margin
			for _, l := range lines {
				m := rectRE.FindStringSubmatch(l)
				if m == nil {
					t.Fatalf("rectangle %q", l)
				}
				x, _ := strconv.Atoi(m[1])
				w, _ := strconv.Atoi(m[2])
				if x < prevEnd {
					t.Fatalf("rectangle at x=%d overlaps the one before (ends at %d)", x, prevEnd)
				}
				prevEnd = x + w
				if tc.cells && (x-margin)%sampleBinWidth != 0 {
					t.Fatalf("dense strip: rectangle at x=%d is not on a %d-pixel cell", x, sampleBinWidth)
				}
				n, _ := strconv.ParseInt(m[6], 10, 64)
				changed += n
				last, _ := strconv.ParseInt(m[4], 10, 64)
				if m[5] != "" {
					last, _ = strconv.ParseInt(m[5], 10, 64)
				}
				maxRow = max(maxRow, last)
				v, _ := strconv.ParseFloat(m[7], 64)
				maxAbs = max(maxAbs, v)
			}
			if changed != s.ChangedRows {
				t.Fatalf("the tooltips count %d changed rows, the strip %d", changed, s.ChangedRows)
			}
			if tc.cells {
				if len(lines) > DefaultWidth/sampleBinWidth {
					t.Fatalf("dense strip: %d rectangles, want at most %d", len(lines), DefaultWidth/sampleBinWidth)
				}
				if maxRow != rows-1 || math.Abs(maxAbs-7e-3) > 1e-6 {
					t.Fatalf("dense strip: last row %d, max |Δ| %g; want %d, 0.007", maxRow, maxAbs, rows-1)
				}
			} else if len(lines) != 2 {
				t.Fatalf("sparse strip: %d rectangles, want one per changed row:\n%s", len(lines), strings.Join(lines, "\n"))
			}
		})
	}
}

func putF32(b []byte, i int, f float32) {
	u := math.Float32bits(f)
	b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}
