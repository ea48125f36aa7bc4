package dcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/dirfs"
	"github.com/snapd-ml/snapd/snapshot"
)

// File names of a DCP directory.
const (
	metadataName = ".metadata"
	// Suffix is the extension of torch's item files (__<rank>_<n>.distcp).
	Suffix = ".distcp"
)

// Attribute keys this package reads and writes (see the package
// documentation).
const (
	// AttrKind (array) is "bytes" for a non-tensor item, whose array is
	// the item's torch.save bytes (u8); tensors have no AttrKind.
	AttrKind = "dcp.kind"
	// AttrValue (array) is a bytes item's object as the torch codec
	// describes it (its torch.tree), when it decodes: informational, for
	// diffs and reviews; Write ignores it.
	AttrValue = "dcp.value"
	// AttrFQN (array) is the item's FQN when the array name differs (an
	// FQN that is not a portable array name).
	AttrFQN = "dcp.fqn"
	// AttrRequiresGrad, AttrPinMemory (array): "true" when the tensor's
	// TensorProperties say so.
	AttrRequiresGrad = "dcp.requires_grad"
	AttrPinMemory    = "dcp.pin_memory"
	// AttrMemoryFormat (array): "channels_last" or "preserve_format"
	// when the TensorProperties say so.
	AttrMemoryFormat = "dcp.memory_format"
	// AttrPlannerData (snapshot) is planner_data (FQN -> its key path in
	// the nested state dict) as canonical JSON, when it is not the
	// trivial one of a flat state dict (every FQN its own one-key path).
	AttrPlannerData = "dcp.planner_data"

	kindBytes = "bytes"
)

var memoryFormats = []string{"contiguous_format", "channels_last", "preserve_format"}

// Limits bound what Open reads; zero fields take the defaults.
type Limits struct {
	MaxMetadataBytes int64 // size of .metadata (default 256 MiB)
	MaxItems         int   // state_dict_metadata entries (default 1,000,000)
	MaxChunks        int   // chunks in all (default 4,000,000)
	MaxRank          int   // tensor dimensions (default 64)
	MaxCells         int   // regions one tensor's chunks cut it into (default 4,000,000)
	MaxFiles         int   // item files (default 100,000)
}

// DefaultLimits are the bounds used for zero Limits fields.
var DefaultLimits = Limits{
	MaxMetadataBytes: 256 << 20,
	MaxItems:         1_000_000,
	MaxChunks:        4_000_000,
	MaxRank:          64,
	MaxCells:         4_000_000,
	MaxFiles:         100_000,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxMetadataBytes > 0 {
		d.MaxMetadataBytes = l.MaxMetadataBytes
	}
	if l.MaxItems > 0 {
		d.MaxItems = l.MaxItems
	}
	if l.MaxChunks > 0 {
		d.MaxChunks = l.MaxChunks
	}
	if l.MaxRank > 0 {
		d.MaxRank = l.MaxRank
	}
	if l.MaxCells > 0 {
		d.MaxCells = l.MaxCells
	}
	if l.MaxFiles > 0 {
		d.MaxFiles = l.MaxFiles
	}
	return d
}

// Options tune Open.
type Options struct {
	// Torch reads the items: each is a torch.save archive (the torch
	// codec, formats/torch; *formats.Registry's "torch"). Required.
	Torch formats.Codec
	// Limits bound .metadata and the chunk layouts.
	Limits Limits
	// MaxDecoded is the decode budget of each item file (see
	// formats.DecodeOptions.MaxDecoded); 0 selects
	// formats.DefaultMaxDecoded of the file's size.
	MaxDecoded int64
	// Log receives notes (nil: discard).
	Log *slog.Logger
}

// Dir is a DCP directory read as one snapshot. Array data aliases memory
// maps of the item files: keep the Dir open while the snapshot is used.
type Dir struct {
	Snapshot *snapshot.Snapshot
	Metadata *Metadata
	// Bytes is the total size of the item files read plus .metadata.
	Bytes int64
	maps  []*snapshot.Mapping
}

// Close unmaps every file.
func (d *Dir) Close() error {
	var errs []error
	for _, m := range d.maps {
		errs = append(errs, m.Close())
	}
	d.maps = nil
	return errors.Join(errs...)
}

