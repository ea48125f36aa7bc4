package review

import (
	"fmt"
	"strings"

	"github.com/snapd-ml/snapd/snapshot"
)

// MaxBodyBytes bounds the review body (GitHub refuses bodies over 65536
// characters); the renderer degrades detail to stay under it.
const MaxBodyBytes = 60000

// ReviewMarker is the hidden first line of a review body for head sha.
func ReviewMarker(sha string) string { return "<!-- snapd-review head=" + sha + " -->" }

// commentMarker is the hidden first line of a line comment.
func commentMarker(sha, path, array string, chunk int64) string {
	return fmt.Sprintf("<!-- snapd-review-comment head=%s path=%s array=%s chunk=%d -->", sha, mdSafe(path), array, chunk)
}

// mdSafe makes text safe inside a Markdown code span, a table cell and an
// HTML comment.
func mdSafe(s string) string {
	r := strings.NewReplacer("`", "'", "|", "/", "\n", " ", "\r", " ", "-->", "- ->", "<!--", "< !--")
	return r.Replace(s)
}

// num formats a statistic: "NaN", "inf" or three significant digits.
func num(f float64) string { return snapshot.FormatStat(f) }

// nonFiniteNote describes a float diff's changes to and from NaN/±Inf and
// the numbers over its finite pairs ("" when there are none).
func nonFiniteNote(d *snapshot.ArrayDiff) string {
	if d.NonFiniteChanged == 0 {
		return ""
	}
	s := fmt.Sprintf("; **new NaN %d, new Inf %d**", d.NewNaN, d.NewInf)
	if d.NewNaN+d.NewInf == 0 {
		s = "; new NaN 0, new Inf 0"
	}
	if d.GoneNaN+d.GoneInf > 0 {
		s += fmt.Sprintf(", gone NaN %d, gone Inf %d", d.GoneNaN, d.GoneInf)
	}
	return s + fmt.Sprintf("; over the %d finite pairs: max |Δ| %s, mean |Δ| %s, rel L2 %s",
		d.FiniteChanged, num(d.FiniteMaxAbsDelta), num(d.FiniteMeanAbsDelta), num(d.FiniteRelL2))
}

// chunkSummary is the one-line description of a changed chunk used in
// comments and in the body's list of unanchored changes.
func chunkSummary(c ChunkChange, d *snapshot.ArrayDiff) string {
	if c.Chunk < 0 {
		switch {
		case d == nil:
			return fmt.Sprintf("array `%s` %s", c.Array, c.Change)
		case c.Change == snapshot.Added:
			return fmt.Sprintf("array `%s` added: %s%s, %d elements", c.Array, d.DType, snapshot.FormatShape(d.Shape), d.Elements)
		case c.Change == snapshot.Reshaped:
			return fmt.Sprintf("array `%s` reshaped: %s → %s", c.Array, snapshot.FormatShape(d.OldShape), snapshot.FormatShape(d.Shape))
		case c.Change == snapshot.Retyped:
			return fmt.Sprintf("array `%s` retyped: %s → %s", c.Array, d.OldDType, d.DType)
		}
		return fmt.Sprintf("array `%s` %s", c.Array, c.Change)
	}
	s := fmt.Sprintf("array `%s` chunk %06d", c.Array, c.Chunk)
	if c.EndRow > c.FirstRow {
		s += fmt.Sprintf(" (rows %d-%d)", c.FirstRow, c.EndRow-1)
	}
	st := c.Stats
	if st == nil {
		if c.NoStats != "" {
			return s + ": " + c.NoStats
		}
		if c.Array == snapshot.AttrsArrayName {
			return s + ": the attributes document changed"
		}
		return s + ": bytes changed (no element statistics: a side does not decode)"
	}
	s += fmt.Sprintf(": rows %s changed, %d of %d elements", snapshot.FormatRows(st.ChangedRows, 16), st.ChangedElements, st.Elements)
	if snapshot.IsFloatDType(st.DType) {
		s += fmt.Sprintf("; max |Δ| %s, mean |Δ| %s, rel L2 %s", num(st.MaxAbsDelta), num(st.MeanAbsDelta), num(st.RelL2))
		s += nonFiniteNote(st)
	} else {
		s += fmt.Sprintf("; max |Δ| %.0f", st.MaxAbsDelta)
	}
	return s
}

