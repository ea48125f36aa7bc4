package gitops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout"
)

// builder writes objects, counting new blobs.
type builder struct {
	st  storer.EncodedObjectStorer
	ctx context.Context
	// objects, when set, is the loose objects directory blobs are written
	// to directly (writeLoose) instead of through go-git.
	objects string
	// pack, when set, collects new blobs and trees (packw.go).
	pack  *packWriter
	blobs int
	bytes int64
	// segsReused counts skeleton segments taken from the previous tree.
	segsReused int
	// knownSegs are the previous generation's segment keys (Repo.segKeys);
	// newSegKeys this generation's.
	knownSegs, newSegKeys map[wtxt.SegmentKey][32]byte
	// idx, when set, answers has before go-git does (objindex.go).
	idx *objIndex
}

// has reports whether the repository has object h (not counting this
// commit's pending pack, whose add reports repeats).
func (b *builder) has(h plumbing.Hash) bool {
	if found, ok := b.idx.has(h); ok {
		return found
	}
	return b.st.HasEncodedObject(h) == nil
}

func (b *builder) encode(enc func(plumbing.EncodedObject) error) (plumbing.Hash, error) {
	o := b.st.NewEncodedObject()
	if err := enc(o); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("gitops: encode object: %w", err)
	}
	h, err := b.st.SetEncodedObject(o)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("gitops: write object: %w", err)
	}
	return h, nil
}

// blob stores data as a blob unless the repository already has it.
func (b *builder) blob(data []byte) (plumbing.Hash, error) { return b.blobAs(data, repr{}) }

// rawBlob is blob for a segment stored as one blob: in a pack it is a
// literal delta against the pack's default base (packw.go), which keeps
// git's delta search off it. (Pieces have their own bases: segment.)
func (b *builder) rawBlob(data []byte) (plumbing.Hash, error) {
	return b.blobAs(data, repr{literal: true})
}

// blobAs is blob, stored in a pack as r says.
func (b *builder) blobAs(data []byte, r repr) (plumbing.Hash, error) {
	h := plumbing.ComputeHash(plumbing.BlobObject, data)
	return h, b.blobHashed(h, data, r)
}

// blobHashed is blobAs for data whose blob ID h the caller computed.
func (b *builder) blobHashed(h plumbing.Hash, data []byte, r repr) error {
	if b.has(h) {
		return nil
	}
	if b.objects != "" {
		if b.pack != nil { // packw.go
			added, err := b.pack.add(plumbing.BlobObject, h, data, r)
			if err != nil {
				return fmt.Errorf("gitops: write blob: %w", err)
			}
			if !added {
				return nil
			}
		} else if err := writeLooseBytes(b.objects, plumbing.BlobObject, data, h); err != nil {
			return fmt.Errorf("gitops: write blob: %w", err)
		}
		b.blobs++
		b.bytes += int64(len(data))
		return nil
	}
	o := b.st.NewEncodedObject()
	o.SetType(plumbing.BlobObject)
	o.SetSize(int64(len(data)))
	w, err := o.Writer()
	if err == nil {
		_, err = w.Write(data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("gitops: blob: %w", err)
	}
	if _, err := b.st.SetEncodedObject(o); err != nil {
		return fmt.Errorf("gitops: write blob: %w", err)
	}
	b.blobs++
	b.bytes += int64(len(data))
	return nil
}

// fileObject streams a file into the object store without holding it.
type fileObject struct {
	src  io.ReaderAt
	size int64
	hash plumbing.Hash
}

func (o *fileObject) Hash() plumbing.Hash         { return o.hash }
func (o *fileObject) Type() plumbing.ObjectType   { return plumbing.BlobObject }
func (o *fileObject) SetType(plumbing.ObjectType) {}
func (o *fileObject) Size() int64                 { return o.size }
func (o *fileObject) SetSize(int64)               {}
func (o *fileObject) Reader() (io.ReadCloser, error) {
	return io.NopCloser(io.NewSectionReader(o.src, 0, o.size)), nil
}
func (o *fileObject) Writer() (io.WriteCloser, error) {
	return nil, errors.New("gitops: file object is read-only")
}

// fileInfo is what generation.txt records of a stored file: its size
// and, except for the segments layout's WTXT, its SHA-256 (hex).
type fileInfo struct {
	size   int64
	sha256 string // "": not recorded
}

// storeFile stores src as name (single) or name.parts/ (split) in dir and
// removes the other form: a sidecar, or a skeleton the pipeline cut.
func (b *builder) storeFile(dir *treeBuilder, prevDir *object.Tree, name, src string, split bool, limit int64) (fileInfo, error) {
	f, err := os.Open(src)
	if err != nil {
		return fileInfo{}, fmt.Errorf("gitops: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fileInfo{}, fmt.Errorf("gitops: %w", err)
	}
	t := b.genTree(dir, prevDir, src)
	if split {
		dir.remove(name)
		if _, err := layout.WriteParts(b.ctx, f, st.Size(), t, name+partsSuffix, limit); err != nil {
			return fileInfo{}, fmt.Errorf("gitops: split %s: %w", src, err)
		}
		if err := t.finish(); err != nil {
			return fileInfo{}, err
		}
		return t.info[name+partsSuffix], nil
	}
	dir.remove(name + partsSuffix)
	if name == FileWTXT {
		dir.remove(DirWTXTSegs)
	}
	if err := t.WriteFrom(b.ctx, name, f, st.Size()); err != nil {
		return fileInfo{}, err
	}
	return t.info[name], nil
}

// treeBuilder edits the entries of one tree.
type treeBuilder struct {
	entries map[string]object.TreeEntry
}

func newTreeBuilder(base *object.Tree) *treeBuilder {
	t := &treeBuilder{entries: map[string]object.TreeEntry{}}
	if base != nil {
		for _, e := range base.Entries {
			t.entries[e.Name] = e
		}
	}
	return t
}

func (t *treeBuilder) set(name string, mode filemode.FileMode, h plumbing.Hash) {
	t.entries[name] = object.TreeEntry{Name: name, Mode: mode, Hash: h}
}

func (t *treeBuilder) remove(name string) { delete(t.entries, name) }

// writeTree stores the tree with entries in Git's order (a directory sorts
// as if its name ended in '/').
func (b *builder) writeTree(t *treeBuilder) (plumbing.Hash, error) {
	es := make([]object.TreeEntry, 0, len(t.entries))
	for _, e := range t.entries {
		es = append(es, e)
	}
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(es, func(i, j int) bool { return key(es[i]) < key(es[j]) })
	tree := &object.Tree{Entries: es}
	if b.objects == "" {
		return b.encode(tree.Encode)
	}
	return b.looseObject(tree.Encode) // loose.go: written only when new
}

// replacePath returns the hash of base with the directory at elems replaced
// by sub; edit (if not nil) is applied to the top-level tree.
func (b *builder) replacePath(base *object.Tree, elems []string, sub plumbing.Hash, edit func(*treeBuilder)) (plumbing.Hash, error) {
	t := newTreeBuilder(base)
	if edit != nil {
		edit(t)
	}
	if len(elems) == 1 {
		t.set(elems[0], filemode.Dir, sub)
		return b.writeTree(t)
	}
	var child *object.Tree
	if e, ok := t.entries[elems[0]]; ok && e.Mode == filemode.Dir && base != nil {
		c, err := object.GetTree(b.st, e.Hash)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("gitops: tree %s: %w", elems[0], err)
		}
		child = c
	}
	h, err := b.replacePath(child, elems[1:], sub, nil)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	t.set(elems[0], filemode.Dir, h)
	return b.writeTree(t)
}
