package sharddir

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/dirfs"
	"github.com/snapd-ml/snapd/snapshot"
)

// Attribute keys sharddir sets (see the package documentation).
const (
	// AttrLayout (snapshot): the directory's layout as JSON (Layout).
	AttrLayout = "sharddir.layout"
	// AttrFile (array): the file of the directory the array came from.
	AttrFile = "sharddir.file"
	// AttrTextPrefix (snapshot): + a file name, the content of a small
	// text file of the directory (config.json, README.md, ...).
	AttrTextPrefix = "sharddir.text."
	attrNamespace  = "sharddir."
)

// Layout kinds.
const (
	KindIndex = "index" // a shard index (*.index.json) and its shards
	KindPlain = "plain" // every checkpoint file of the directory
)

// Layout is the value of AttrLayout: how the directory was organised, so
// that Write can reproduce it.
type Layout struct {
	V    int    `json:"v"`    // 1
	Kind string `json:"kind"` // KindIndex or KindPlain
	// Index is the index file's name (KindIndex).
	Index string `json:"index,omitempty"`
	// Metadata is the index's "metadata" object, canonical JSON
	// (KindIndex, absent when the index had none).
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Files are the checkpoint files read, sorted by name.
	Files []FileInfo `json:"files"`
}

// FileInfo describes one checkpoint file of a Layout.
type FileInfo struct {
	Name  string `json:"name"`  // file name in the directory
	Codec string `json:"codec"` // formats.Codec name that decoded it
	// Prefix is prepended to the file's array names (KindPlain with more
	// than one file: the portable form of Name plus "/").
	Prefix string `json:"prefix,omitempty"`
	// Attrs are the file's own snapshot attributes (e.g. a safetensors
	// file's __metadata__), restored when the file is written back.
	Attrs map[string]string `json:"attrs,omitempty"`
}

// Registry finds the codec of a checkpoint file (magic bytes, then
// extension); *formats.Registry implements it. Open never imports a
// concrete codec: a codec registered there (e.g. one for
// pytorch_model-*.bin shards) is used as soon as the caller registers it.
type Registry interface {
	Detect(path string, r io.ReaderAt, size int64) (formats.Codec, error)
}

// Limits bound what Open reads; zero fields take the defaults.
type Limits struct {
	MaxIndexBytes    int64 // index JSON size (default 32 MiB)
	MaxIndexEntries  int   // weight_map entries (default 1,000,000)
	MaxEntries       int   // directory entries (default 100,000)
	MaxFiles         int   // checkpoint files/shards opened (default 10,000)
	MaxTextFileBytes int64 // a text file kept as an attribute (default 1 MiB)
	MaxTextBytes     int64 // all text files kept (default 8 MiB)
}

// DefaultLimits are the bounds used for zero Limits fields.
var DefaultLimits = Limits{
	MaxIndexBytes:    32 << 20,
	MaxIndexEntries:  1_000_000,
	MaxEntries:       100_000,
	MaxFiles:         10_000,
	MaxTextFileBytes: 1 << 20,
	MaxTextBytes:     8 << 20,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxIndexBytes > 0 {
		d.MaxIndexBytes = l.MaxIndexBytes
	}
	if l.MaxIndexEntries > 0 {
		d.MaxIndexEntries = l.MaxIndexEntries
	}
	if l.MaxEntries > 0 {
		d.MaxEntries = l.MaxEntries
	}
	if l.MaxFiles > 0 {
		d.MaxFiles = l.MaxFiles
	}
	if l.MaxTextFileBytes > 0 {
		d.MaxTextFileBytes = l.MaxTextFileBytes
	}
	if l.MaxTextBytes > 0 {
		d.MaxTextBytes = l.MaxTextBytes
	}
	return d
}

// Options tune Open.
type Options struct {
	Limits Limits
	// Log receives one note per entry that is skipped (nil: discard).
	Log *slog.Logger
	// Strict is passed to every file's decoder (formats.DecodeOptions):
	// a torch file with globals outside the allowlist is refused instead
	// of carried verbatim.
	Strict bool
}

