package sharddir

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/dirfs"
	"github.com/snapd-ml/snapd/internal/jsonerr"
	"github.com/snapd-ml/snapd/snapshot"
)

// DefaultShardSize is the largest shard Write makes when it shards by
// size and no size is given: 5 GB, as Hugging Face's save_pretrained.
const DefaultShardSize = 5_000_000_000

// DefaultCodec is the shard format Write uses when neither WriteOptions
// nor the recorded layout name one.
const DefaultCodec = "safetensors"

// Codecs finds a codec by name; *formats.Registry implements it.
type Codecs interface {
	ByName(name string) (formats.Codec, error)
}

// WriteOptions tune Write.
type WriteOptions struct {
	// Codecs resolves the recorded and default shard formats.
	Codecs Codecs
	// Codec, when set, is the format of every file written; else each
	// file keeps its recorded format, or DefaultCodec.
	Codec formats.Codec
	// ShardSize > 0 shards by size (HF's greedy rule) even when a layout
	// was recorded; 0 reproduces the recorded layout, or shards by
	// DefaultShardSize when there is none.
	ShardSize int64
	// Encode is passed to each file's encoder. Lossy also drops snapshot
	// attributes that have no place in the directory.
	Encode formats.EncodeOptions
	Log    *slog.Logger
}

// outFile is one file of a planned directory.
type outFile struct {
	name  string
	codec formats.Codec      // nil for text and the index
	snap  *snapshot.Snapshot // with codec
	data  []byte             // without codec
}

// Plan is what Write would write: file names, formats and contents.
type Plan struct {
	Kind  string
	files []outFile
}

// Files returns the planned file names, in writing order.
func (p *Plan) Files() []string {
	var out []string
	for _, f := range p.files {
		out = append(out, f.name)
	}
	return out
}

// MakePlan decides how s is laid out as a directory: the recorded layout
// (AttrLayout, AttrFile, AttrTextPrefix) when there is one and no
// ShardSize is given, else an HF-style index with shards of at most
// ShardSize bytes (a larger tensor gets a shard of its own).
func MakePlan(s *snapshot.Snapshot, opts WriteOptions) (*Plan, error) {
	var lay *Layout
	if v, ok := s.Attrs[AttrLayout]; ok {
		l, err := parseLayout(v)
		if err != nil {
			return nil, err
		}
		lay = l
	}
	p := &Plan{}
	texts, rest, err := splitAttrs(s.Attrs, opts.Encode.Lossy)
	if err != nil {
		return nil, err
	}
	if lay != nil && opts.ShardSize <= 0 {
		err = p.reproduce(s, lay, opts)
	} else {
		err = p.reshard(s, lay, rest, opts)
	}
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, f := range p.files {
		seen[f.name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(texts)) {
		if seen[name] {
			return nil, errf(name, -1, "", ErrInvalidSnapshot, "text attribute names a file that is also a checkpoint file")
		}
		seen[name] = true
		p.files = append(p.files, outFile{name: name, data: []byte(texts[name])})
	}
	return p, nil
}

func parseLayout(v string) (*Layout, error) {
	var l Layout
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, errf(AttrLayout, -1, "", ErrInvalidSnapshot, "attribute is not a layout: %v", jsonerr.Describe(err))
	}
	if l.V != 1 || (l.Kind != KindIndex && l.Kind != KindPlain) {
		return nil, errf(AttrLayout, -1, "", ErrInvalidSnapshot, "unsupported layout: want v 1 and kind %s or %s", KindIndex, KindPlain)
	}
	if l.Kind == KindIndex {
		if err := checkFileName(l.Index); err != nil || !IsIndexName(l.Index) {
			return nil, errf(AttrLayout, -1, "", ErrInvalidSnapshot, "index name %s is not a *.index.json file name", quote(l.Index))
		}
	}
	seen := map[string]bool{l.Index: true}
	for _, f := range l.Files {
		if err := checkFileName(f.Name); err != nil {
			return nil, errf(AttrLayout, -1, "", ErrInvalidSnapshot, "file %s: %v", quote(f.Name), err)
		}
		if seen[f.Name] {
			return nil, errf(AttrLayout, -1, "", ErrInvalidSnapshot, "file %s listed twice", quote(f.Name))
		}
		seen[f.Name] = true
	}
	return &l, nil
}

