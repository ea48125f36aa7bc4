package diffsvg

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/snapd-ml/snapd/snapshot"
)

// Colours (see the package doc).
const (
	ColourNeutral   = "#dcdcdc"
	ColourNonFinite = "#e7298a"
	ColourWhole     = "#4a90d9" // added, reshaped, retyped
	ColourRemoved   = "#777777"
)

// Levels is the sequential palette of changed bins, smallest metric first.
var Levels = [16]string{"#ffffcc", "#fff2af", "#fee693", "#fed976", "#fec063", "#fda64f", "#fd8d3c", "#f97233",
	"#f45629", "#f03b20", "#df2722", "#ce1424", "#bd0026", "#a0001e", "#840015", "#67000d"}

// Layout in pixels.
const (
	margin     = 10
	titleH     = 22 // title line
	legendH    = 30 // legend block
	labelH     = 16 // an array's text line
	stripH     = 14 // its heatmap strip
	stripGap   = 8  // space below a strip
	blockH     = labelH + stripH + stripGap
	minCanvasW = 560
	swatchW    = 12
)

// stripTop returns the y of strip i's heatmap (its label is above).
func stripTop(i int) int { return margin + titleH + legendH + i*blockH + labelH }

// canvasWidth is the SVG's width for strips of width w.
func canvasWidth(w int) int { return 2*margin + max(w, minCanvasW) }

// ScaleRange returns the smallest positive and the largest finite metric
// of the strip's changed bins on scale sc (0, 0 when there is none): the
// ends of the strip's own colour scale. Each strip is scaled on its own so
// that a small change in one array stays visible beside a huge change in
// another.
func (s *Strip) ScaleRange(sc Scale) (lo, hi float64) {
	for j := range s.Changed {
		b := &s.Changed[j]
		if b.NonFinite {
			continue
		}
		m := b.Metric(sc)
		if m <= 0 || math.IsInf(m, 0) {
			continue
		}
		if lo == 0 || m < lo {
			lo = m
		}
		hi = max(hi, m)
	}
	return lo, hi
}

// colour returns the fill of a changed bin.
func (p *Picture) colour(b *Bin, lo, hi float64) string {
	if b.NonFinite {
		return ColourNonFinite
	}
	return Levels[level(b.Metric(p.Scale), lo, hi)]
}

// level maps m onto the palette, logarithmically between lo and hi.
func level(m, lo, hi float64) int {
	switch {
	case math.IsInf(m, 1) || m >= hi:
		return len(Levels) - 1
	case m <= lo || lo <= 0:
		return 0
	}
	t := (math.Log(m) - math.Log(lo)) / (math.Log(hi) - math.Log(lo))
	return min(len(Levels)-1, max(0, int(t*float64(len(Levels)-1)+0.5)))
}

// WriteSVG draws the picture as a standalone SVG document.
func (p *Picture) WriteSVG(w io.Writer) error {
	bw := bufio.NewWriter(w)
	p.svg(bw)
	return bw.Flush()
}

// SVG returns WriteSVG's bytes.
func (p *Picture) SVG() []byte {
	var b strings.Builder
	p.svg(&b)
	return []byte(b.String())
}

type stringWriter interface {
	io.Writer
	WriteString(string) (int, error)
}

func (p *Picture) svg(w stringWriter) {
	W := canvasWidth(p.Width)
	n := len(p.Strips)
	H := margin + titleH + legendH + n*blockH + margin
	if p.Omitted > 0 {
		H += labelH
	}
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans Mono,monospace" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(w, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", W, H)
	title := p.Title
	if title == "" {
		title = "changed rows per array"
	}
	changed := 0
	for _, s := range p.Strips {
		if s.Change != snapshot.Unchanged {
			changed++
		}
	}
	changed += p.OmittedChanged
	fmt.Fprintf(w, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s — %d of %d arrays changed</text>`+"\n",
		margin, margin+15, escape(title, 4*MaxNameRunes), changed, p.Arrays)
	p.legend(w)
	for i := range p.Strips {
		p.strip(w, i)
	}
	if p.Omitted > 0 {
		fmt.Fprintf(w, `<text x="%d" y="%d">… %d more arrays not drawn (%d of them changed); the table lists every array</text>`+"\n",
			margin, stripTop(n)+2, p.Omitted, p.OmittedChanged)
	}
	w.WriteString("</svg>\n")
}

func (p *Picture) legend(w stringWriter) {
	y := margin + titleH
	x := margin
	fmt.Fprintf(w, `<g font-size="11"><text x="%d" y="%d">colour: %s, log scale per array, from its smallest to its largest change (the scale on its line)</text>`+"\n", x, y+10, escape(p.Scale.String(), 200))
	y += 14
	const low, high = "smallest", "largest"
	fmt.Fprintf(w, `<text x="%d" y="%d">%s</text>`+"\n", x, y+10, low)
	x += 7*len(low) + 4
	for i, c := range Levels {
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="12" fill="%s"/>`+"\n", x+i*swatchW, y, swatchW, c)
	}
	x += len(Levels)*swatchW + 4
	fmt.Fprintf(w, `<text x="%d" y="%d">%s</text>`+"\n", x, y+10, high)
	x += 7*len(high) + 12
	for _, k := range []struct{ c, label string }{{ColourNeutral, "unchanged"}, {ColourNonFinite, "NaN/Inf"}, {ColourWhole, "new/reshaped"}, {ColourRemoved, "removed"}} {
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x, y, swatchW, k.c, x+swatchW+3, y+10, k.label)
		x += swatchW + 3 + 7*len(k.label) + 12
	}
	w.WriteString("</g>\n")
}