// IsDCP reports whether dir looks like a DCP checkpoint: it holds a
// .metadata file or an item file (*.distcp). A directory with item files
// and no .metadata is a DCP checkpoint still being written; Open fails
// on it with ErrIncomplete. Only the directory's entries are listed;
// nothing is opened.
func IsDCP(dir string) (bool, error) {
	r, err := dirfs.OpenRoot(dir)
	if err != nil {
		return false, fsErr(err)
	}
	defer r.Close()
	names, err := r.Names(DefaultLimits.MaxFiles * 10)
	if err != nil {
		return false, fsErr(err)
	}
	for _, n := range names {
		if n == metadataName || strings.HasSuffix(n, Suffix) {
			return true, nil
		}
	}
	return false, nil
}

// Open reads the DCP directory dir as one snapshot (see the package
// documentation). A directory without .metadata, or whose .metadata
// places items in files that do not exist or are too short, fails with
// an error wrapping ErrIncomplete.
func Open(ctx context.Context, dir string, opts Options) (*Dir, error) {
	if opts.Torch == nil {
		return nil, errors.New("dcp: Options.Torch (the torch codec that reads the items) is not set")
	}
	lim := opts.Limits.withDefaults()
	r, err := dirfs.OpenRoot(dir)
	if err != nil {
		return nil, fsErr(err)
	}
	defer r.Close()
	mdPath := filepath.Join(dir, metadataName)
	f, err := openFile(r, metadataName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errf(mdPath, "", -1, "", ErrIncomplete, "no .metadata (torch writes it last, once every item is written): the checkpoint is incomplete or still being written")
	}
	if err != nil {
		return nil, err
	}
	b, err := dirfs.ReadSmall(f, lim.MaxMetadataBytes)
	f.Close()
	if err != nil {
		return nil, fsErr(err)
	}
	md, err := ParseMetadata(ctx, b, mdPath, lim)
	if err != nil {
		return nil, err
	}
	d, err := assemble(ctx, r, md, lim, opts)
	if err != nil {
		return nil, err
	}
	d.Bytes += int64(len(b))
	return d, nil
}

// itemFile is a mapped item file.
type itemFile struct {
	name   string
	path   string
	m      *snapshot.Mapping
	budget *formats.Budget
}

// assemble maps the item files md names and builds the snapshot.
func assemble(ctx context.Context, r *dirfs.Root, md *Metadata, lim Limits, opts Options) (*Dir, error) {
	d := &Dir{Metadata: md, Snapshot: &snapshot.Snapshot{Meta: snapshot.DefaultMeta()}}
	ok := false
	defer func() {
		if !ok {
			d.Close()
		}
	}()
	// Every item file, checked to hold its items, before anything is
	// decoded: a partial directory is never half-read.
	files := map[string]*itemFile{}
	first := map[string]string{} // file -> first FQN placed in it, for errors
	need := map[string]int64{}
	where := map[string]string{}
	note := func(fqn, w string, st Storage) {
		if _, ok := first[st.File]; !ok {
			first[st.File] = fqn
		}
		if end := st.Offset + st.Length; end > need[st.File] {
			need[st.File] = end
			where[st.File] = fqn + "\x00" + w
		}
	}
	for _, it := range md.Items {
		if it.Kind == Bytes {
			note(it.FQN, "item", it.Storage)
			continue
		}
		for i, c := range it.Chunks {
			note(it.FQN, fmt.Sprintf("chunk %d", i), c.Storage)
		}
	}
	if len(first) > lim.MaxFiles {
		return nil, errf(r.Path(), "", -1, "", ErrLimit, ".metadata names %d item files, more than %d", len(first), lim.MaxFiles)
	}
	names := make([]string, 0, len(first))
	for n := range first {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		full := filepath.Join(r.Path(), n)
		f, err := openFile(r, n)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errf(full, "", -1, first[n], ErrIncomplete, "item file listed by .metadata does not exist (yet)")
		}
		if err != nil {
			return nil, err
		}
		m, err := snapshot.MapOpenFile(f)
		f.Close()
		if err != nil {
			return nil, err
		}
		d.maps = append(d.maps, m)
		d.Bytes += m.Size()
		if need[n] > m.Size() {
			fqn, w, _ := strings.Cut(where[n], "\x00")
			return nil, errf(full, w, m.Size(), fqn, ErrIncomplete, "item ends at byte %d, beyond the file's %d bytes (a file still being written, or an item pointing outside its file)", need[n], m.Size())
		}
		limit := opts.MaxDecoded
		if limit <= 0 {
			limit = formats.DefaultMaxDecoded(m.Size())
		}
		files[n] = &itemFile{name: n, path: full, m: m, budget: formats.NewBudget(limit)}
	}
	names2 := arrayNames(md.Items)
	for _, it := range md.Items {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var a *snapshot.Array
		var err error
		if it.Kind == Bytes {
			a, err = bytesArray(ctx, it, files[it.Storage.File], opts)
		} else {
			a, err = tensorArray(ctx, it, files, lim, opts)
		}
		if err != nil {
			return nil, err
		}
		a.Name = names2[it.FQN]
		if a.Name != it.FQN {
			a.Attrs = withAttr(a.Attrs, AttrFQN, it.FQN)
		}
		d.Snapshot.Arrays = append(d.Snapshot.Arrays, a)
	}
	if pd := plannerJSON(md); pd != "" {
		d.Snapshot.Attrs = map[string]string{AttrPlannerData: pd}
	}
	sort.Slice(d.Snapshot.Arrays, func(i, j int) bool { return d.Snapshot.Arrays[i].Name < d.Snapshot.Arrays[j].Name })
	if err := d.Snapshot.Validate(); err != nil {
		return nil, errf(r.Path(), "", -1, "", ErrCorrupt, "%v", err)
	}
	ok = true
	return d, nil
}

