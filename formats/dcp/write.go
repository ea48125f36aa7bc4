package dcp

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/dirfs"
	"github.com/snapd-ml/snapd/snapshot"
)

// WriteOptions tune Write.
type WriteOptions struct {
	// Torch writes each tensor item as a torch.save archive (the torch
	// codec, formats/torch). Required.
	Torch formats.Codec
	// Encode: Lossy drops what a DCP checkpoint cannot hold (other
	// formats' attributes, arrays of dtypes torch lacks), reported to
	// Encode.Lost; without it such a snapshot fails with formats.ErrLossy.
	Encode formats.EncodeOptions
}

// The file Write puts every item in (rank 0's first file, as torch names it).
const writeFile = "__0_0" + Suffix

// outChunk is one chunk to write: its box of the tensor, the file it goes
// to and its bytes (the chunk's own C order).
type outChunk struct {
	box
	file string
	data snapshot.Source
}

// outItem is one item to write.
type outItem struct {
	fqn    string
	kind   Kind
	dtype  snapshot.DType
	size   []int64
	props  Properties
	chunks []outChunk // tensors
	file   string     // bytes items
	data   snapshot.Source
}

// Write writes s as a DCP checkpoint in dir (which must not exist or be
// empty): one item file __0_0.distcp with every item back to back
// (non-tensor items first, then tensors, each in FQN order; every tensor
// one chunk at offset 0 holding it whole) and .metadata, as torch 2.6's
// FileSystemWriter and DefaultSavePlanner write them, so that
// torch.distributed.checkpoint.load reads it into any world size. Files
// are written into a temp directory beside dir, fsynced, and the
// directory renamed into place; the output depends only on s.
func Write(ctx context.Context, dir string, s *snapshot.Snapshot, opts WriteOptions) error {
	if opts.Torch == nil {
		return errors.New("dcp: WriteOptions.Torch (the torch codec that writes the items) is not set")
	}
	items, planner, err := plan(s, opts.Encode)
	if err != nil {
		return err
	}
	return writeDirAtomic(dir, func(tmp string) error {
		_, err := writeItems(ctx, tmp, items, planner, opts)
		return err
	})
}

