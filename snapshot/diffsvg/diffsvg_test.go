package diffsvg

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/xml"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

func f32s(rows, cols int, f func(r, c int) float32) []byte {
	b := make([]byte, rows*cols*4)
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			binary.LittleEndian.PutUint32(b[(r*cols+c)*4:], math.Float32bits(f(r, c)))
		}
	}
	return b
}

func arr(name string, dt snapshot.DType, shape []int64, data []byte) *snapshot.Array {
	return &snapshot.Array{Name: name, DType: dt, Shape: shape, Data: snapshot.Bytes(data)}
}

// fixture is a base and a head with every kind of change; hostileName
// is unchanged.
const hostileName = `a<b>&"c'` + "\x01\xff"

func fixture() (old, new *snapshot.Snapshot) {
	base := func(r, c int) float32 { return float32(r*10 + c) }
	small := f32s(100, 8, func(r, c int) float32 {
		switch {
		case r >= 10 && r < 20:
			return base(r, c) + 0.01
		case r == 70 && c == 3:
			return base(r, c) + 500
		}
		return base(r, c)
	})
	binned := f32s(5000, 4, func(r, c int) float32 {
		if r >= 2500 && r < 2510 {
			return -1
		}
		return base(r, c)
	})
	nan := f32s(50, 2, func(r, c int) float32 {
		if r == 5 {
			return float32(math.NaN())
		}
		return base(r, c)
	})
	old = &snapshot.Snapshot{Arrays: []*snapshot.Array{
		arr("layers.10.w", snapshot.F32, []int64{100, 8}, f32s(100, 8, base)),
		arr("layers.2.w", snapshot.F32, []int64{5000, 4}, f32s(5000, 4, base)),
		arr("nan", snapshot.F32, []int64{50, 2}, f32s(50, 2, base)),
		arr("empty", snapshot.I32, []int64{0, 3}, nil),
		arr("gone", snapshot.U8, []int64{4}, []byte{1, 2, 3, 4}),
		arr(hostileName, snapshot.U8, []int64{10}, []byte("0123456789")),
	}}
	new = &snapshot.Snapshot{Arrays: []*snapshot.Array{
		arr("layers.10.w", snapshot.F32, []int64{100, 8}, small),
		arr("layers.2.w", snapshot.F32, []int64{5000, 4}, binned),
		arr("nan", snapshot.F32, []int64{50, 2}, nan),
		arr("empty", snapshot.I32, []int64{0, 3}, nil),
		arr("new", snapshot.F32, []int64{2, 2}, make([]byte, 16)),
		arr(hostileName, snapshot.U8, []int64{10}, []byte("0123456789")),
	}}
	return old, new
}