func withAttr(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

// bytesArray is a non-tensor item: its bytes, verbatim, as a u8 array.
func bytesArray(ctx context.Context, it *Item, f *itemFile, opts Options) (*snapshot.Array, error) {
	st := it.Storage
	src := snapshot.Section(f.m.Guarded(), st.Offset, st.Length)
	a := &snapshot.Array{DType: snapshot.U8, Shape: []int64{st.Length}, Data: src, Attrs: map[string]string{AttrKind: kindBytes}}
	// What the object is, when the torch codec can say (no tensors).
	if s, err := opts.Torch.Decode(ctx, src, st.Length, formats.DecodeOptions{Name: f.path, SharedBudget: f.budget}); err == nil && len(s.Arrays) == 0 {
		if v, ok := s.Attrs["torch.tree"]; ok && len(v) <= 4096 {
			a.Attrs[AttrValue] = v
		}
	} else if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return a, nil
}

// tensorArray decodes a tensor's chunks and assembles them.
func tensorArray(ctx context.Context, it *Item, files map[string]*itemFile, lim Limits, opts Options) (*snapshot.Array, error) {
	boxes := make([]box, len(it.Chunks))
	for i, c := range it.Chunks {
		boxes[i] = box{off: c.Offsets, size: c.Sizes}
	}
	f0 := files[it.Chunks[0].Storage.File]
	t, err := planTiling(it.Size, boxes, lim.MaxCells, f0.budget)
	if err != nil {
		return nil, errf(f0.path, "", -1, it.FQN, classOf(err), "chunk layout: %v", stripClass(err))
	}
	data := make([]snapshot.Source, len(it.Chunks))
	decoded := map[string]snapshot.Source{}
	for i, c := range it.Chunks {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		k := offKey(c.Offsets)
		if s, ok := decoded[k]; ok {
			data[i] = s
			continue
		}
		s, err := decodeChunk(ctx, it, i, files[c.Storage.File], opts)
		if err != nil {
			return nil, err
		}
		decoded[k] = s
		data[i] = s
	}
	a := &snapshot.Array{DType: it.DType, Shape: append([]int64{}, it.Size...)}
	switch {
	case volume(it.Size) == 0:
		a.Data = snapshot.Bytes{}
	case len(decoded) == 1 && equalInts(it.Chunks[0].Sizes, it.Size):
		a.Data = data[0] // one chunk, the whole tensor: zero-copy
	default:
		g, err := newGather(t, int64(it.DType.Size()), data)
		if err != nil {
			return nil, errf(f0.path, "", -1, it.FQN, classOf(err), "%v", stripClass(err))
		}
		a.Data = g
	}
	p := it.Props
	if p.RequiresGrad {
		a.Attrs = withAttr(a.Attrs, AttrRequiresGrad, "true")
	}
	if p.PinMemory {
		a.Attrs = withAttr(a.Attrs, AttrPinMemory, "true")
	}
	if p.MemoryFormat != 0 {
		a.Attrs = withAttr(a.Attrs, AttrMemoryFormat, memoryFormats[p.MemoryFormat])
	}
	return a, nil
}

// decodeChunk reads chunk i of it: a torch.save archive of one tensor of
// the chunk's sizes and the item's dtype.
func decodeChunk(ctx context.Context, it *Item, i int, f *itemFile, opts Options) (snapshot.Source, error) {
	c := it.Chunks[i]
	w := fmt.Sprintf("chunk %d", i)
	sec := snapshot.Section(f.m.Guarded(), c.Storage.Offset, c.Storage.Length)
	s, err := opts.Torch.Decode(ctx, sec, c.Storage.Length, formats.DecodeOptions{Name: f.path, SharedBudget: f.budget})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &formats.Error{Format: "dcp", File: f.path, Part: w, Offset: c.Storage.Offset, Tensor: cut(it.FQN), Check: "item is not a readable torch.save archive", Err: err}
	}
	bad := func(format string, args ...any) error {
		return errf(f.path, w, c.Storage.Offset, it.FQN, ErrCorrupt, format, args...)
	}
	if len(s.Arrays) != 1 {
		return nil, bad("item holds %d tensors, want the chunk's one", len(s.Arrays))
	}
	a := s.Arrays[0]
	var tree map[string]any
	if json.Unmarshal([]byte(s.Attrs["torch.tree"]), &tree) != nil || tree["tensor"] != a.Name {
		return nil, bad("item is not a bare tensor (torch.save of the chunk)")
	}
	if a.DType != it.DType {
		return nil, bad("item tensor is %s, the metadata says %s", a.DType, it.DType)
	}
	if !equalInts(a.Shape, c.Sizes) {
		return nil, bad("item tensor has shape %v, the chunk's sizes are %v", a.Shape, c.Sizes)
	}
	if a.Data == nil {
		return snapshot.Bytes{}, nil
	}
	return a.Data, nil
}