func diffFor(f *FileResult, name string) *snapshot.ArrayDiff {
	for i := range f.Diffs {
		if f.Diffs[i].Name == name {
			return &f.Diffs[i]
		}
	}
	return nil
}

// makeComments turns anchored chunk changes into line comments, in file
// and line order, up to MaxComments; the others are left unanchored-by-cap
// (render folds them into the body).
func makeComments(files []*FileResult, opts Options) []Comment {
	var out []Comment
	for _, f := range files {
		for i := range f.Chunks {
			c := &f.Chunks[i]
			if !c.Anchored {
				continue
			}
			if opts.MaxComments < 0 || len(out) >= opts.MaxComments {
				c.Anchored = false // folded into the body
				continue
			}
			m := commentMarker(opts.HeadSHA, f.Path, c.Array, c.Chunk)
			body := m + "\n**snapd:** " + chunkSummary(*c, diffFor(f, c.Array))
			out = append(out, Comment{Path: f.Path, Line: c.Line, Position: c.Position, Array: c.Array, Chunk: c.Chunk, Marker: m, Body: body})
		}
	}
	return out
}

func verdictTitle(ev string) string {
	switch ev {
	case EventApprove:
		return "✅ all checks passed"
	case EventRequestChanges:
		return "❌ changes requested"
	}
	return "ℹ️ reviewed"
}

// renderBody writes the summary. Detail is reduced in steps (full tables,
// then one compact line per changed array, then counts only) until it
// fits MaxBodyBytes; every file and every array count is always present.
func renderBody(rv *Review, opts Options) string {
	for level := 0; level < 3; level++ {
		b := renderLevel(rv, opts, level)
		if len(b) <= MaxBodyBytes || level == 2 {
			if len(b) > MaxBodyBytes {
				b = b[:MaxBodyBytes-64] + "\n\n… (truncated to GitHub's body limit)\n"
			}
			return b
		}
	}
	return ""
}

func renderLevel(rv *Review, opts Options, level int) string {
	var b strings.Builder
	b.WriteString(ReviewMarker(rv.HeadSHA) + "\n")
	fmt.Fprintf(&b, "## snapd review: %s\n\n", verdictTitle(rv.Event))
	sha := rv.HeadSHA
	if len(sha) > 12 {
		sha = sha[:12]
	}
	if sha != "" {
		fmt.Fprintf(&b, "Head `%s`, ", sha)
	}
	nc := 0
	for _, f := range rv.Files {
		for _, c := range f.Chunks {
			if c.Anchored {
				nc++
			}
		}
	}
	fmt.Fprintf(&b, "%d WTXT file(s), %d line comment(s).\n", len(rv.Files), nc)
	var collected []string
	for _, f := range rv.Files {
		collected = append(collected, f.Collected...)
	}
	if len(collected) > 0 && rv.Event == EventComment {
		fmt.Fprintf(&b, "\nA comment, neither an approval nor a request for changes: retention collected the content of generation(s) %s from the registry, so their rows could not be compared; every check that could still be done passed.\n", strings.Join(collected, ", "))
	}
	if len(rv.Files) == 0 {
		b.WriteString("\nNo `*.wtxt` file changed.\n")
	}
	renderPictures(&b, opts.Pictures)
	for _, f := range rv.Files {
		renderFile(&b, f, opts, level)
	}
	b.WriteString("\n<sub>Generated by `snapd review`. Row ranges are inclusive; Δ = head − base; a change to or from NaN reads NaN, to or from ±Inf inf (line comments add the finite pairs' numbers); rel L2 = ‖Δ‖₂ / ‖base‖₂ (finite base elements).</sub>\n")
	return b.String()
}