func (p *Picture) strip(w stringWriter, i int) {
	s := &p.Strips[i]
	y := stripTop(i)
	lo, hi := s.ScaleRange(p.Scale)
	label := describe(s)
	if hi > 0 {
		label += " — scale " + fmtNum(lo) + "…" + fmtNum(hi)
	}
	fmt.Fprintf(w, `<text x="%d" y="%d"><tspan font-weight="bold">%s</tspan> %s</text>`+"\n", margin, y-4, escape(s.Name, MaxNameRunes), escape(label, 400))
	fill := ColourNeutral
	switch s.Change {
	case snapshot.Added, snapshot.Reshaped, snapshot.Retyped:
		fill = ColourWhole
	case snapshot.Removed:
		fill = ColourRemoved
	}
	fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", margin, y, p.Width, stripH, fill)
	if s.Bins <= 0 {
		return
	}
	// Runs of adjacent changed bins of one colour become one rectangle.
	for j := 0; j < len(s.Changed); {
		first := &s.Changed[j]
		c := p.colour(first, lo, hi)
		k := j + 1
		changed, maxAbs, metric, nonFinite := first.Changed, first.MaxAbs, first.Metric(p.Scale), first.NonFinite
		for k < len(s.Changed) && s.Changed[k].Index == s.Changed[k-1].Index+1 && p.colour(&s.Changed[k], lo, hi) == c {
			b := &s.Changed[k]
			changed += b.Changed
			maxAbs, metric = max(maxAbs, b.MaxAbs), max(metric, b.Metric(p.Scale))
			nonFinite = nonFinite || b.NonFinite
			k++
		}
		last := &s.Changed[k-1]
		x0 := first.Index * p.Width / s.Bins
		x1 := (last.Index + 1) * p.Width / s.Bins
		tip := fmt.Sprintf("rows %s: %d changed, max |Δ| %s", rowSpan(first.Row0, last.Row1), changed, fmtNum(maxAbs))
		if s.Sampled > 0 {
			tip = fmt.Sprintf("rows %s: %d in changed chunks, max |Δ| of a sample %s", rowSpan(first.Row0, last.Row1), changed, fmtNum(maxAbs))
		}
		if p.Scale == ScaleRel {
			tip += ", relative " + fmtNum(metric)
		}
		if nonFinite {
			tip += ", NaN/Inf involved"
		}
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s</title></rect>`+"\n", margin+x0, y, x1-x0, stripH, c, escape(tip, 400))
		j = k
	}
}

// describe is the text after an array's name.
func describe(s *Strip) string {
	shape := snapshot.FormatShape(s.Shape)
	switch s.Change {
	case snapshot.Added:
		return fmt.Sprintf("%s%s — added", s.DType, shape)
	case snapshot.Removed:
		return fmt.Sprintf("%s%s — removed", s.DType, shape)
	case snapshot.Reshaped:
		return fmt.Sprintf("%s%s — reshaped from %s", s.DType, shape, snapshot.FormatShape(s.OldShape))
	case snapshot.Retyped:
		return fmt.Sprintf("%s%s — retyped from %s%s", s.DType, shape, s.OldDType, snapshot.FormatShape(s.OldShape))
	}
	if s.Rows == 0 {
		return fmt.Sprintf("%s%s — no rows", s.DType, shape)
	}
	if s.Change == snapshot.Unchanged {
		return fmt.Sprintf("%s%s — unchanged (%d rows)", s.DType, shape, s.Rows)
	}
	per := ""
	if s.Rows > int64(s.Bins) {
		per = fmt.Sprintf(", ~%s rows per pixel", fmtNum(float64(s.Rows)/float64(s.Bins)))
		if s.Sampled > 0 {
			per = fmt.Sprintf(", ~%s rows per bin", fmtNum(float64(s.Rows)/float64(s.Bins)))
		}
	}
	if s.Sampled > 0 {
		return fmt.Sprintf("%s%s — %d of %d rows in changed chunks%s; dense change: statistics of a sample of %d elements", s.DType, shape, s.ChangedRows, s.Rows, per, s.Sampled)
	}
	return fmt.Sprintf("%s%s — changed %d of %d rows%s", s.DType, shape, s.ChangedRows, s.Rows, per)
}

func rowSpan(r0, r1 int64) string {
	if r1 == r0+1 {
		return strconv.FormatInt(r0, 10)
	}
	return strconv.FormatInt(r0, 10) + "–" + strconv.FormatInt(r1-1, 10)
}

// fmtNum prints a statistic with 3 significant digits.
func fmtNum(f float64) string { return snapshot.FormatStat(f) }

// escape makes s safe as XML character data or an attribute value: at
// most limit runes (then "…"), invalid UTF-8 and characters XML 1.0 does
// not allow (controls, U+FFFE, U+FFFF) as U+FFFD, and &<>"' as entities.
func escape(s string, limit int) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if n == limit {
			b.WriteString("…")
			break
		}
		n++
		switch {
		case r == utf8.RuneError && size <= 1, r < 0x20 && r != '\t', r == 0x7f, r == 0xfffe, r == 0xffff:
			b.WriteRune(utf8.RuneError)
		case r == '&':
			b.WriteString("&amp;")
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '"':
			b.WriteString("&quot;")
		case r == '\'':
			b.WriteString("&#39;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