func compute(t testing.TB, opts Options) *Picture {
	t.Helper()
	old, new := fixture()
	p, err := Compute(context.Background(), old, new, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func stripNamed(t testing.TB, p *Picture, name string) (int, *Strip) {
	t.Helper()
	for i := range p.Strips {
		if p.Strips[i].Name == name {
			return i, &p.Strips[i]
		}
	}
	t.Fatalf("no strip %q", name)
	return 0, nil
}

func TestComputeBins(t *testing.T) {
	p := compute(t, Options{Title: "gen 1 → 2"})
	var order []string
	for _, s := range p.Strips {
		order = append(order, s.Name)
	}
	// Natural order: layers.2 before layers.10.
	if got := fmt.Sprint(order); got != fmt.Sprint([]string{hostileName, "empty", "gone", "layers.2.w", "layers.10.w", "nan", "new"}) {
		t.Fatalf("order %q", order)
	}
	_, s := stripNamed(t, p, "layers.10.w")
	if s.Change != snapshot.Modified || s.Bins != 100 || s.ChangedRows != 11 || len(s.Changed) != 11 {
		t.Fatalf("layers.10.w: %+v", s)
	}
	if b := s.Changed[10]; b.Index != 70 || b.Row0 != 70 || b.Row1 != 71 || b.MaxAbs != 500 {
		t.Fatalf("row 70 bin: %+v", b)
	}
	_, s = stripNamed(t, p, "layers.2.w")
	if s.Bins != DefaultWidth || s.ChangedRows != 10 || len(s.Changed) != 2 || s.Changed[0].Index != 360 || s.Changed[1].Index != 361 {
		t.Fatalf("layers.2.w: %+v", s)
	}
	if b := s.Changed[0]; b.Row0 != 2500 || b.Row1 != 2507 || b.Changed != 7 {
		t.Fatalf("binned rows: %+v", b) // bin 360 holds rows ceil(360·5000/720)=2500 … 2506
	}
	_, s = stripNamed(t, p, "nan")
	if len(s.Changed) != 1 || !s.Changed[0].NonFinite || s.Changed[0].Index != 5 {
		t.Fatalf("nan: %+v", s)
	}
	for name, want := range map[string]snapshot.ArrayChange{"empty": snapshot.Unchanged, "gone": snapshot.Removed, "new": snapshot.Added, hostileName: snapshot.Unchanged} {
		if _, s := stripNamed(t, p, name); s.Change != want || len(s.Changed) != 0 {
			t.Fatalf("%q: %+v", name, s)
		}
	}
}

// TestRasterized draws the picture with rsvg-convert and reads the PNG:
// every bin with a changed row is painted in a palette colour (magenta
// for NaN), every other bin is neutral grey, whole-array changes are
// blue/grey, and within an array the big change is darker than the small
// ones.
func TestRasterized(t *testing.T) {
	rsvg, err := exec.LookPath("rsvg-convert")
	if err != nil {
		t.Skip("rsvg-convert not installed (Debian librsvg2-bin; scripts/test.sh installs it)")
	}
	for _, scale := range []Scale{ScaleAbs, ScaleRel} {
		p := compute(t, Options{Title: "gen 1 → 2", Scale: scale})
		img := rasterize(t, rsvg, p.SVG())
		if got, want := img.Bounds().Dx(), canvasWidth(p.Width); got != want {
			t.Fatalf("PNG width %d, want %d", got, want)
		}
		levelOf := map[color.RGBA]int{}
		for i, c := range Levels {
			levelOf[hexColour(t, c)] = i
		}
		neutral, magenta := hexColour(t, ColourNeutral), hexColour(t, ColourNonFinite)
		for i := range p.Strips {
			s := &p.Strips[i]
			y := stripTop(i) + stripH/2
			switch s.Change {
			case snapshot.Added:
				checkPixels(t, img, s.Name, y, 0, p.Width, hexColour(t, ColourWhole))
				continue
			case snapshot.Removed:
				checkPixels(t, img, s.Name, y, 0, p.Width, hexColour(t, ColourRemoved))
				continue
			}
			if s.Bins == 0 {
				checkPixels(t, img, s.Name, y, 0, p.Width, neutral)
				continue
			}
			changed := map[int]*Bin{}
			for j := range s.Changed {
				changed[s.Changed[j].Index] = &s.Changed[j]
			}
			for bin := 0; bin < s.Bins; bin++ {
				x0, x1 := bin*p.Width/s.Bins, (bin+1)*p.Width/s.Bins
				b := changed[bin]
				if b == nil {
					checkPixels(t, img, fmt.Sprintf("%s bin %d", s.Name, bin), y, x0, x1, neutral)
					continue
				}
				got := rgba(img.At(margin+(x0+x1)/2, y))
				if b.NonFinite {
					if got != magenta {
						t.Fatalf("%s bin %d (NaN) is %v, want magenta", s.Name, bin, got)
					}
					continue
				}
				if _, ok := levelOf[got]; !ok {
					t.Fatalf("%s bin %d (changed) is %v, not a palette colour", s.Name, bin, got)
				}
			}
		}
		// By how much: row 70 (+500) is drawn darker than row 10 (+0.01).
		i, _ := stripNamed(t, p, "layers.10.w")
		at := func(row int) int {
			return levelOf[rgba(img.At(margin+row*p.Width/100+3, stripTop(i)+stripH/2))]
		}
		if at(70) <= at(10) {
			t.Fatalf("scale %v: level of row 70 %d <= level of row 10 %d", scale, at(70), at(10))
		}
	}
}

// TestRasterizedOwnScale: each strip is scaled on its own, so a small
// change in an array of big values is painted in a dark level even when
// another array (a step counter) moved by far more; the strip's line
// gives its scale and the legend says the scale is per array.
func TestRasterizedOwnScale(t *testing.T) {
	rsvg, err := exec.LookPath("rsvg-convert")
	if err != nil {
		t.Skip("rsvg-convert not installed (Debian librsvg2-bin; scripts/test.sh installs it)")
	}
	big := func(r, c int) float32 { return 1000 + float32(r*4+c) }
	i64 := func(v int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(v)) }
	old := &snapshot.Snapshot{Arrays: []*snapshot.Array{
		arr("model.w", snapshot.F32, []int64{50, 4}, f32s(50, 4, big)),
		arr("optimizer.step", snapshot.I64, []int64{1}, i64(1000)),
		arr("optimizer.exp_avg", snapshot.F32, []int64{50, 4}, f32s(50, 4, big)),
	}}
	new := &snapshot.Snapshot{Arrays: []*snapshot.Array{
		arr("model.w", snapshot.F32, []int64{50, 4}, f32s(50, 4, func(r, c int) float32 {
			switch r {
			case 20:
				return big(r, c) + 0.125 // tiny beside 1000
			case 30:
				return big(r, c) + 0.0625
			}
			return big(r, c)
		})),
		arr("optimizer.step", snapshot.I64, []int64{1}, i64(1251)),
		arr("optimizer.exp_avg", snapshot.F32, []int64{50, 4}, f32s(50, 4, func(r, c int) float32 {
			if r == 5 {
				return -1e6
			}
			return big(r, c)
		})),
	}}
	for _, scale := range []Scale{ScaleAbs, ScaleRel} {
		p, err := Compute(context.Background(), old, new, Options{Scale: scale})
		if err != nil {
			t.Fatal(err)
		}
		svg := p.SVG()
		text := wellFormed(t, svg)
		if !strings.Contains(text, "log scale per array") {
			t.Fatalf("legend does not say the scale is per array:\n%s", text)
		}
		img := rasterize(t, rsvg, svg)
		levelOf := map[color.RGBA]int{}
		for i, c := range Levels {
			levelOf[hexColour(t, c)] = i
		}
		i, s := stripNamed(t, p, "model.w")
		lo, hi := s.ScaleRange(scale)
		if want := "scale " + fmtNum(lo) + "…" + fmtNum(hi); !strings.Contains(text, want) {
			t.Fatalf("scale %v: model.w's line does not give %q:\n%s", scale, want, text)
		}
		at := func(row int) (int, bool) {
			l, ok := levelOf[rgba(img.At(margin+row*p.Width/50+3, stripTop(i)+stripH/2))]
			return l, ok
		}
		l20, ok20 := at(20)
		l30, ok30 := at(30)
		if !ok20 || !ok30 {
			t.Fatalf("scale %v: model.w's changed rows are not palette colours", scale)
		}
		if l20 != len(Levels)-1 {
			t.Fatalf("scale %v: model.w's largest change (+0.125 on 1000) is level %d, want the top level %d although optimizer.exp_avg moved by 1e6", scale, l20, len(Levels)-1)
		}
		if l30 >= l20 {
			t.Fatalf("scale %v: model.w row 30 (half of row 20's change) is level %d, want below %d", scale, l30, l20)
		}
		// The counter's one bin is painted at its own top level too.
		j, _ := stripNamed(t, p, "optimizer.step")
		if got := rgba(img.At(margin+p.Width/2, stripTop(j)+stripH/2)); levelOf[got] != len(Levels)-1 {
			t.Fatalf("scale %v: optimizer.step is %v, want the top level", scale, got)
		}
	}
}

func rasterize(t *testing.T, rsvg string, svg []byte) image.Image {
	t.Helper()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "p.svg"), filepath.Join(dir, "p.png")
	if err := os.WriteFile(in, svg, 0o644); err != nil {
		t.Fatal(err)
	}
	if o, err := exec.Command(rsvg, "--format=png", "-o", out, in).CombinedOutput(); err != nil {
		t.Fatalf("rsvg-convert: %v\n%s", err, o)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func checkPixels(t *testing.T, img image.Image, what string, y, x0, x1 int, want color.RGBA) {
	t.Helper()
	for x := x0; x < x1; x++ {
		if got := rgba(img.At(margin+x, y)); got != want {
			t.Fatalf("%s: pixel x=%d y=%d is %v, want %v", what, margin+x, y, got, want)
		}
	}
}

func rgba(c color.Color) color.RGBA {
	r, g, b, a := c.RGBA()
	return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}
}

func hexColour(t testing.TB, s string) color.RGBA {
	var r, g, b uint8
	if _, err := fmt.Sscanf(s, "#%02x%02x%02x", &r, &g, &b); err != nil {
		t.Fatal(err)
	}
	return color.RGBA{r, g, b, 255}
}

// wellFormed parses doc as XML (strictly) and returns its character data.
func wellFormed(t testing.TB, doc []byte) string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	var text strings.Builder
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return text.String()
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if c, ok := tok.(xml.CharData); ok {
			text.Write(c)
		}
	}
}