// plan turns s into items (one chunk per tensor, all in writeFile).
func plan(s *snapshot.Snapshot, eo formats.EncodeOptions) ([]*outItem, map[string][]PathElem, error) {
	if err := s.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalidSnapshot, err)
	}
	lost := func(array, what, why string) error {
		if !eo.Lossy {
			where := "snapshot"
			if array != "" {
				where = fmt.Sprintf("array %q", array)
			}
			return fmt.Errorf("dcp: %s: %s: %s: %w", where, what, why, formats.ErrLossy)
		}
		eo.Drop(formats.Loss{Format: "dcp", Array: array, What: what, Why: why})
		return nil
	}
	var planner map[string][]PathElem
	for _, k := range sortedKeys(s.Attrs) {
		if k == AttrPlannerData {
			pd, err := parsePlannerJSON(s.Attrs[k])
			if err != nil {
				return nil, nil, fmt.Errorf("%w: attribute %s: %v", ErrInvalidSnapshot, k, err)
			}
			planner = pd
			continue
		}
		if err := lost("", fmt.Sprintf("attribute %q dropped", k), "a DCP checkpoint has no place for it"); err != nil {
			return nil, nil, err
		}
	}
	var items []*outItem
	fqns := map[string]string{}
	for _, a := range s.Sorted() {
		fqn := a.Name
		if v, ok := a.Attrs[AttrFQN]; ok {
			fqn = v
		}
		if prev, dup := fqns[fqn]; dup {
			return nil, nil, fmt.Errorf("%w: arrays %q and %q have the same FQN", ErrInvalidSnapshot, prev, a.Name)
		}
		fqns[fqn] = a.Name
		it := &outItem{fqn: fqn, kind: Tensor, dtype: a.DType, size: a.Shape, data: a.Data}
		if a.Data == nil {
			it.data = snapshot.Bytes{}
		}
		for _, k := range sortedKeys(a.Attrs) {
			v := a.Attrs[k]
			switch k {
			case AttrFQN, AttrValue:
			case AttrKind:
				if v != kindBytes {
					return nil, nil, fmt.Errorf("%w: array %q: %s %q (only %q)", ErrInvalidSnapshot, a.Name, k, v, kindBytes)
				}
				if a.DType != snapshot.U8 || len(a.Shape) != 1 {
					return nil, nil, fmt.Errorf("%w: array %q: a non-tensor item must be a u8 vector of its bytes", ErrInvalidSnapshot, a.Name)
				}
				it.kind = Bytes
			case AttrRequiresGrad:
				it.props.RequiresGrad = v == "true"
			case AttrPinMemory:
				it.props.PinMemory = v == "true"
			case AttrMemoryFormat:
				i := indexOf(memoryFormats, v)
				if i < 0 {
					return nil, nil, fmt.Errorf("%w: array %q: %s %q", ErrInvalidSnapshot, a.Name, k, v)
				}
				it.props.MemoryFormat = int64(i)
			default:
				if err := lost(a.Name, fmt.Sprintf("attribute %q dropped", k), "a DCP checkpoint has no place for it"); err != nil {
					return nil, nil, err
				}
			}
		}
		if it.kind == Tensor {
			if torchName(a.DType) == "" {
				if err := lost(a.Name, fmt.Sprintf("array dropped (dtype %s)", a.DType), "torch has no such dtype"); err != nil {
					return nil, nil, err
				}
				continue
			}
			it.chunks = []outChunk{{box: box{off: make([]int64, len(a.Shape)), size: a.Shape}, file: writeFile, data: it.data}}
		} else {
			it.file = writeFile
		}
		items = append(items, it)
	}
	return items, planner, nil
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// parsePlannerJSON parses AttrPlannerData.
func parsePlannerJSON(doc string) (map[string][]PathElem, error) {
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var raw map[string][]any
	if err := dec.Decode(&raw); err != nil {
		return nil, errors.New("not a JSON object of key paths")
	}
	out := make(map[string][]PathElem, len(raw))
	for k, p := range raw {
		path := make([]PathElem, len(p))
		for i, e := range p {
			switch x := e.(type) {
			case string:
				path[i] = PathElem{Str: x}
			case json.Number:
				n, err := x.Int64()
				if err != nil {
					return nil, errors.New("a path key is a number that is not an int64")
				}
				path[i] = PathElem{Int: n, IsInt: true}
			default:
				return nil, errors.New("a path key is neither a string nor an int")
			}
		}
		out[k] = path
	}
	return out, nil
}