func renderFile(b *strings.Builder, f *FileResult, opts Options, level int) {
	title := "`" + mdSafe(f.Path) + "`"
	if f.OldPath != "" && f.OldPath != f.Path {
		title += " (renamed from `" + mdSafe(f.OldPath) + "`)"
	}
	fmt.Fprintf(b, "\n### %s — %s\n\n", title, f.Status)
	if f.Report != nil {
		r := f.Report
		state := "✅ passed"
		if !r.OK() {
			state = fmt.Sprintf("❌ %d failure(s)", len(r.Failures))
		}
		fmt.Fprintf(b, "- **Verification:** %s; signature %s", state, r.Signature)
		if r.KeyID != "" {
			fmt.Fprintf(b, " (keyid `%s`)", r.KeyID)
		}
		if un := r.Unauthenticated(); len(un) > 0 {
			fmt.Fprintf(b, "; HMAC not verified for %d of %d array(s)", len(un), len(r.Arrays))
		} else if len(r.Arrays) > 0 {
			fmt.Fprintf(b, "; HMAC verified for all %d array(s)", len(r.Arrays))
		}
		if r.Audit != "" {
			b.WriteString("; has an unsigned audit line")
		}
		b.WriteString("\n")
		chain := r.Chain
		switch chain {
		case "continues":
			chain = "✅ continues the base (merkle_prev = base merkle_this `" + short(f.BaseMerkle) + "`)"
		case "first":
			chain = "first of a chain (merkle_prev is zero)"
		}
		fmt.Fprintf(b, "- **Chain:** gen %s → %s; %s; merkle_this `%s`\n", orDash(f.BaseGen), orDash(f.HeadGen), chain, short(r.MerkleThis))
	} else if f.Status == StatusRemoved {
		fmt.Fprintf(b, "- The file was removed (base gen %s).\n", orDash(f.BaseGen))
	}
	for i, p := range f.Problems {
		if i == 20 && level > 0 {
			fmt.Fprintf(b, "- ❌ … %d more problem(s)\n", len(f.Problems)-20)
			break
		}
		fmt.Fprintf(b, "- ❌ %s\n", mdLine(p))
	}
	for _, n := range f.Notes {
		fmt.Fprintf(b, "- ⚠️ %s\n", mdLine(n))
	}
	renderCollected(b, f, level)
	if line := notThresholdedLine(f); line != "" {
		fmt.Fprintf(b, "- %s\n", line)
	}
	if !f.HasPatch && f.Status != StatusRemoved {
		b.WriteString("- ⚠️ GitHub shows no diff for this file (too large or binary), so every change is listed here.\n")
	}
	if t := MetaTable(f.BaseMeta, f.HeadMeta); t != "" && !f.metaUnknown {
		b.WriteString("\n" + t)
	}
	if f.Diffs == nil {
		return
	}
	chunksOf := map[string][]int64{}
	for _, c := range f.Chunks {
		if c.Chunk >= 0 {
			chunksOf[c.Array] = append(chunksOf[c.Array], c.Chunk)
		}
	}
	counts := map[snapshot.ArrayChange]int{}
	for _, d := range f.Diffs {
		counts[d.Change]++
	}
	fmt.Fprintf(b, "\n%d array(s): %d modified, %d added, %d removed, %d reshaped, %d retyped, %d unchanged.\n",
		len(f.Diffs), counts[snapshot.Modified], counts[snapshot.Added], counts[snapshot.Removed],
		counts[snapshot.Reshaped], counts[snapshot.Retyped], counts[snapshot.Unchanged])
	if len(f.Diffs) == counts[snapshot.Unchanged] {
		return
	}
	switch level {
	case 0:
		b.WriteString("\n")
		b.WriteString(diffTable(f.Diffs, func(d *snapshot.ArrayDiff) []int64 { return chunksOf[d.Name] }, f.scopeNote))
	case 1:
		b.WriteString("\n")
		for _, d := range f.Diffs {
			if d.Change == snapshot.Unchanged {
				continue
			}
			fmt.Fprintf(b, "- %s%s\n", compactLine(d, chunksOf[d.Name]), f.scopeNote(&d))
		}
	default:
		b.WriteString("\n(Per-array detail omitted to fit GitHub's size limit; run `snapd diff` on the two versions.)\n")
	}
	renderFolded(b, f, level)
}