// splitAttrs separates the text files and the attributes that are not
// sharddir's; the latter are an error unless lossy.
func splitAttrs(attrs map[string]string, lossy bool) (texts, rest map[string]string, err error) {
	texts, rest = map[string]string{}, map[string]string{}
	for k, v := range attrs {
		switch {
		case strings.HasPrefix(k, AttrTextPrefix):
			name := strings.TrimPrefix(k, AttrTextPrefix)
			if err := checkFileName(name); err != nil {
				return nil, nil, errf(k, -1, "", ErrUnsafe, "text attribute's file name: %v", err)
			}
			texts[name] = v
		case k == AttrLayout:
		case strings.HasPrefix(k, attrNamespace):
			if !lossy {
				return nil, nil, errf(k, -1, "", ErrInvalidSnapshot, "unknown %s attribute", attrNamespace)
			}
		default:
			rest[k] = v
		}
	}
	return texts, rest, nil
}

// codecFor picks the codec of a file recorded with codec name rec ("" when
// nothing was recorded).
func codecFor(rec string, opts WriteOptions) (formats.Codec, error) {
	if opts.Codec != nil {
		return opts.Codec, nil
	}
	if opts.Codecs == nil {
		return nil, errors.New("sharddir: WriteOptions.Codecs is nil")
	}
	if rec != "" {
		c, err := opts.Codecs.ByName(rec)
		if err != nil {
			return nil, errf(AttrLayout, -1, "", err, "recorded shard format %s is not available (name one with --to)", quote(rec))
		}
		return c, nil
	}
	return opts.Codecs.ByName(DefaultCodec)
}

// hfNames are the index name and shard name pattern HF uses for a codec.
func hfNames(c formats.Codec) (index, stem, ext string) {
	switch c.Name() {
	case "safetensors":
		return "model.safetensors.index.json", "model", ".safetensors"
	case "torch":
		return "pytorch_model.bin.index.json", "pytorch_model", ".bin"
	}
	ext = ".bin"
	if e := c.Extensions(); len(e) > 0 {
		ext = e[0]
	}
	return "model" + ext + ".index.json", "model", ext
}

func shardName(stem, ext string, i, n int) string {
	return fmt.Sprintf("%s-%05d-of-%05d%s", stem, i+1, n, ext)
}

// stripped returns a copy of a without sharddir attributes, renamed.
func stripped(a *snapshot.Array, name string) *snapshot.Array {
	b := *a
	b.Name = name
	b.Attrs = nil
	for k, v := range a.Attrs {
		if !strings.HasPrefix(k, attrNamespace) {
			if b.Attrs == nil {
				b.Attrs = map[string]string{}
			}
			b.Attrs[k] = v
		}
	}
	return &b
}

func (p *Plan) reproduce(s *snapshot.Snapshot, lay *Layout, opts WriteOptions) error {
	p.Kind = lay.Kind
	for k := range s.Attrs {
		if k != AttrLayout && !strings.HasPrefix(k, attrNamespace) && !opts.Encode.Lossy {
			return errf(k, -1, "", ErrInvalidSnapshot, "snapshot attribute has no file to go to in the recorded layout (use lossy conversion to drop it)")
		}
	}
	byFile := map[string]int{}
	files := make([]outFile, len(lay.Files))
	changed := false
	for i, f := range lay.Files {
		c, err := codecFor(f.Codec, opts)
		if err != nil {
			return err
		}
		changed = changed || c.Name() != f.Codec
		byFile[f.Name] = i
		files[i] = outFile{name: f.Name, codec: c, snap: &snapshot.Snapshot{Meta: s.Meta, Attrs: maps.Clone(f.Attrs)}}
	}
	for _, a := range s.Sorted() {
		fn, ok := a.Attrs[AttrFile]
		i, known := byFile[fn]
		if !ok || !known {
			return errf(AttrLayout, -1, a.Name, ErrInvalidSnapshot, "array has no %s attribute naming a file of the recorded layout", AttrFile)
		}
		name := a.Name
		if pre := lay.Files[i].Prefix; pre != "" {
			var cut bool
			if name, cut = strings.CutPrefix(name, pre); !cut || name == "" {
				return errf(fn, -1, a.Name, ErrInvalidSnapshot, "array name lacks its file's prefix %s", quote(pre))
			}
		}
		files[i].snap.Arrays = append(files[i].snap.Arrays, stripped(a, name))
	}
	if lay.Kind == KindPlain {
		if changed {
			// Another format: same stem, the new format's extension.
			seen := map[string]bool{}
			for i := range files {
				if c := files[i].codec; c.Name() != lay.Files[i].Codec {
					ext := ".bin"
					if e := c.Extensions(); len(e) > 0 {
						ext = e[0]
					}
					files[i].name = strings.TrimSuffix(files[i].name, filepath.Ext(files[i].name)) + ext
				}
				if seen[files[i].name] {
					return errf(files[i].name, -1, "", ErrInvalidSnapshot, "two files would get this name in the new format")
				}
				seen[files[i].name] = true
			}
		}
		p.files = files
		return nil
	}
	index := lay.Index
	if changed {
		var stem, ext string
		index, stem, ext = hfNames(files[0].codec)
		for i := range files {
			if files[i].codec.Name() != files[0].codec.Name() {
				return errf(AttrLayout, -1, "", ErrInvalidSnapshot, "shards would be written in two formats")
			}
			files[i].name = shardName(stem, ext, i, len(files))
		}
	}
	return p.finishIndex(index, lay.Metadata, files)
}