// writeItems writes the item files and .metadata into the existing
// directory dir and returns the metadata written. Each file holds its
// non-tensor items, then its tensor chunks, in item order.
func writeItems(ctx context.Context, dir string, items []*outItem, planner map[string][]PathElem, opts WriteOptions) (*Metadata, error) {
	type piece struct {
		it    *outItem
		chunk int // -1: a bytes item
	}
	perFile := map[string][]piece{}
	var files []string
	add := func(f string, p piece) {
		if _, ok := perFile[f]; !ok {
			files = append(files, f)
		}
		perFile[f] = append(perFile[f], p)
	}
	md := &Metadata{PlannerData: map[string][]PathElem{}}
	mdItems := map[*outItem]*Item{}
	for _, it := range items {
		mi := &Item{FQN: it.fqn, Kind: it.kind, DType: it.dtype, Size: it.size, Props: it.props}
		for _, c := range it.chunks {
			mi.Chunks = append(mi.Chunks, Chunk{Offsets: c.off, Sizes: c.size})
		}
		mdItems[it] = mi
		md.Items = append(md.Items, mi)
		path, ok := planner[it.fqn]
		if !ok {
			path = []PathElem{{Str: it.fqn}}
		}
		md.PlannerData[it.fqn] = path
		if it.kind == Bytes {
			add(it.file, piece{it, -1})
		}
	}
	sort.Slice(md.Items, func(i, j int) bool { return md.Items[i].FQN < md.Items[j].FQN })
	for _, it := range items {
		for i, c := range it.chunks {
			add(c.file, piece{it, i})
		}
	}
	h := sha256.New()
	for _, name := range files {
		if err := checkFileName(name); err != nil {
			return nil, fmt.Errorf("%w: item file name %v", ErrInvalidSnapshot, err)
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, err
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		cw := &countWriter{w: io.MultiWriter(bw, h)}
		err = func() error {
			for _, p := range perFile[name] {
				if err := ctx.Err(); err != nil {
					return err
				}
				start := cw.n
				if p.chunk < 0 {
					var buf []byte
					if err := snapshot.CopyTo(ctx, cw, p.it.data, p.it.data.Size(), &buf); err != nil {
						return fmt.Errorf("dcp: item %q: %w", p.it.fqn, err)
					}
					mdItems[p.it].Storage = Storage{File: name, Offset: start, Length: cw.n - start}
					continue
				}
				c := p.it.chunks[p.chunk]
				one := &snapshot.Snapshot{
					Meta:   snapshot.DefaultMeta(),
					Arrays: []*snapshot.Array{{Name: "tensor", DType: p.it.dtype, Shape: c.size, Data: c.data}},
					Attrs:  map[string]string{"torch.tree": `{"tensor":"tensor"}`},
				}
				if err := opts.Torch.Encode(ctx, cw, one, formats.EncodeOptions{}); err != nil {
					return fmt.Errorf("dcp: tensor %q chunk %d: %w", p.it.fqn, p.chunk, err)
				}
				mdItems[p.it].Chunks[p.chunk].Storage = Storage{File: name, Offset: start, Length: cw.n - start}
			}
			if err := bw.Flush(); err != nil {
				return err
			}
			return f.Sync()
		}()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
	}
	b := encodeMetadata(md, saveID(h.Sum(nil)))
	if err := os.WriteFile(filepath.Join(dir, metadataName), b, 0o644); err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, metadataName))
	if err != nil {
		return nil, err
	}
	err = f.Sync()
	f.Close()
	return md, err
}