// classOf is the sentinel of this package err wraps (ErrCorrupt if none).
func classOf(err error) error {
	for _, s := range []error{ErrLimit, ErrUnsupported, ErrIncomplete, ErrUnsafe, ErrCorrupt} {
		if errors.Is(err, s) {
			return s
		}
	}
	return ErrCorrupt
}

// stripClass is err's message without its leading "<sentinel>: ".
func stripClass(err error) string {
	msg := err.Error()
	c := classOf(err).Error() + ": "
	return strings.TrimPrefix(msg, c)
}

// arrayNames maps each FQN to its array name: the FQN when it is a
// portable name, else its bytes with the others replaced by '_' (cut to
// 1000 bytes), with "_2", "_3", ... when that name is taken. Items are
// sorted by FQN, so the result depends only on the set of FQNs.
func arrayNames(items []*Item) map[string]string {
	out := make(map[string]string, len(items))
	taken := map[string]bool{}
	for _, it := range items {
		if snapshot.PortableName(it.FQN) {
			out[it.FQN] = it.FQN
			taken[it.FQN] = true
		}
	}
	for _, it := range items {
		if _, ok := out[it.FQN]; ok {
			continue
		}
		b := []byte(it.FQN)
		if len(b) > 1000 {
			b = b[:1000]
		}
		for i, c := range b {
			if !snapshot.NameByte(c) {
				b[i] = '_'
			}
		}
		base := string(b)
		if base == "" || base == snapshot.AttrsArrayName {
			base = "_" + base
		}
		name := base
		for n := 2; taken[name]; n++ {
			name = base + "_" + strconv.Itoa(n)
		}
		taken[name] = true
		out[it.FQN] = name
	}
	return out
}

// plannerJSON is AttrPlannerData's value: "" when md has no planner data
// or only the trivial one (each FQN its own one-key path).
func plannerJSON(md *Metadata) string {
	if len(md.PlannerData) == 0 {
		return ""
	}
	trivial := true
	for _, it := range md.Items {
		p, ok := md.PlannerData[it.FQN]
		if !ok || len(p) != 1 || p[0].IsInt || p[0].Str != it.FQN {
			trivial = false
			break
		}
	}
	if trivial {
		return ""
	}
	fqns := make([]string, 0, len(md.PlannerData))
	for k := range md.PlannerData {
		fqns = append(fqns, k)
	}
	sort.Strings(fqns)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range fqns {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteString(":[")
		for j, e := range md.PlannerData[k] {
			if j > 0 {
				b.WriteByte(',')
			}
			if e.IsInt {
				b.WriteString(strconv.FormatInt(e.Int, 10))
			} else {
				eb, _ := json.Marshal(e.Str)
				b.Write(eb)
			}
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
	return b.String()
}