// finishIndex appends the shards and their index to the plan.
func (p *Plan) finishIndex(index string, metadata json.RawMessage, files []outFile) error {
	p.Kind = KindIndex
	wm := map[string]string{}
	var total int64
	for _, f := range files {
		for _, a := range f.snap.Arrays {
			key := origName(f.codec.Name(), a)
			if prev, dup := wm[key]; dup {
				return errf(f.name, -1, key, ErrInvalidSnapshot, "tensor would be in two shards (%s and %s)", quote(prev), quote(f.name))
			}
			wm[key] = f.name
			n, err := a.NumBytes()
			if err != nil {
				return errf(f.name, -1, a.Name, ErrInvalidSnapshot, "%v", err)
			}
			total += n
		}
	}
	meta, err := withTotalSize(metadata, total)
	if err != nil {
		return errf(AttrLayout, -1, "", ErrInvalidSnapshot, "metadata: %v", err)
	}
	b, err := MarshalIndex(meta, wm)
	if err != nil {
		return errf(AttrLayout, -1, "", ErrInvalidSnapshot, "%v", err)
	}
	p.files = append(files, outFile{name: index, data: b})
	return nil
}

// withTotalSize keeps a recorded metadata object as it is and adds
// "total_size" (the tensors' bytes, as HF counts it) when it is missing.
func withTotalSize(meta json.RawMessage, total int64) (json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	if len(meta) > 0 {
		if err := json.Unmarshal(meta, &m); err != nil {
			return nil, jsonerr.Describe(err)
		}
		if _, ok := m["total_size"]; ok {
			return meta, nil
		}
	}
	m["total_size"] = json.RawMessage(strconv.FormatInt(total, 10))
	return canonicalJSON(m)
}