func TestDeterministicAndEscaped(t *testing.T) {
	a, b := compute(t, Options{}).SVG(), compute(t, Options{}).SVG()
	if !bytes.Equal(a, b) {
		t.Fatal("two renderings of one diff differ")
	}
	text := wellFormed(t, a)
	if !strings.Contains(text, `a<b>&"c'`+"\uFFFD\uFFFD") {
		t.Fatal("the hostile name is not shown (escaped) in the picture")
	}
	if bytes.Contains(a, []byte("<b>")) || bytes.Contains(a, []byte("\x01")) || bytes.Contains(a, []byte("\xff")) {
		t.Fatal("raw markup or bytes of a name in the SVG")
	}
	var h bytes.Buffer
	old, new := fixture()
	ds, err := snapshot.Diff(context.Background(), old, new, snapshot.DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := compute(t, Options{}).WriteHTML(&h, ds); err != nil {
		t.Fatal(err)
	}
	page := h.String()
	if !strings.HasPrefix(page, "<!DOCTYPE html>") || !strings.Contains(page, "<svg ") || strings.Contains(page, "<b>") ||
		!strings.Contains(page, "<td>layers.10.w</td><td>modified</td>") || strings.Contains(page, "http://") && !strings.Contains(page, `xmlns="http://www.w3.org/2000/svg"`) {
		t.Fatalf("HTML page:\n%s", page)
	}
	wellFormed(t, []byte(strings.TrimPrefix(page, "<!DOCTYPE html>\n")))
}

// zeroSource is a huge array of zeros with one byte set.
type zeroSource struct {
	size, at int64
}

func (z zeroSource) Size() int64 { return z.size }
func (z zeroSource) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= z.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), z.size-off))
	clear(p[:n])
	if z.at >= off && z.at < off+int64(n) {
		p[z.at-off] = 1
	}
	return n, nil
}

