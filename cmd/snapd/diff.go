package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/review"
	"github.com/snapd-ml/snapd/snapshot"
)

type diffOptions struct {
	a, b         string
	json, md     bool
	rowsPerChunk int64
	pic          pictureOptions // --svg, --html (diffpicture.go)
	include      []string       // compare only the arrays these globs match
	exclude      []string       // leave out the arrays these globs match
}

func newDiffCommand(e *env) *cobra.Command {
	var o diffOptions
	cmd := &cobra.Command{
		Use:   "diff A B",
		Short: "Say which rows of which arrays changed between two snapshots, in numbers",
		Long: `Compare two snapshots in any supported format, streaming. For every array:
added, removed, reshaped, retyped, or the changed row ranges and WTXT chunks,
the number of changed elements and, for float dtypes, max |Δ|, mean |Δ| (over
changed elements), relative L2 change and the elements that became (or
stopped being) NaN or ±Inf; integer dtypes get counts and max |Δ|. A change
to or from NaN makes max/mean |Δ| and rel L2 read NaN (inf for a change to or
from ±Inf); the numbers over the elements finite on both sides follow.
With --json, NaN and infinities are null plus a "nonfinite" entry
(docs/DIFF-JSON.md).

--svg OUT draws the changes: one heatmap strip per array (layers in
order), rows binned to --width pixels, colour = max |Δ| (--scale abs) or
relative change (--scale rel) of the bin on a log scale of that array's
own (from its smallest to its largest changed bin, given on its line, so
a step counter's jump does not wash out a weight's small change),
unchanged rows grey, NaN/Inf magenta. --html OUT writes a self-contained
page with the picture and the table.

--exclude PATTERN leaves the arrays it matches out of the comparison, the
output, the picture and the exit status; --include PATTERN keeps only the
arrays some include matches (both repeatable). Patterns are path.Match
globs over whole array names (a dot is a plain character, '*' does not
cross '/'); where an include and an exclude both match, the longer pattern
wins (an exclude on equal length). The output says how many arrays were
left out (JSON: "excluded").

Generation metadata (snapd request-snapshot --meta, stored in WTXT) is
compared too: each changed key is listed first, "meta: loss 0.52 -> 0.41"
("added"/"removed" for a key on one side only; JSON: "meta", a list of
{key, old, new}; Markdown: a table old → new), and a change counts as a
difference.

Exit status: 0 when the snapshots are equal (within the included arrays,
metadata included), 1 when they differ (like diff(1)), 2 on usage or I/O
errors.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.a, o.b = args[0], args[1]
			return runDiff(cmd.Context(), e, &o)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, usageJSON)
	cmd.Flags().BoolVar(&o.md, "markdown", false, usageMarkdown)
	cmd.Flags().Int64Var(&o.rowsPerChunk, "rows-per-chunk", 0, "chunk geometry for naming changed chunks (0 = profile default)")
	cmd.MarkFlagsMutuallyExclusive("json", "markdown")
	cmd.Flags().StringVar(&o.pic.svg, "svg", "", "also draw the changed rows per array as an SVG picture into `OUT`")
	cmd.Flags().StringVar(&o.pic.html, "html", "", "also write a self-contained HTML page (picture + table) into `OUT`")
	cmd.Flags().StringVar(&o.pic.scale, "scale", "abs", "picture colour: abs (max |Δ|) or rel (max |Δ| / max |old|)")
	cmd.Flags().IntVar(&o.pic.width, "width", 0, "picture strip width in pixels (0 = 720)")
	cmd.Flags().StringArrayVar(&o.include, "include", nil, "compare only the arrays this glob `PATTERN` matches (repeatable)")
	cmd.Flags().StringArrayVar(&o.exclude, "exclude", nil, "leave out the arrays this glob `PATTERN` matches: not compared, not shown, not in the exit status (repeatable)")
	return cmd
}

// errDiffer makes `snapd diff` exit 1 when the inputs differ, without an
// error message.
type errDiffer struct{}

func (errDiffer) Error() string { return "snapshots differ" }

func runDiff(ctx context.Context, e *env, o *diffOptions) error {
	if err := o.pic.check(); err != nil {
		return err
	}
	for _, p := range append(append([]string(nil), o.include...), o.exclude...) {
		if err := review.CheckPattern(p); err != nil {
			return usageError{fmt.Errorf("--include/--exclude: %w", err)}
		}
	}
	reg := newRegistry()
	a, err := openSnapshot(ctx, reg, o.a, "")
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := openSnapshot(ctx, reg, o.b, "")
	if err != nil {
		return err
	}
	defer b.Close()
	var opts snapshot.DiffOptions
	switch {
	case o.rowsPerChunk > 0:
		opts.RowsPerChunk = func(*snapshot.Array, int64) int64 { return o.rowsPerChunk }
	case b.Codec.Name() == "wtxt" && b.m != nil:
		// Name the chunks B really has (its idx lines), not the default:
		// wtxt.ReadIndex skips the base64 by arithmetic (cost per chunk)
		// and caps its memory (wtxt.DefaultMaxIndexBytes).
		x, err := wtxt.ReadIndex(ctx, o.b, b.m, b.m.Size())
		if err != nil {
			return err
		}
		opts.RowsPerChunk = func(a *snapshot.Array, rowSize int64) int64 {
			if ia := x.Array(a.Name); ia != nil {
				if ia.RowsPerChunk > 0 {
					return ia.RowsPerChunk
				}
				if rowSize > 0 {
					return max(1, wtxt.UnblockedChunk/rowSize) // fixed 32768-byte chunks
				}
			}
			return snapshot.DefaultRowsPerChunk(rowSize)
		}
	}
	sa, sb, excluded := scopeSnapshots(a.Snapshot, b.Snapshot, o.include, o.exclude)
	ds, err := snapshot.Diff(ctx, sa, sb, opts)
	if err != nil {
		return err
	}
	if err := writeDiffPictures(ctx, &o.pic, o.a+" → "+o.b, sa, sb, ds); err != nil {
		return err
	}
	metaChanges := snapshot.DiffUserMeta(a.Snapshot.UserMeta, b.Snapshot.UserMeta)
	switch {
	case o.json:
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			A        string               `json:"a"`
			B        string               `json:"b"`
			Arrays   []snapshot.ArrayDiff `json:"arrays"`
			Excluded []string             `json:"excluded,omitempty"`
			Meta     []metaChangeJSON     `json:"meta,omitempty"`
		}{o.a, o.b, diffJSON(ds), excluded, metaChangesJSON(metaChanges)}); err != nil {
			return ioError{err}
		}
	case o.md:
		if len(metaChanges) > 0 {
			io.WriteString(e.stdout, review.MetaTable(a.Snapshot.UserMeta, b.Snapshot.UserMeta)+"\n")
		}
		io.WriteString(e.stdout, review.DiffTable(ds, nil))
		if len(excluded) > 0 {
			fmt.Fprintf(e.stdout, "\n%d array(s) left out by --include/--exclude.\n", len(excluded))
		}
	default:
		writeMetaChanges(e.stdout, metaChanges)
		writeDiffText(e.stdout, ds)
		if len(excluded) > 0 {
			fmt.Fprintf(e.stdout, "%d array(s) left out by --include/--exclude\n", len(excluded))
		}
	}
	for _, d := range ds {
		if d.Change != snapshot.Unchanged {
			return errDiffer{}
		}
	}
	if len(metaChanges) > 0 {
		return errDiffer{}
	}
	return nil
}

func describe(d snapshot.ArrayDiff) string {
	switch d.Change {
	case snapshot.Added:
		return fmt.Sprintf("added %s%s", d.DType, snapshot.FormatShape(d.Shape))
	case snapshot.Removed:
		return fmt.Sprintf("removed %s%s", d.DType, snapshot.FormatShape(d.Shape))
	case snapshot.Reshaped:
		return fmt.Sprintf("reshaped %s -> %s", snapshot.FormatShape(d.OldShape), snapshot.FormatShape(d.Shape))
	case snapshot.Retyped:
		return fmt.Sprintf("retyped %s -> %s", d.OldDType, d.DType)
	case snapshot.Unchanged:
		return "unchanged"
	}
	s := fmt.Sprintf("%d of %d elements in rows %s (chunks %s)", d.ChangedElements, d.Elements, snapshot.FormatRows(d.ChangedRows, 8), snapshot.FormatInts(d.Chunks, 12))
	if snapshot.IsFloatDType(d.DType) {
		st := snapshot.FormatStat
		s += fmt.Sprintf("; max|Δ| %s mean|Δ| %s relL2 %s", st(d.MaxAbsDelta), st(d.MeanAbsDelta), st(d.RelL2))
		if d.NonFiniteChanged > 0 {
			s += fmt.Sprintf(" (%d finite pairs: max|Δ| %s mean|Δ| %s relL2 %s)", d.FiniteChanged,
				st(d.FiniteMaxAbsDelta), st(d.FiniteMeanAbsDelta), st(d.FiniteRelL2))
		}
		if d.NewNaN+d.NewInf > 0 {
			s += fmt.Sprintf("; NEW NaN %d Inf %d", d.NewNaN, d.NewInf)
		}
		if d.GoneNaN+d.GoneInf > 0 {
			s += fmt.Sprintf("; gone NaN %d Inf %d", d.GoneNaN, d.GoneInf)
		}
	} else {
		s += fmt.Sprintf("; max|Δ| %.0f", d.MaxAbsDelta)
	}
	return s
}

func writeDiffText(w io.Writer, ds []snapshot.ArrayDiff) {
	changed := 0
	for _, d := range ds {
		if d.Change == snapshot.Unchanged {
			continue
		}
		changed++
		fmt.Fprintf(w, "%s: %s\n", d.Name, describe(d))
	}
	fmt.Fprintf(w, "%d of %d arrays changed\n", changed, len(ds))
}

// scopeSnapshots returns shallow copies of a and b holding only the arrays
// in the scope include and exclude describe (review.InScope), and the
// sorted names of the arrays left out (from either side). Without
// patterns, a and b are returned as they are.
func scopeSnapshots(a, b *snapshot.Snapshot, include, exclude []string) (sa, sb *snapshot.Snapshot, excluded []string) {
	if len(include) == 0 && len(exclude) == 0 {
		return a, b, nil
	}
	out := map[string]bool{}
	keep := func(s *snapshot.Snapshot) *snapshot.Snapshot {
		c := *s
		c.Arrays = nil
		for _, x := range s.Arrays {
			if in, _ := review.InScope(include, exclude, x.Name); in {
				c.Arrays = append(c.Arrays, x)
			} else {
				out[x.Name] = true
			}
		}
		return &c
	}
	sa, sb = keep(a), keep(b)
	for n := range out {
		excluded = append(excluded, n)
	}
	slices.Sort(excluded)
	return sa, sb, excluded
}