// reshard lays the arrays out as an HF index with shards of at most
// ShardSize bytes, in name order: a tensor larger than ShardSize gets a
// shard of its own; a tensor that does not fit the current shard starts
// the next one (huggingface_hub's split_state_dict_into_shards rule).
func (p *Plan) reshard(s *snapshot.Snapshot, lay *Layout, rest map[string]string, opts WriteOptions) error {
	max := opts.ShardSize
	if max <= 0 {
		max = DefaultShardSize
	}
	rec := ""
	var fileAttrs map[string]string
	var metadata json.RawMessage
	if lay != nil {
		// Keep the recorded format and per-file attributes when every
		// file agrees on them.
		for i, f := range lay.Files {
			if i == 0 {
				rec, fileAttrs = f.Codec, f.Attrs
			} else if f.Codec != rec || !maps.Equal(f.Attrs, fileAttrs) {
				if !opts.Encode.Lossy {
					return errf(AttrLayout, -1, "", ErrInvalidSnapshot, "files of the recorded layout differ in format or attributes; resharding would lose that (use lossy conversion)")
				}
				fileAttrs = nil
			}
		}
		metadata = lay.Metadata
	}
	if len(rest) > 0 {
		if lay != nil && !opts.Encode.Lossy {
			return errf(slices.Sorted(maps.Keys(rest))[0], -1, "", ErrInvalidSnapshot, "snapshot attribute has no file to go to (use lossy conversion to drop it)")
		}
		if lay == nil {
			fileAttrs = rest // a single file's attributes go to every shard
		}
	}
	c, err := codecFor(rec, opts)
	if err != nil {
		return err
	}
	var groups [][]*snapshot.Array
	var cur []*snapshot.Array
	var curSize int64
	for _, a := range s.Sorted() {
		n, err := a.NumBytes()
		if err != nil {
			return errf("", -1, a.Name, ErrInvalidSnapshot, "%v", err)
		}
		sa := stripped(a, a.Name)
		if n > max {
			groups = append(groups, []*snapshot.Array{sa})
			continue
		}
		if curSize+n > max && len(cur) > 0 {
			groups = append(groups, cur)
			cur, curSize = nil, 0
		}
		cur = append(cur, sa)
		curSize += n
	}
	if len(cur) > 0 || len(groups) == 0 {
		groups = append(groups, cur)
	}
	index, stem, ext := hfNames(c)
	files := make([]outFile, len(groups))
	for i, g := range groups {
		files[i] = outFile{name: shardName(stem, ext, i, len(groups)), codec: c,
			snap: &snapshot.Snapshot{Meta: s.Meta, Arrays: g, Attrs: maps.Clone(fileAttrs)}}
	}
	return p.finishIndex(index, metadata, files)
}

// Write writes s as the directory dir (which must not exist, or be an
// empty directory): the plan's files are written into a temporary
// directory beside dir, each fsynced, the directory fsynced and renamed to
// dir, and dir's parent fsynced — a failed write leaves nothing at dir.
func Write(ctx context.Context, dir string, s *snapshot.Snapshot, opts WriteOptions) (*Plan, error) {
	p, err := MakePlan(s, opts)
	if err != nil {
		return nil, err
	}
	if st, err := os.Lstat(dir); err == nil {
		if !st.IsDir() {
			return nil, &os.PathError{Op: "write directory", Path: dir, Err: fs.ErrExist}
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		if len(ents) > 0 {
			return nil, &os.PathError{Op: "write directory", Path: dir, Err: errors.New("exists and is not empty")}
		}
	}
	parent, base := filepath.Split(filepath.Clean(dir))
	if parent == "" {
		parent = "."
	}
	tmp, err := os.MkdirTemp(parent, atomicfile.TempPrefix+base+"-")
	if err != nil {
		return nil, err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	for _, f := range p.files {
		if err := writeOne(ctx, filepath.Join(tmp, f.name), f, opts.Encode); err != nil {
			return nil, err
		}
	}
	if err := atomicfile.SyncDir(tmp); err != nil {
		return nil, err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}
	if st, err := os.Lstat(dir); err == nil && st.IsDir() {
		if err := os.Remove(dir); err != nil { // empty, checked above
			return nil, err
		}
	}
	err = dirfs.RenameDir(tmp, dir)
	if err != nil {
		return nil, &os.PathError{Op: "rename", Path: dir, Err: err}
	}
	done = true
	if err := atomicfile.SyncDir(parent); err != nil {
		return nil, err
	}
	return p, nil
}

func writeOne(ctx context.Context, path string, f outFile, eo formats.EncodeOptions) error {
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	if f.codec != nil {
		if err := f.codec.Encode(ctx, out, f.snap, eo); err != nil {
			return fmt.Errorf("sharddir: %s: %w", filepath.Base(path), err)
		}
	} else if _, err := bytes.NewReader(f.data).WriteTo(out); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	return out.Close()
}

// ParseSize parses a shard size the way Hugging Face's max_shard_size
// does: a number of bytes with an optional unit, decimal (KB MB GB TB) or
// binary (KiB MiB GiB TiB), case-insensitive ("2GB" = 2,000,000,000,
// "500MiB" = 524,288,000). It must be positive and fit in an int64.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mul    int64
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
		{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}, {"b", 1}}
	mul := int64(1)
	low := strings.ToLower(t)
	for _, u := range units {
		if strings.HasSuffix(low, u.suffix) {
			mul, t = u.mul, strings.TrimSpace(t[:len(t)-len(u.suffix)])
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive whole number with an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", s)
	}
	if n > (1<<63-1)/mul {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n * mul, nil
}
