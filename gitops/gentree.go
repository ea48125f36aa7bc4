package gitops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/gitops/layout"
)

// genTree is the layout.TreeWriter of one generation directory in a
// commit: a file goes into dir (the previous generation's entries, as
// Commit edits them) or into a subdirectory one level down (a parts
// directory, the segments directory), built fresh and entered into dir
// by finish. Blobs go through the builder (the commit's pack). It is a
// layout.FileWriter (a file is streamed into its blob, never held
// whole) and a layout.PartsWriter (a part the previous generation's
// MANIFEST of the same directory names with the same name, size and
// SHA-256 keeps its blob, not hashed or written again).
type genTree struct {
	b       *builder
	dir     *treeBuilder
	prevDir *object.Tree // nil: no previous generation directory
	file    string       // names the source file in errors
	subs    map[string]*treeBuilder
	reuse   map[string]map[layout.Part]plumbing.Hash
	// info is what generation.txt records of a file written by
	// WriteFrom (by name) or stored split (by parts directory).
	info map[string]fileInfo
}

func (b *builder) genTree(dir *treeBuilder, prevDir *object.Tree, file string) *genTree {
	return &genTree{b: b, dir: dir, prevDir: prevDir, file: file,
		subs: map[string]*treeBuilder{}, reuse: map[string]map[layout.Part]plumbing.Hash{}, info: map[string]fileInfo{}}
}

// entry returns the tree a file name goes in and its name there.
func (t *genTree) entry(name string) (*treeBuilder, string, error) {
	sub, base, ok := strings.Cut(name, "/")
	if !ok {
		return t.dir, name, nil
	}
	if sub == "" || base == "" || strings.Contains(base, "/") {
		return nil, "", fmt.Errorf("gitops: %s: a generation directory holds files at most one directory down", name)
	}
	st := t.subs[sub]
	if st == nil {
		st = newTreeBuilder(nil)
		t.subs[sub] = st
	}
	return st, base, nil
}

// WriteFile implements layout.TreeWriter.
func (t *genTree) WriteFile(name string, data []byte) error {
	tb, base, err := t.entry(name)
	if err != nil {
		return err
	}
	h, err := t.b.blob(data)
	if err != nil {
		return err
	}
	tb.set(base, filemode.Regular, h)
	return nil
}

// WritePart implements layout.PartsWriter.
func (t *genTree) WritePart(dir string, p layout.Part, data []byte) error {
	tb, base, err := t.entry(path.Join(dir, p.Name))
	if err != nil {
		return err
	}
	if h, ok := t.prevParts(dir)[p]; ok {
		tb.set(base, filemode.Regular, h)
		return nil
	}
	h, err := t.b.blob(data)
	if err != nil {
		return err
	}
	tb.set(base, filemode.Regular, h)
	return nil
}

// WriteManifest implements layout.PartsWriter; it records the split
// file's size and SHA-256 (the MANIFEST's) as dir's info.
func (t *genTree) WriteManifest(dir string, m *layout.Manifest) error {
	if err := t.WriteFile(path.Join(dir, layout.ManifestName), m.Encode()); err != nil {
		return err
	}
	t.info[dir] = fileInfo{size: m.Bytes, sha256: m.SHA256}
	return nil
}

// prevParts maps the parts the previous generation's MANIFEST of dir
// names to their blobs (empty: none).
func (t *genTree) prevParts(dir string) map[layout.Part]plumbing.Hash {
	if m, ok := t.reuse[dir]; ok {
		return m
	}
	m := map[layout.Part]plumbing.Hash{}
	if t.prevDir != nil {
		if prev, err := t.prevDir.Tree(dir); err == nil {
			m = manifestBlobs(prev)
		}
	}
	t.reuse[dir] = m
	return m
}

// WriteFrom implements layout.FileWriter. With a loose-object directory
// src is read once: hashed (blob ID, SHA-256) while it is written to a
// temporary object, which becomes the blob when the repository lacks it
// and is removed otherwise. Without one, src is read once for its blob
// ID and SHA-256 and, when the repository lacks the blob, once more by
// go-git, which must name the same object. It fails when src has another
// size (or other bytes) by then. It records name's info.
func (t *genTree) WriteFrom(ctx context.Context, name string, src io.ReaderAt, size int64) error {
	tb, base, err := t.entry(name)
	if err != nil {
		return err
	}
	b := t.b
	var h plumbing.Hash
	s256 := sha256.New()
	if b.objects != "" {
		st, err := stageLoose(b.objects, plumbing.BlobObject, size, io.TeeReader(formats.ContextReader(ctx, io.NewSectionReader(src, 0, size)), s256), nil)
		if err != nil {
			return fmt.Errorf("gitops: write blob %s: %w", t.file, err)
		}
		// A file that grew is caught too.
		if n, _ := src.ReadAt(make([]byte, 1), size); n > 0 {
			st.discard()
			return fmt.Errorf("gitops: %s changed size while read (%d, then more bytes)", t.file, size)
		}
		h = st.hash
		if b.has(h) {
			st.discard()
		} else {
			if err := st.place(); err != nil {
				return fmt.Errorf("gitops: write blob %s: %w", t.file, err)
			}
			b.blobs++
			b.bytes += size
		}
	} else {
		hasher := plumbing.NewHasher(plumbing.BlobObject, size)
		// One byte more than size: a file that grew is caught too.
		n, err := io.Copy(io.MultiWriter(hasher, s256), formats.ContextReader(ctx, io.NewSectionReader(src, 0, size+1)))
		if err != nil {
			return fmt.Errorf("gitops: read %s: %w", t.file, err)
		}
		if n != size {
			return fmt.Errorf("gitops: %s changed size while read (%d, then %d or more bytes)", t.file, size, n)
		}
		obj := &fileObject{src: src, size: n, hash: hasher.Sum()}
		h = obj.hash
		if !b.has(h) {
			if _, err := b.st.SetEncodedObject(obj); err != nil {
				return fmt.Errorf("gitops: write blob %s: %w", t.file, err)
			}
			// The store names the object by the bytes it read: if the
			// file changed since it was hashed, the expected object is
			// missing.
			if err := b.st.HasEncodedObject(h); err != nil {
				return fmt.Errorf("gitops: %s changed while it was committed", t.file)
			}
			b.blobs++
			b.bytes += n
		}
	}
	tb.set(base, filemode.Regular, h)
	t.info[name] = fileInfo{size: size, sha256: hex.EncodeToString(s256.Sum(nil))}
	return nil
}

// setDir enters the tree h as dir/name (a segments directory's seg/).
func (t *genTree) setDir(name string, h plumbing.Hash) error {
	tb, base, err := t.entry(name)
	if err != nil {
		return err
	}
	tb.set(base, filemode.Dir, h)
	return nil
}

// finish writes the subdirectories and enters them into dir.
func (t *genTree) finish() error {
	names := make([]string, 0, len(t.subs))
	for n := range t.subs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		h, err := t.b.writeTree(t.subs[n])
		if err != nil {
			return err
		}
		t.dir.set(n, filemode.Dir, h)
	}
	t.subs = map[string]*treeBuilder{}
	return nil
}