// Dir is a directory read as one snapshot. Array data aliases memory maps
// of the files: keep the Dir open while the snapshot is used.
type Dir struct {
	Snapshot *snapshot.Snapshot
	Layout   Layout
	// Bytes is the total size of the checkpoint files read.
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

// textExts are the extensions of files kept as text attributes.
var textExts = map[string]bool{".json": true, ".txt": true, ".md": true, ".yaml": true, ".yml": true, ".jinja": true}

// IsIndexName reports whether name is a shard index file name
// ("model.safetensors.index.json", "pytorch_model.bin.index.json", any
// "*.index.json").
func IsIndexName(name string) bool {
	return strings.HasSuffix(name, ".index.json") && len(name) > len(".index.json")
}

// Open reads the directory dir as one snapshot (see the package
// documentation for the rules). Every file is opened beneath dir, without
// blocking and only if it is a regular file; checkpoint files are
// memory-mapped and decoded with the codec reg detects.
func Open(ctx context.Context, dir string, reg Registry, opts Options) (*Dir, error) {
	lim := opts.Limits.withDefaults()
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r, err := dirfs.OpenRoot(dir)
	if err != nil {
		return nil, fsErr(err)
	}
	defer r.Close()
	names, err := r.Names(lim.MaxEntries)
	if err != nil {
		return nil, fsErr(err)
	}
	sort.Strings(names)
	var files, indexes []string
	for _, n := range names {
		if strings.HasPrefix(n, ".") {
			continue
		}
		typ, err := r.Lstat(n)
		if err != nil {
			return nil, fsErr(err)
		}
		switch {
		case typ.IsRegular(), typ&fs.ModeSymlink != 0: // a symlink is resolved when opened
		case typ.IsDir():
			log.Info("sharddir: subdirectory ignored", "dir", dir, "entry", n)
			continue
		default:
			return nil, errf(filepath.Join(dir, n), -1, "", ErrUnsafe, "not a regular file (%s); only regular files are read", dirfs.DescribeMode(typ))
		}
		if IsIndexName(n) {
			indexes = append(indexes, n)
		} else {
			files = append(files, n)
		}
	}
	d := &Dir{Snapshot: &snapshot.Snapshot{Meta: snapshot.DefaultMeta()}}
	ok := false
	defer func() {
		if !ok {
			d.Close()
		}
	}()
	rd := &reader{ctx: ctx, root: r, reg: reg, lim: lim, log: log, d: d, strict: opts.Strict}
	if len(indexes) > 0 {
		err = rd.indexed(pickIndex(indexes, log, dir), files)
	} else {
		err = rd.plain(files)
	}
	if err != nil {
		return nil, err
	}
	b, err := canonicalJSON(d.Layout)
	if err != nil {
		return nil, err
	}
	if d.Snapshot.Attrs == nil {
		d.Snapshot.Attrs = map[string]string{}
	}
	d.Snapshot.Attrs[AttrLayout] = string(b)
	sort.Slice(d.Snapshot.Arrays, func(i, j int) bool { return d.Snapshot.Arrays[i].Name < d.Snapshot.Arrays[j].Name })
	if err := d.Snapshot.Validate(); err != nil {
		return nil, errf(dir, -1, "", ErrCorrupt, "%v", err)
	}
	ok = true
	return d, nil
}

// pickIndex chooses among several index files: a safetensors index first,
// then the first by name; the others are ignored with a note.
func pickIndex(idx []string, log *slog.Logger, dir string) string {
	best := idx[0]
	for _, n := range idx {
		if strings.HasSuffix(n, ".safetensors.index.json") {
			best = n
			break
		}
	}
	for _, n := range idx {
		if n != best {
			log.Warn("sharddir: second shard index ignored", "dir", dir, "index", best, "ignored", n)
		}
	}
	return best
}

type reader struct {
	strict    bool
	ctx       context.Context
	root      *dirfs.Root
	reg       Registry
	lim       Limits
	log       *slog.Logger
	d         *Dir
	textBytes int64
}

// decoded is one checkpoint file, decoded.
type decoded struct {
	name  string
	codec formats.Codec
	snap  *snapshot.Snapshot
}

// decodeFile opens, maps and decodes one file. With detectOnly, a file no
// codec recognises returns (nil, nil).
func (rd *reader) decodeFile(name string, detectOnly bool) (*decoded, error) {
	if err := rd.ctx.Err(); err != nil {
		return nil, err
	}
	f, err := openFile(rd.root, name)
	if err != nil {
		return nil, err
	}
	m, err := snapshot.MapOpenFile(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	full := filepath.Join(rd.root.Path(), name)
	c, err := rd.reg.Detect(full, m.Guarded(), m.Size())
	if err != nil {
		m.Close()
		if detectOnly && errors.Is(err, formats.ErrUnknownFormat) {
			return nil, nil
		}
		return nil, errf(full, -1, "", err, "no codec recognises this file")
	}
	s, err := c.Decode(rd.ctx, m.Guarded(), m.Size(), formats.DecodeOptions{Name: full, Strict: rd.strict})
	if err != nil {
		m.Close()
		var fe *formats.Error
		if errors.As(err, &fe) && fe.File == full && fe.Format == c.Name() {
			return nil, fmt.Errorf("sharddir: %w", err) // names the file and format already
		}
		return nil, fmt.Errorf("sharddir: %s: decode as %s: %w", full, c.Name(), err)
	}
	rd.d.maps = append(rd.d.maps, m)
	rd.d.Bytes += m.Size()
	for k := range s.Attrs {
		if strings.HasPrefix(k, attrNamespace) {
			return nil, errf(full, -1, "", ErrCorrupt, "carries %s attributes itself: a sharded directory inside a sharded directory is not supported", attrNamespace)
		}
	}
	for _, a := range s.Arrays {
		for k := range a.Attrs {
			if strings.HasPrefix(k, attrNamespace) {
				return nil, errf(full, -1, a.Name, ErrCorrupt, "carries %s attributes itself: a sharded directory inside a sharded directory is not supported", attrNamespace)
			}
		}
	}
	return &decoded{name: name, codec: c, snap: s}, nil
}

// keepText keeps a small UTF-8 text file as an attribute, or logs why not.
func (rd *reader) keepText(name string) error {
	full := filepath.Join(rd.root.Path(), name)
	skip := func(why string) error {
		rd.log.Info("sharddir: text file not kept", "file", full, "reason", why)
		return nil
	}
	if !snapshot.PortableName(name) {
		return skip("name is not portable")
	}
	f, err := openFile(rd.root, name)
	if errors.Is(err, errSymlinkDir) {
		return skip("link to a subdirectory")
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() > rd.lim.MaxTextFileBytes {
		return skip(fmt.Sprintf("%d bytes, limit %d", st.Size(), rd.lim.MaxTextFileBytes))
	}
	if rd.textBytes+st.Size() > rd.lim.MaxTextBytes {
		return skip(fmt.Sprintf("text files exceed %d bytes in all", rd.lim.MaxTextBytes))
	}
	b, err := dirfs.ReadSmall(f, rd.lim.MaxTextFileBytes)
	if err != nil {
		return fsErr(err)
	}
	if !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
		return skip("not UTF-8 text")
	}
	rd.textBytes += int64(len(b))
	if rd.d.Snapshot.Attrs == nil {
		rd.d.Snapshot.Attrs = map[string]string{}
	}
	rd.d.Snapshot.Attrs[AttrTextPrefix+name] = string(b)
	return nil
}

// origName is the tensor name a file of codec c stores for a: the codec's
// "<codec>.name" attribute when it had to rename the tensor, else a.Name.
func origName(codec string, a *snapshot.Array) string {
	if n, ok := a.Attrs[codec+".name"]; ok && n != "" {
		return n
	}
	return a.Name
}

func (rd *reader) indexed(index string, others []string) error {
	full := filepath.Join(rd.root.Path(), index)
	f, err := openFile(rd.root, index)
	if err != nil {
		return err
	}
	b, err := dirfs.ReadSmall(f, rd.lim.MaxIndexBytes)
	f.Close()
	if err != nil {
		return fsErr(err)
	}
	x, err := ParseIndex(full, b, rd.lim)
	if err != nil {
		return err
	}
	shards := x.Shards()
	if len(shards) > rd.lim.MaxFiles {
		return errf(full, -1, "", ErrLimit, "index names %d shards, limit %d", len(shards), rd.lim.MaxFiles)
	}
	isShard := map[string]bool{}
	for _, s := range shards {
		isShard[s] = true
	}
	rd.d.Layout = Layout{V: 1, Kind: KindIndex, Index: index, Metadata: x.Metadata}
	found := map[string]string{} // original tensor name -> shard
	for _, sh := range shards {
		dec, err := rd.decodeFile(sh, false)
		if errors.Is(err, fs.ErrNotExist) {
			return errf(full, -1, firstTensor(x, sh), ErrCorrupt, "the index maps it to shard %s, which does not exist", quote(sh))
		}
		if err != nil {
			return err
		}
		for _, a := range dec.snap.Arrays {
			on := origName(dec.codec.Name(), a)
			want, listed := x.WeightMap[on]
			if prev, dup := found[on]; dup {
				return errf(full, -1, on, ErrCorrupt, "present in two shards, %s and %s", quote(prev), quote(sh))
			}
			found[on] = sh
			if !listed {
				return errf(filepath.Join(rd.root.Path(), sh), -1, on, ErrCorrupt, "in this shard but not in the index's weight_map")
			}
			if want != sh {
				return errf(filepath.Join(rd.root.Path(), sh), -1, on, ErrCorrupt, "in this shard but the index maps it to %s", quote(want))
			}
			a.Attrs = withAttr(a.Attrs, AttrFile, sh)
			rd.d.Snapshot.Arrays = append(rd.d.Snapshot.Arrays, a)
		}
		rd.d.Layout.Files = append(rd.d.Layout.Files, FileInfo{Name: sh, Codec: dec.codec.Name(), Attrs: dec.snap.Attrs})
	}
	for _, t := range x.Tensors() {
		if _, ok := found[t]; !ok {
			return errf(full, -1, t, ErrCorrupt, "the index maps it to shard %s, which does not hold it", quote(x.WeightMap[t]))
		}
	}
	for _, n := range others {
		switch {
		case isShard[n]:
		case textExts[strings.ToLower(filepath.Ext(n))]:
			if err := rd.keepText(n); err != nil {
				return err
			}
		default:
			rd.log.Warn("sharddir: file not in the shard index ignored", "file", filepath.Join(rd.root.Path(), n), "index", index)
		}
	}
	return nil
}

// firstTensor is the first tensor (by name) the index maps to shard.
func firstTensor(x *Index, shard string) string {
	first := ""
	for t, s := range x.WeightMap {
		if s == shard && (first == "" || t < first) {
			first = t
		}
	}
	return first
}

func (rd *reader) plain(names []string) error {
	var decs []*decoded
	for _, n := range names {
		if textExts[strings.ToLower(filepath.Ext(n))] {
			if err := rd.keepText(n); err != nil {
				return err
			}
			continue
		}
		if len(decs) >= rd.lim.MaxFiles {
			return errf(rd.root.Path(), -1, "", ErrLimit, "more than %d checkpoint files", rd.lim.MaxFiles)
		}
		dec, err := rd.decodeFile(n, true)
		if errors.Is(err, errSymlinkDir) {
			rd.log.Info("sharddir: link to a subdirectory ignored", "file", filepath.Join(rd.root.Path(), n))
			continue
		}
		if err != nil {
			return err
		}
		if dec == nil {
			rd.log.Warn("sharddir: file of no known format ignored", "file", filepath.Join(rd.root.Path(), n))
			continue
		}
		decs = append(decs, dec)
	}
	if len(decs) == 0 {
		return errf(rd.root.Path(), -1, "", ErrCorrupt, "no checkpoint file (no shard index and no file of a known format)")
	}
	rd.d.Layout = Layout{V: 1, Kind: KindPlain}
	seenPrefix := map[string]string{}
	for _, dec := range decs {
		fi := FileInfo{Name: dec.name, Codec: dec.codec.Name(), Attrs: dec.snap.Attrs}
		if !utf8.ValidString(dec.name) {
			return errf(filepath.Join(rd.root.Path(), dec.name), -1, "", ErrCorrupt, "file name is not UTF-8")
		}
		if len(decs) > 1 {
			fi.Prefix = portablePrefix(dec.name) + "/"
			if prev, dup := seenPrefix[fi.Prefix]; dup {
				return errf(filepath.Join(rd.root.Path(), dec.name), -1, "", ErrCorrupt, "array-name prefix %s collides with that of %s", quote(fi.Prefix), quote(prev))
			}
			seenPrefix[fi.Prefix] = dec.name
		}
		for _, a := range dec.snap.Arrays {
			name := fi.Prefix + a.Name
			if !snapshot.PortableName(name) {
				return errf(filepath.Join(rd.root.Path(), dec.name), -1, a.Name, ErrLimit, "array name with the file prefix is not a portable WTXT name (longer than %d bytes?)", snapshot.MaxNameLen)
			}
			a.Name = name
			a.Attrs = withAttr(a.Attrs, AttrFile, dec.name)
			rd.d.Snapshot.Arrays = append(rd.d.Snapshot.Arrays, a)
		}
		rd.d.Layout.Files = append(rd.d.Layout.Files, fi)
	}
	return nil
}

func withAttr(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

// portablePrefix is name when it is a portable array name, else name with
// every other byte replaced by '_', cut to 200 bytes, plus '-' and 8 hex
// digits of SHA-256 of name (so it depends only on the name).
func portablePrefix(name string) string {
	if snapshot.PortableName(name) && len(name) <= 255 {
		return name
	}
	b := []byte(name)
	for i, c := range b {
		if !snapshot.NameByte(c) {
			b[i] = '_'
		}
	}
	if len(b) > 200 {
		b = b[:200]
	}
	h := sha256.Sum256([]byte(name))
	return string(b) + "-" + hex.EncodeToString(h[:4])
}