// renderCollected lists, per changed array, that its rows were not
// compared because retention collected a version's content (at level 1
// at most 200 arrays, at level 2 their count).
func renderCollected(b *strings.Builder, f *FileResult, level int) {
	if len(f.Collected) == 0 || len(f.arrayChanges) == 0 {
		return
	}
	fmt.Fprintf(b, "- Rows not compared (the content of generation %s was collected) in %d changed array(s)", strings.Join(f.Collected, ", "), len(f.arrayChanges))
	limit := len(f.arrayChanges)
	switch level {
	case 1:
		limit = min(limit, 200)
	case 2:
		limit = 0
	}
	if limit == 0 {
		b.WriteString(".\n")
		return
	}
	b.WriteString(":\n")
	for _, a := range f.arrayChanges[:limit] {
		fmt.Fprintf(b, "  - %s\n", a)
	}
	if limit < len(f.arrayChanges) {
		fmt.Fprintf(b, "  - … %d more\n", len(f.arrayChanges)-limit)
	}
}

func renderFolded(b *strings.Builder, f *FileResult, level int) {
	var folded []ChunkChange
	for _, c := range f.Chunks {
		if !c.Anchored {
			folded = append(folded, c)
		}
	}
	if len(folded) == 0 {
		return
	}
	limit := len(folded)
	switch level {
	case 1:
		limit = min(limit, 200)
	case 2:
		limit = 0
	}
	fmt.Fprintf(b, "\n<details><summary>%d changed chunk(s) without a line comment (not in the rendered diff, or over the comment cap)</summary>\n\n", len(folded))
	for _, c := range folded[:limit] {
		fmt.Fprintf(b, "- line %d: %s\n", c.Line, chunkSummary(c, diffFor(f, c.Array)))
	}
	if limit < len(folded) {
		fmt.Fprintf(b, "- … %d more (chunk ix per array are in the table above)\n", len(folded)-limit)
	}
	b.WriteString("\n</details>\n")
}

// DiffTable is the Markdown table of a diff, one row per changed array
// (unchanged ones are left out): the one rendering for people of
// snapshot.Diff's result, used by the review body and `snapd diff
// --markdown`. chunks gives the changed chunk ix of an array; nil means
// the diff's own (ArrayDiff.Chunks).
func DiffTable(ds []snapshot.ArrayDiff, chunks func(d *snapshot.ArrayDiff) []int64) string {
	return diffTable(ds, chunks, nil)
}

// diffTable is DiffTable with note(d) appended to a row's change cell
// (nil: none).
func diffTable(ds []snapshot.ArrayDiff, chunks func(d *snapshot.ArrayDiff) []int64, note func(d *snapshot.ArrayDiff) string) string {
	var b strings.Builder
	b.WriteString("| array | change | dtype | shape | changed elements | rows | chunks | max \\|Δ\\| | mean \\|Δ\\| | rel L2 | new NaN/Inf |\n")
	b.WriteString("|---|---|---|---|---:|---|---|---:|---:|---:|---:|\n")
	for i := range ds {
		d := &ds[i]
		if d.Change == snapshot.Unchanged {
			continue
		}
		cs := d.Chunks
		if chunks != nil {
			cs = chunks(d)
		}
		n := ""
		if note != nil {
			n = note(d)
		}
		b.WriteString(tableRow(*d, cs, n))
	}
	return b.String()
}