// TestHugeArray: 2^62 rows are binned in 128-bit arithmetic and only the
// candidate rows are read.
func TestHugeArray(t *testing.T) {
	rows := int64(1) << 62
	row := rows/3 + 12345
	shape := []int64{rows, 1}
	old := &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "huge", DType: snapshot.U8, Shape: shape, Data: zeroSource{size: rows, at: -1}}}}
	new := &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "huge", DType: snapshot.U8, Shape: shape, Data: zeroSource{size: rows, at: row}}}}
	cand := func(string) ([]snapshot.RowRange, bool) {
		return []snapshot.RowRange{{Start: row - 100, End: row + 100}, {Start: -5, End: 3}, {Start: rows - 2, End: rows + 99}}, true
	}
	p, err := Compute(context.Background(), old, new, Options{Candidates: cand})
	if err != nil {
		t.Fatal(err)
	}
	s := p.Strips[0]
	want := int(float64(row) / float64(rows) * DefaultWidth)
	if s.ChangedRows != 1 || len(s.Changed) != 1 || s.Changed[0].Index != want || s.Changed[0].MaxAbs != 1 {
		t.Fatalf("huge: %+v, want bin %d", s, want)
	}
	if b := s.Changed[0]; b.Row0 > row || b.Row1 <= row {
		t.Fatalf("bin rows [%d, %d) miss row %d", b.Row0, b.Row1, row)
	}
	wellFormed(t, p.SVG())
}

