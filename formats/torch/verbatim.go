package torch

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/snapd-ml/snapd/formats/pickle"
	"github.com/snapd-ml/snapd/snapshot"
)

// Attributes of a checkpoint carried verbatim (see the package
// documentation, "Pickles snapd does not interpret").
const (
	// VerbatimName is the array holding the file's bytes.
	VerbatimName = "torch.verbatim"
	// AttrVerbatim (array) is "1" on the array holding the original
	// file's bytes (u8, one dimension): Encode writes them back as they
	// are.
	AttrVerbatim = "torch.verbatim"
	// AttrFile (array) is the file's base name when it was decoded.
	AttrFile = "torch.file"
	// AttrUnknown (array) lists the globals outside the allowlist and
	// where the object holds them, canonical JSON:
	// [["key path","module.name"],...] in walk order, at most
	// MaxUnknownListed entries (then ["...","N more"]).
	AttrUnknown = "torch.unknown"
	// AttrDerived (array) is "1" on a tensor extracted from a file carried
	// verbatim: it is there to be diffed and inspected; the verbatim bytes
	// are what Encode restores.
	AttrDerived = "torch.derived"
)

// MaxUnknownListed bounds the entries of AttrUnknown.
const MaxUnknownListed = 64

// unknownGlobals lists the placeholders obj holds as (key path, global)
// pairs, each pair once, in walk order.
func unknownGlobals(obj any) ([][2]string, error) {
	us, err := pickle.Unknowns(obj, pickle.WalkLimits{MaxDepth: maxDepth, MaxNodes: maxNodes})
	if err != nil {
		return nil, err
	}
	seen := map[[2]string]bool{}
	var out [][2]string
	for _, u := range us {
		o := u.Opaque
		if o.Class != nil {
			o = o.Class
		}
		p := [2]string{truncate(u.Path, 200), pickle.PrintableName(o.FullName())}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// verbatimSnapshot is the snapshot of a checkpoint whose pickle names
// globals outside the allowlist: the file's bytes as one u8 array
// (AttrVerbatim) and every tensor the object holds, by key path, as an
// array marked AttrDerived. No torch.tree is kept: the bytes are the
// checkpoint.
func (d *decoder) verbatimSnapshot(obj any, unknown [][2]string) (*snapshot.Snapshot, error) {
	w := &walker{open: map[any]bool{}, names: map[string]bool{VerbatimName: true}}
	err := pickle.Walk(obj, pickle.WalkLimits{MaxDepth: maxDepth, MaxNodes: maxNodes}, func(path []string, v any) bool {
		if t, ok := v.(*tensorVal); ok {
			w.tensors = append(w.tensors, namedTensor{w.arrayName(path), t})
		}
		return true
	})
	if err != nil {
		return nil, d.errf("data.pkl", -1, ErrLimit, "%v", err)
	}
	list := make([]any, 0, min(len(unknown), MaxUnknownListed)+1)
	for i, u := range unknown {
		if i == MaxUnknownListed {
			list = append(list, []any{"...", fmt.Sprintf("%d more", len(unknown)-i)})
			break
		}
		list = append(list, []any{u[0], u[1]})
	}
	uj, err := canonicalJSON(list)
	if err != nil {
		return nil, d.errf("data.pkl", -1, ErrCorrupt, "unknown globals: %v", err)
	}
	va := &snapshot.Array{Name: VerbatimName, DType: snapshot.U8, Shape: []int64{d.size},
		Data:  snapshot.Section(d.r, 0, d.size),
		Attrs: map[string]string{AttrVerbatim: "1", AttrUnknown: string(uj)}}
	if d.file != "" {
		if base := filepath.Base(d.file); base != "." && base != string(filepath.Separator) {
			va.Attrs[AttrFile] = base
		}
	}
	arrays, err := d.arrays(w)
	if err != nil {
		return nil, err
	}
	for _, a := range arrays {
		if a.Attrs == nil {
			a.Attrs = map[string]string{}
		}
		a.Attrs[AttrDerived] = "1"
	}
	s := &snapshot.Snapshot{Meta: snapshot.DefaultMeta(), Arrays: append([]*snapshot.Array{va}, arrays...)}
	sort.Slice(s.Arrays, func(i, j int) bool { return s.Arrays[i].Name < s.Arrays[j].Name })
	return s, nil
}

// verbatimArray returns the array of s holding a verbatim checkpoint, or
// nil when s has none. A snapshot with one may hold only arrays derived
// from it besides.
func verbatimArray(s *snapshot.Snapshot) (*snapshot.Array, error) {
	var v *snapshot.Array
	for _, a := range s.Arrays {
		if a.Attrs[AttrVerbatim] == "" {
			continue
		}
		if a.Attrs[AttrVerbatim] != "1" {
			return nil, encErr("array %q: %s is %s, not 1", a.Name, AttrVerbatim, strconv.QuoteToASCII(truncate(a.Attrs[AttrVerbatim], 20)))
		}
		if v != nil {
			return nil, encErr("arrays %q and %q both hold a verbatim checkpoint (%s)", v.Name, a.Name, AttrVerbatim)
		}
		if a.DType != snapshot.U8 || len(a.Shape) != 1 {
			return nil, encErr("array %q: a verbatim checkpoint is a one-dimensional u8 array, not %s%v", a.Name, a.DType, a.Shape)
		}
		v = a
	}
	if v == nil {
		return nil, nil
	}
	for _, a := range s.Arrays {
		if a != v && a.Attrs[AttrDerived] != "1" {
			return nil, encErr("array %q is neither the verbatim checkpoint %q nor derived from it (%s)", a.Name, v.Name, AttrDerived)
		}
	}
	return v, nil
}

// writeVerbatim copies a verbatim checkpoint's bytes to w.
func writeVerbatim(ctx context.Context, w io.Writer, a *snapshot.Array) error {
	n := a.Shape[0]
	const chunk = 1 << 20
	buf := make([]byte, min(n, chunk))
	for off := int64(0); off < n; off += chunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := buf[:min(chunk, n-off)]
		if err := snapshot.ReadFullAt(a.Data, b, off); err != nil {
			return fmt.Errorf("torch: array %q: %w", a.Name, err)
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}