func tableRow(d snapshot.ArrayDiff, chunks []int64, note string) string {
	fl := snapshot.IsFloatDType(d.DType)
	mod := d.Change == snapshot.Modified
	cell := func(s string, ok bool) string {
		if !ok {
			return ""
		}
		return s
	}
	shape := snapshot.FormatShape(d.Shape)
	dtype := d.DType
	switch d.Change {
	case snapshot.Reshaped:
		shape = snapshot.FormatShape(d.OldShape) + " → " + shape
	case snapshot.Retyped:
		dtype = d.OldDType + " → " + dtype
		if d.OldShape != nil {
			shape = snapshot.FormatShape(d.OldShape) + " → " + shape
		}
	}
	elems := ""
	if mod {
		elems = fmt.Sprintf("%d / %d", d.ChangedElements, d.Elements)
	}
	maxd := ""
	if mod {
		if fl {
			maxd = num(d.MaxAbsDelta)
		} else {
			maxd = fmt.Sprintf("%.0f", d.MaxAbsDelta)
		}
	}
	meanStr := num(d.MeanAbsDelta)
	if !fl {
		meanStr = fmt.Sprintf("%.6g", d.MeanAbsDelta)
	}
	nan := ""
	if fl && mod {
		nan = fmt.Sprintf("%d/%d", d.NewNaN, d.NewInf)
		if d.NewNaN+d.NewInf > 0 {
			nan = "**" + nan + "**"
		}
		if d.GoneNaN+d.GoneInf > 0 {
			nan += fmt.Sprintf(" (gone %d/%d)", d.GoneNaN, d.GoneInf)
		}
	}
	return fmt.Sprintf("| `%s` | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
		d.Name, string(d.Change)+note, dtype, shape, elems, cell(snapshot.FormatRows(d.ChangedRows, 8), mod), cell(snapshot.FormatInts(chunks, 12), mod),
		maxd, cell(meanStr, mod), cell(num(d.RelL2), mod && fl), nan)
}

func compactLine(d snapshot.ArrayDiff, chunks []int64) string {
	s := fmt.Sprintf("`%s` %s", d.Name, d.Change)
	if d.Change != snapshot.Modified {
		return s
	}
	s += fmt.Sprintf(" %d/%d elems, rows %s, chunks %s, max|Δ| %s", d.ChangedElements, d.Elements, snapshot.FormatRows(d.ChangedRows, 3), snapshot.FormatInts(chunks, 4), num(d.MaxAbsDelta))
	if snapshot.IsFloatDType(d.DType) {
		s += fmt.Sprintf(", relL2 %s, new NaN/Inf %d/%d", num(d.RelL2), d.NewNaN, d.NewInf)
	}
	return s
}

func mdLine(s string) string {
	s = strings.NewReplacer("\n", " ", "\r", " ", "<", "&lt;", ">", "&gt;").Replace(s)
	return trunc(s, 400)
}

func short(h string) string {
	if len(h) > 16 {
		return h[:16]
	}
	if h == "" {
		return "-"
	}
	return h
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// scopeNote is what the table adds to a modified array's change when the
// thresholds do not judge it: " (not thresholded: counter)", " (excluded:
// `optimizer.*`)".
func (f *FileResult) scopeNote(d *snapshot.ArrayDiff) string {
	sc, ok := f.Scopes[d.Name]
	if !ok || sc.Thresholded || d.Change != snapshot.Modified {
		return ""
	}
	if sc.Reason == ReasonExcluded {
		return " (excluded: `" + mdSafe(sc.Pattern) + "`)"
	}
	return " (not thresholded: " + sc.Reason + ")"
}

// notThresholdedLine counts the arrays of f the thresholds do not judge:
// "Not thresholded: 3 counters, 1 RNG state, 12 excluded" ("" when every
// array is judged).
func notThresholdedLine(f *FileResult) string {
	n := map[string]int{}
	for _, d := range f.Diffs {
		if sc, ok := f.Scopes[d.Name]; ok && !sc.Thresholded && d.Change != snapshot.Removed {
			n[sc.Reason]++
		}
	}
	var parts []string
	for _, k := range []struct{ reason, one, many string }{
		{ReasonCounter, "counter", "counters"}, {ReasonRNGState, "RNG state", "RNG states"},
		{ReasonExcluded, "excluded", "excluded"}, {ReasonNotIncluded, "not included", "not included"},
	} {
		switch c := n[k.reason]; {
		case c == 1:
			parts = append(parts, "1 "+k.one)
		case c > 1:
			parts = append(parts, fmt.Sprintf("%d %s", c, k.many))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "**Not thresholded:** " + strings.Join(parts, ", ") + " (reported in the table, never judged by a limit or the NaN/Inf rule)"
}
