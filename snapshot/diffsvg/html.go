package diffsvg

import (
	"bufio"
	"fmt"
	"io"
	"strconv"

	"github.com/snapd-ml/snapd/snapshot"
)

// WriteHTML writes a self-contained HTML page (no scripts, no external
// resources): the title, the SVG inline, and a table with one row per
// array. With diffs (snapshot.Diff's result for the same two snapshots)
// the table holds its numbers (changed elements, row ranges, max/mean
// |Δ|, rel L2, new NaN/Inf); without, what the picture knows.
func (p *Picture) WriteHTML(w io.Writer, diffs []snapshot.ArrayDiff) error {
	bw := bufio.NewWriter(w)
	title := p.Title
	if title == "" {
		title = "changed rows per array"
	}
	fmt.Fprintf(bw, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>%s</title>\n", escape(title, 4*MaxNameRunes))
	bw.WriteString("<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;font-family:monospace;font-size:12px}" +
		"th,td{border:1px solid #ccc;padding:2px 6px;text-align:left}td.n{text-align:right}svg{max-width:100%;height:auto}</style>\n</head>\n<body>\n")
	fmt.Fprintf(bw, "<h1>%s</h1>\n", escape(title, 4*MaxNameRunes))
	p.svg(bw)
	bw.WriteString("<table>\n")
	if diffs != nil {
		bw.WriteString("<tr><th>array</th><th>change</th><th>dtype</th><th>shape</th><th>changed elements</th><th>rows</th><th>max |Δ|</th><th>mean |Δ|</th><th>rel L2</th><th>new NaN/Inf</th></tr>\n")
		for i := range diffs {
			d := &diffs[i]
			elems, maxd, meand, rel, nf := "", "", "", "", ""
			if d.Change == snapshot.Modified {
				elems = fmt.Sprintf("%d / %d", d.ChangedElements, d.Elements)
				maxd, meand = fmtNum(d.MaxAbsDelta), fmtNum(d.MeanAbsDelta)
				if snapshot.IsFloatDType(d.DType) {
					rel = fmtNum(d.RelL2)
					nf = fmt.Sprintf("%d/%d", d.NewNaN, d.NewInf)
				}
			}
			fmt.Fprintf(bw, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td class=\"n\">%s</td><td>%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td></tr>\n",
				escape(d.Name, MaxNameRunes), escape(string(d.Change), 40), escape(d.DType, 40), escape(snapshot.FormatShape(d.Shape), 400), elems,
				escape(snapshot.FormatRows(d.ChangedRows, 8), 400), maxd, meand, rel, nf)
		}
	} else {
		bw.WriteString("<tr><th>array</th><th>change</th><th>dtype</th><th>shape</th><th>changed rows</th></tr>\n")
		for i := range p.Strips {
			s := &p.Strips[i]
			rows := ""
			if s.Change == snapshot.Modified || s.Change == snapshot.Unchanged {
				rows = strconv.FormatInt(s.ChangedRows, 10) + " / " + strconv.FormatInt(s.Rows, 10)
			}
			fmt.Fprintf(bw, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td class=\"n\">%s</td></tr>\n",
				escape(s.Name, MaxNameRunes), escape(string(s.Change), 40), escape(s.DType, 40), escape(snapshot.FormatShape(s.Shape), 400), rows)
		}
	}
	bw.WriteString("</table>\n</body>\n</html>\n")
	return bw.Flush()
}
