package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

type inspectOptions struct {
	file string
	from string
	json bool
}

func newInspectCommand(e *env) *cobra.Command {
	var o inspectOptions
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Show a snapshot's header, chain values and arrays (any supported format)",
		Long: `Print what FILE holds. For WTXT: the meta values, root and chain values,
signature key id, and a table of arrays (name, dtype, shape, bytes, chunks,
rows per chunk, HMAC state). For other formats: the arrays and the
format-specific attributes snapd carries into WTXT. For a DELTA v2 file
(.wtxtdelta): the base it applies to (base_sha256_all), the target's meta
and root values, and per array the chunks it carries (read by structure:
delta apply checks their bytes against the base).

inspect checks the file's integrity as it reads it (a WTXT file is fully
verified without keys) but checks no signature: use snapd verify for that.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.file = args[0]
			return runInspect(cmd.Context(), e, &o)
		},
	}
	cmd.Flags().StringVar(&o.from, "from", "", usageFrom)
	cmd.Flags().BoolVar(&o.json, "json", false, usageJSON)
	return cmd
}

type inspectArray struct {
	Name         string            `json:"name"`
	DType        string            `json:"dtype"`
	Shape        []int64           `json:"shape"`
	Bytes        int64             `json:"bytes"`
	Chunks       int64             `json:"chunks,omitempty"`
	RowsPerChunk int64             `json:"rows_per_chunk,omitempty"`
	HMAC         string            `json:"hmac,omitempty"`
	Attrs        map[string]string `json:"attrs,omitempty"`
}

type inspectJSON struct {
	File   string            `json:"file"`
	Format string            `json:"format"`
	Meta   map[string]any    `json:"meta,omitempty"`
	Attrs  map[string]string `json:"attrs,omitempty"`
	Audit  string            `json:"audit,omitempty"`
	// Diagnostics are the reader's notes about the file (not data).
	Diagnostics []string       `json:"diagnostics,omitempty"`
	Arrays      []inspectArray `json:"arrays"`
}

func runInspect(ctx context.Context, e *env, o *inspectOptions) error {
	reg := newRegistry()
	h, err := readHead(o.file, 64)
	if err != nil && !isDir(o.file) { // a directory is read by openSnapshot
		return ioError{err}
	}
	if isDelta(h) && (o.from == "" || o.from == "delta") {
		return inspectDelta(ctx, e, o)
	}
	out := inspectJSON{File: o.file, Arrays: []inspectArray{}}
	if (o.from == "" && wtxt.New().Sniff(h)) || o.from == "wtxt" {
		f, err := os.Open(o.file)
		if err != nil {
			return ioError{err}
		}
		defer f.Close()
		// DeferWSUM: a streamed file's other failures are not masked by
		// its missing WSUM; the deferred checks are noted below.
		rep, verr := wtxt.Verify(ctx, f, wtxt.VerifyOptions{File: o.file, DeferWSUM: true})
		var werr *wtxt.Error
		if verr != nil && (!errors.As(verr, &werr) || rep.Header == nil) {
			return verr
		}
		out.Format = "wtxt"
		out.Meta = metaJSON(rep.Header)
		out.Audit = rep.Audit
		for _, a := range rep.Arrays {
			out.Arrays = append(out.Arrays, inspectArray{Name: a.Name, DType: a.DType, Shape: a.Shape, Bytes: a.Bytes,
				Chunks: a.Chunks, RowsPerChunk: a.RowsPerChunk, HMAC: a.HMAC})
		}
		if verr != nil {
			// Text: what was read, then the error. JSON: the error object
			// (errjson.go), which names where the file is damaged.
			if !o.json {
				printInspect(e.stdout, &out, false)
			}
			return verr
		}
		if rep.Streamed {
			out.Meta["note"] = "streamed: root values are in the WSUM file (not checked here: " + checksText(rep.Deferred) + ")"
		}
		return printInspect(e.stdout, &out, o.json)
	}
	src, err := openSnapshot(ctx, reg, o.file, o.from)
	if err != nil {
		return err
	}
	defer src.Close()
	out.Format = src.Codec.Name()
	out.Attrs = src.Attrs
	for _, d := range src.Diagnostics {
		out.Diagnostics = append(out.Diagnostics, d.String())
	}
	for _, a := range src.Sorted() {
		n, _ := a.NumBytes()
		ia := inspectArray{Name: a.Name, DType: a.DType.String(), Shape: a.Shape, Bytes: n, Attrs: a.Attrs}
		if ia.Shape == nil {
			ia.Shape = []int64{}
		}
		out.Arrays = append(out.Arrays, ia)
	}
	return printInspect(e.stdout, &out, o.json)
}

func printInspect(w io.Writer, out *inspectJSON, asJSON bool) error {
	if asJSON {
		return writeJSON(w, out)
	}
	fmt.Fprintf(w, "%s: %s, %d arrays\n", out.File, out.Format, len(out.Arrays))
	if out.Meta != nil {
		keys := make([]string, 0, len(out.Meta))
		for k := range out.Meta {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch k {
			case "gen": // the number; gen_text is shown as written
				continue
			case "gen_text":
				fmt.Fprintf(w, "  %-12s %v\n", "gen:", out.Meta[k])
				continue
			}
			fmt.Fprintf(w, "  %-12s %v\n", k+":", out.Meta[k])
		}
	}
	for _, d := range out.Diagnostics {
		fmt.Fprintf(w, "  note %s\n", d)
	}
	for _, k := range slices.Sorted(maps.Keys(out.Attrs)) {
		fmt.Fprintf(w, "  attr %s = %s\n", k, out.Attrs[k])
	}
	if out.Audit != "" {
		fmt.Fprintf(w, "  audit (unsigned): %s\n", out.Audit)
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	if out.Format == "wtxt" {
		fmt.Fprintln(tw, "  NAME\tDTYPE\tSHAPE\tBYTES\tCHUNKS\tROWS/CHUNK\tAUTHENTICATED")
	} else {
		fmt.Fprintln(tw, "  NAME\tDTYPE\tSHAPE\tBYTES\tATTRS")
	}
	var total int64
	for _, a := range out.Arrays {
		total += a.Bytes
		shape := snapshot.FormatShape(a.Shape)
		if out.Format == "wtxt" {
			auth := "no (" + a.HMAC + ")"
			if a.HMAC == wtxt.HMACVerified {
				auth = "yes"
			}
			rpc := "-"
			if a.RowsPerChunk > 0 {
				rpc = fmt.Sprint(a.RowsPerChunk)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%s\t%s\n", a.Name, a.DType, shape, a.Bytes, a.Chunks, rpc, auth)
		} else {
			var at []string
			for _, k := range slices.Sorted(maps.Keys(a.Attrs)) {
				at = append(at, k+"="+a.Attrs[k])
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\n", a.Name, a.DType, shape, a.Bytes, strings.Join(at, " "))
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "  total: %d raw bytes\n", total)
	return nil
}

// checksText joins check names with commas.
func checksText(cs []wtxt.Check) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(c))
	}
	return b.String()
}