func TestLimitsAndOptions(t *testing.T) {
	old, new := &snapshot.Snapshot{}, &snapshot.Snapshot{}
	for i := range 40 {
		a := arr(fmt.Sprintf("u%d", i), snapshot.U8, []int64{1}, []byte{0})
		old.Arrays, new.Arrays = append(old.Arrays, a), append(new.Arrays, a)
	}
	for i := range 3 {
		old.Arrays = append(old.Arrays, arr(fmt.Sprintf("c%d", i), snapshot.U8, []int64{1}, []byte{0}))
		new.Arrays = append(new.Arrays, arr(fmt.Sprintf("c%d", i), snapshot.U8, []int64{1}, []byte{1}))
	}
	p, err := Compute(context.Background(), old, new, Options{MaxStrips: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Strips) != 2 || p.Strips[0].Name != "c0" || p.Omitted != 41 || p.OmittedChanged != 1 || p.Arrays != 43 {
		t.Fatalf("limited: %d strips, omitted %d (%d changed)", len(p.Strips), p.Omitted, p.OmittedChanged)
	}
	if !strings.Contains(wellFormed(t, p.SVG()), "41 more arrays not drawn (1 of them changed)") {
		t.Fatal("no note about the arrays not drawn")
	}
	for _, o := range []Options{{Width: 3}, {Width: MaxWidth + 1}, {MaxStrips: -1}, {Scale: 7}} {
		if _, err := Compute(context.Background(), old, new, o); !errors.Is(err, ErrOptions) {
			t.Fatalf("%+v: %v", o, err)
		}
	}
	// A source shorter than its shape is an error naming the array.
	bad := &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("short", snapshot.F32, []int64{4, 4}, make([]byte, 8))}}
	good := &snapshot.Snapshot{Arrays: []*snapshot.Array{arr("short", snapshot.F32, []int64{4, 4}, make([]byte, 64))}}
	if _, err := Compute(context.Background(), bad, good, Options{}); err == nil || !strings.Contains(err.Error(), `"short" (old)`) {
		t.Fatalf("short source: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Compute(ctx, old, new, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestNaturalCompare(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"l2", "l10", -1}, {"l10", "l2", 1}, {"l02", "l2", -1}, {"a", "a", 0}, {"a.9.b", "a.10.a", -1}, {"x", "x1", -1}, {"", "0", -1}} {
		if got := naturalCompare(c.a, c.b); got != c.want {
			t.Errorf("naturalCompare(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// FuzzPicture: any names, dtypes, shapes and bytes give a well-formed,
// deterministic SVG (and HTML), never a panic. Input layout: byte 0
// dtype, byte 1 columns, byte 2 name length, then the name, then the old
// and new data halves.
func FuzzPicture(f *testing.F) {
	files, _ := filepath.Glob("testdata/fuzz-seeds/*")
	if len(files) == 0 {
		f.Fatal("no seed files in testdata/fuzz-seeds")
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 3 {
			return
		}
		dts := snapshot.AllDTypes()
		dt := dts[int(in[0])%len(dts)]
		cols := int64(in[1] % 9)
		nl := min(int(in[2]), len(in)-3)
		name := string(in[3 : 3+nl])
		data := in[3+nl:]
		half := len(data) / 2
		esz := int64(dt.Size())
		rows := int64(0)
		if cols > 0 {
			rows = int64(half) / (cols * esz)
		}
		n := rows * cols * esz
		mk := func(b []byte) *snapshot.Snapshot {
			return &snapshot.Snapshot{Arrays: []*snapshot.Array{
				{Name: name, DType: dt, Shape: []int64{rows, cols}, Data: snapshot.Bytes(b[:n])},
				{Name: name + "1", DType: dt, Shape: []int64{rows * cols}, Data: snapshot.Bytes(b[:n])},
			}}
		}
		old, new := mk(data[:half]), mk(data[half:half*2])
		sc := Scale(in[1] >> 7) // one scale per input keeps an execution cheap
		opts := Options{Scale: sc, Width: MinWidth + int(in[1])%64, Title: name}
		p, err := Compute(context.Background(), old, new, opts)
		if err != nil {
			t.Fatal(err)
		}
		svg := p.SVG()
		wellFormed(t, svg)
		p2, _ := Compute(context.Background(), old, new, opts)
		if !bytes.Equal(svg, p2.SVG()) {
			t.Fatal("not deterministic")
		}
		var h bytes.Buffer
		if err := p.WriteHTML(&h, nil); err != nil {
			t.Fatal(err)
		}
		wellFormed(t, bytes.TrimPrefix(h.Bytes(), []byte("<!DOCTYPE html>\n")))
	})
}
