package gitops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/snapd-ml/snapd/gitops/layout"
	"io"
	"os"
	"sort"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
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
	if b.st.HasEncodedObject(h) == nil {
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
	path string
	size int64
	hash plumbing.Hash
}

func (o *fileObject) Hash() plumbing.Hash         { return o.hash }
func (o *fileObject) Type() plumbing.ObjectType   { return plumbing.BlobObject }
func (o *fileObject) SetType(plumbing.ObjectType) {}
func (o *fileObject) Size() int64                 { return o.size }
func (o *fileObject) SetSize(int64)               {}
func (o *fileObject) Reader() (io.ReadCloser, error) {
	f, err := os.Open(o.path)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(f, o.size), f}, nil
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
// removes the other form.
func (b *builder) storeFile(dir *treeBuilder, prevDir *object.Tree, name, src string, split bool, limit int64) (fileInfo, error) {
	f, err := os.Open(src)
	if err != nil {
		return fileInfo{}, fmt.Errorf("gitops: %w", err)
	}
	defer f.Close()
	if split {
		dir.remove(name)
		var prevParts *object.Tree
		if prevDir != nil {
			if t, err := prevDir.Tree(name + partsSuffix); err == nil {
				prevParts = t
			}
		}
		st, err := f.Stat()
		if err != nil {
			return fileInfo{}, fmt.Errorf("gitops: %w", err)
		}
		h, m, err := b.storeParts(f, st.Size(), prevParts, limit)
		if err != nil {
			return fileInfo{}, fmt.Errorf("gitops: split %s: %w", src, err)
		}
		dir.set(name+partsSuffix, filemode.Dir, h)
		return fileInfo{size: m.Bytes, sha256: m.SHA256}, nil
	}
	dir.remove(name + partsSuffix)
	if name == FileWTXT {
		dir.remove(DirWTXTSegs)
	}
	st, err := f.Stat()
	if err != nil {
		return fileInfo{}, fmt.Errorf("gitops: %w", err)
	}
	hasher := plumbing.NewHasher(plumbing.BlobObject, st.Size())
	s256 := sha256.New()
	n, err := io.Copy(io.MultiWriter(hasher, s256), formats.ContextReader(b.ctx, f))
	if err != nil {
		return fileInfo{}, fmt.Errorf("gitops: read %s: %w", src, err)
	}
	if n != st.Size() {
		return fileInfo{}, fmt.Errorf("gitops: %s changed size while read (%d, then %d bytes)", src, st.Size(), n)
	}
	obj := &fileObject{path: src, size: n, hash: hasher.Sum()}
	if b.st.HasEncodedObject(obj.hash) != nil && b.objects != "" {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fileInfo{}, fmt.Errorf("gitops: %w", err)
		}
		got, err := writeLoose(b.objects, n, formats.ContextReader(b.ctx, f))
		if err != nil {
			return fileInfo{}, fmt.Errorf("gitops: write blob %s: %w", src, err)
		}
		if got != obj.hash {
			return fileInfo{}, fmt.Errorf("gitops: %s changed while it was committed", src)
		}
		b.blobs++
		b.bytes += n
	} else if b.st.HasEncodedObject(obj.hash) != nil {
		if _, err := b.st.SetEncodedObject(obj); err != nil {
			return fileInfo{}, fmt.Errorf("gitops: write blob %s: %w", src, err)
		}
		// The store names the object by the bytes it read: if the file
		// changed since it was hashed, the expected object is missing.
		if err := b.st.HasEncodedObject(obj.hash); err != nil {
			return fileInfo{}, fmt.Errorf("gitops: %s changed while it was committed", src)
		}
		b.blobs++
		b.bytes += n
	}
	dir.set(name, filemode.Regular, obj.hash)
	return fileInfo{size: n, sha256: hex.EncodeToString(s256.Sum(nil))}, nil
}

// storePart returns the emit function of a parts or skeleton-pieces
// split: a part found in reuse (same name, size and SHA-256 as in the
// previous MANIFEST) points at the previous blob without being written
// again; any other part is written as a new blob. Either way it is entered
// into t under its name.
func (b *builder) storePart(t *treeBuilder, reuse map[layout.Part]plumbing.Hash) func(layout.Part, []byte) error {
	return func(p layout.Part, data []byte) error {
		if h, ok := reuse[p]; ok {
			t.set(p.Name, filemode.Regular, h)
			return nil
		}
		h, err := b.blob(data)
		if err != nil {
			return err
		}
		t.set(p.Name, filemode.Regular, h)
		return nil
	}
}

// storeParts splits r into a parts tree. A part whose name, size and
// SHA-256 equal an entry of the previous MANIFEST reuses the previous blob
// without hashing or writing it again.
func (b *builder) storeParts(r io.ReaderAt, size int64, prev *object.Tree, limit int64) (plumbing.Hash, *layout.Manifest, error) {
	reuse := map[layout.Part]plumbing.Hash{}
	if prev != nil {
		if mf, err := prev.File(layout.ManifestName); err == nil && mf.Size <= layout.MaxManifestSize {
			if data, err := mf.Contents(); err == nil {
				if pm, err := layout.ParseManifest([]byte(data)); err == nil {
					for _, p := range pm.Parts {
						if e, err := prev.FindEntry(p.Name); err == nil && e.Mode == filemode.Regular {
							reuse[p] = e.Hash
						}
					}
				}
			}
		}
	}
	t := newTreeBuilder(nil)
	m, err := layout.SplitParts(b.ctx, r, size, limit, b.storePart(t, reuse))
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	mh, err := b.blob(m.Encode())
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	t.set(layout.ManifestName, filemode.Regular, mh)
	h, err := b.writeTree(t)
	return h, m, err
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