// saveID is StorageMeta.save_id: a UUID-shaped string derived from the
// item files' bytes (torch writes a random uuid4; snapd's output depends
// only on the snapshot).
func saveID(sum []byte) string {
	x := hex.EncodeToString(sum[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// storageRef is one storage_data entry.
type storageRef struct {
	fqn   string
	chunk int // -1: a bytes item
	off   []int64
	st    Storage
}

// encodeMetadata pickles md as torch 2.6 does: Metadata(
// state_dict_metadata in item order, planner_data, storage_data in file
// order, storage_meta).
func encodeMetadata(md *Metadata, saveID string) []byte {
	var refs []storageRef
	for _, it := range md.Items {
		if it.Kind == Bytes {
			refs = append(refs, storageRef{fqn: it.FQN, chunk: -1, st: it.Storage})
			continue
		}
		for i, c := range it.Chunks {
			refs = append(refs, storageRef{fqn: it.FQN, chunk: i, off: c.Offsets, st: c.Storage})
		}
	}
	sort.SliceStable(refs, func(i, j int) bool {
		a, b := refs[i].st, refs[j].st
		if a.File != b.File {
			return a.File < b.File
		}
		return a.Offset < b.Offset
	})
	var p pickler
	p.op(0x80, 2)
	p.object(modMetadata, "Metadata", func() {
		p.dict(func() {
			p.str("state_dict_metadata")
			p.dict(func() {
				for _, it := range md.Items {
					p.str(it.FQN)
					if it.Kind == Bytes {
						p.object(modMetadata, "BytesStorageMetadata", nil)
						continue
					}
					p.object(modMetadata, "TensorStorageMetadata", func() {
						p.dict(func() {
							p.str("properties")
							p.object(modMetadata, "TensorProperties", func() {
								p.tuple(func() {
									p.global("torch", torchName(it.DType))
									p.global("torch.serialization", "_get_layout")
									p.str("torch.strided")
									p.op(0x85, 'R')
									p.bool(it.Props.RequiresGrad)
									p.global(modMetadata, "_MEM_FORMAT_ENCODING")
									p.int(it.Props.MemoryFormat)
									p.op(0x85, 'R')
									p.bool(it.Props.PinMemory)
								})
							})
							p.str("size")
							p.size(it.Size)
							p.str("chunks")
							p.list(func() {
								for _, c := range it.Chunks {
									p.object(modMetadata, "ChunkStorageMetadata", func() {
										p.dict(func() {
											p.str("offsets")
											p.size(c.Offsets)
											p.str("sizes")
											p.size(c.Sizes)
										})
									})
								}
							})
						})
					})
				}
			})
			p.str("planner_data")
			p.dict(func() {
				for _, it := range md.Items {
					p.str(it.FQN)
					path, ok := md.PlannerData[it.FQN]
					if !ok {
						path = []PathElem{{Str: it.FQN}}
					}
					p.tuple(func() {
						for _, e := range path {
							if e.IsInt {
								p.int(e.Int)
							} else {
								p.str(e.Str)
							}
						}
					})
				}
			})
			p.str("storage_data")
			p.dict(func() {
				for _, r := range refs {
					p.object(modMetadata, "MetadataIndex", func() {
						p.dict(func() {
							p.str("fqn")
							p.str(r.fqn)
							p.str("index")
							if r.chunk < 0 {
								p.none()
							} else {
								p.int(int64(r.chunk))
								p.str("offset")
								p.size(r.off)
							}
						})
					})
					p.object(modFilesystem, "_StorageInfo", func() {
						p.dict(func() {
							p.str("relative_path")
							p.str(r.st.File)
							p.str("offset")
							p.int(r.st.Offset)
							p.str("length")
							p.int(r.st.Length)
						})
					})
				}
			})
			p.str("storage_meta")
			p.object(modMetadata, "StorageMeta", func() {
				p.dict(func() {
					p.str("checkpoint_id")
					p.none()
					p.str("save_id")
					p.str(saveID)
					p.str("load_id")
					p.none()
				})
			})
		})
	})
	p.op('.')
	return p.buf.Bytes()
}

// writeDirAtomic creates a temp directory beside dir, lets fill write
// into it, fsyncs it and renames it to dir (which must not exist or be
// an empty directory), then fsyncs the parent. A crash leaves a
// ".snapd-tmp-<name>-*" directory, never a partial dir.
func writeDirAtomic(dir string, fill func(tmp string) error) error {
	dir = filepath.Clean(dir)
	if st, err := os.Lstat(dir); err == nil {
		if !st.IsDir() {
			return &os.PathError{Op: "write directory", Path: dir, Err: fs.ErrExist}
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		if len(ents) > 0 {
			return &os.PathError{Op: "write directory", Path: dir, Err: errors.New("exists and is not empty")}
		}
	}
	parent, base := filepath.Split(dir)
	if parent == "" {
		parent = "."
	}
	tmp, err := os.MkdirTemp(parent, atomicfile.TempPrefix+base+"-")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := fill(tmp); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(tmp); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if st, err := os.Lstat(dir); err == nil && st.IsDir() {
		if err := os.Remove(dir); err != nil {
			return err
		}
	}
	err = dirfs.RenameDir(tmp, dir)
	if err != nil {
		return &os.PathError{Op: "rename", Path: dir, Err: err}
	}
	done = true
	return atomicfile.SyncDir(parent)
}
