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

// logScale maps a strip's metrics onto the palette, logarithmically
// between its lo and hi (Strip.ScaleRange).
type logScale struct{ lo, hi, logLo, logHi float64 }

func newLogScale(lo, hi float64) logScale {
	return logScale{lo: lo, hi: hi, logLo: math.Log(lo), logHi: math.Log(hi)}
}

// level returns m's index in Levels.
func (sc logScale) level(m float64) int {
	switch {
	case math.IsInf(m, 1) || m >= sc.hi:
		return len(Levels) - 1
	case m <= sc.lo || sc.lo <= 0:
		return 0
	}
	t := (math.Log(m) - sc.logLo) / (sc.logHi - sc.logLo)
	return min(len(Levels)-1, max(0, int(t*float64(len(Levels)-1)+0.5)))
}

// WriteSVG draws the picture as a standalone SVG document.
func (p *Picture) WriteSVG(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
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
	sc := newLogScale(lo, hi)
	buf := make([]byte, 0, 256)
	for _, r := range p.runs(s, sc) {
		x0 := r.i0 * p.Width / s.Bins
		x1 := (r.i1 + 1) * p.Width / s.Bins
		// The tooltip holds only numbers and fixed words (nothing to
		// escape); a densely changed strip has up to Width/4 of them.
		buf = append(buf[:0], `<rect x="`...)
		buf = strconv.AppendInt(buf, int64(margin+x0), 10)
		buf = append(buf, `" y="`...)
		buf = strconv.AppendInt(buf, int64(y), 10)
		buf = append(buf, `" width="`...)
		buf = strconv.AppendInt(buf, int64(x1-x0), 10)
		buf = append(buf, `" height="`...)
		buf = strconv.AppendInt(buf, stripH, 10)
		buf = append(buf, `" fill="`...)
		buf = append(buf, r.colour...)
		buf = append(buf, `"><title>rows `...)
		buf = appendRowSpan(buf, r.r0, r.r1)
		buf = append(buf, ": "...)
		buf = strconv.AppendInt(buf, r.changed, 10)
		if s.Sampled > 0 {
			buf = append(buf, " in changed chunks, max |Δ| of a sample "...)
		} else {
			buf = append(buf, " changed, max |Δ| "...)
		}
		buf = snapshot.AppendStat(buf, r.maxAbs)
		if p.Scale == ScaleRel {
			buf = append(buf, ", relative "...)
			buf = snapshot.AppendStat(buf, r.metric)
		}
		if r.nonFinite {
			buf = append(buf, ", NaN/Inf involved"...)
		}
		buf = append(buf, "</title></rect>\n"...)
		w.Write(buf)
	}
}

// run is one rectangle of a strip: the changed bins i0..i1 (and any
// unchanged ones between them, in a dense strip's cell).
type run struct {
	i0, i1         int
	r0, r1         int64 // rows [r0, r1)
	changed        int64
	maxAbs, metric float64
	nonFinite      bool
	colour         string
}

// add merges the bins of q (which follows r) into r.
func (r *run) add(q run) {
	r.i1, r.r1 = q.i1, q.r1
	r.changed += q.changed
	r.maxAbs, r.metric = max(r.maxAbs, q.maxAbs), max(r.metric, q.metric)
	r.nonFinite = r.nonFinite || q.nonFinite
}

// runs returns the rectangles of strip s: its changed bins, or, when it
// has more of them than a sampled strip has bins (a dense change), cells
// of sampleBinWidth pixels holding the changed bins that start in them,
// each coloured by its largest change; then neighbours of one colour
// merged into one.
func (p *Picture) runs(s *Strip, sc logScale) []run {
	cells := len(s.Changed) > p.Width/sampleBinWidth
	var units []run
	cell := -1
	for i := range s.Changed {
		b := &s.Changed[i]
		u := run{i0: b.Index, i1: b.Index, r0: b.Row0, r1: b.Row1, changed: b.Changed, maxAbs: b.MaxAbs, metric: b.Metric(p.Scale), nonFinite: b.NonFinite}
		if cells {
			c := b.Index * p.Width / s.Bins / sampleBinWidth
			if c == cell {
				units[len(units)-1].add(u)
				continue
			}
			cell = c
		}
		units = append(units, u)
	}
	out := units[:0]
	for _, u := range units {
		u.colour = ColourNonFinite
		if !u.nonFinite {
			u.colour = Levels[sc.level(u.metric)]
		}
		if k := len(out); k > 0 && out[k-1].i1+1 == u.i0 && out[k-1].colour == u.colour {
			out[k-1].add(u)
			continue
		}
		out = append(out, u)
	}
	return out
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

// appendRowSpan appends the rows [r0, r1) as "r0" or "r0–last".
func appendRowSpan(b []byte, r0, r1 int64) []byte {
	b = strconv.AppendInt(b, r0, 10)
	if r1 != r0+1 {
		b = append(b, "–"...)
		b = strconv.AppendInt(b, r1-1, 10)
	}
	return b
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
