package layout

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// Blobs is a store of segment blobs (the raw tensor bytes of the
// Segments and Skeleton layouts), each named by the SHA-256 of its bytes.
// Implementations: Memory; GitBlobs (blob objects of a go-git storer,
// entered in a seg/ tree); the OCI registry client (gitops/layout/oci
// Repository.Blobs). They are safe for concurrent use.
type Blobs interface {
	// Has reports whether the blob is stored.
	Has(ctx context.Context, digest [32]byte) (bool, error)
	// Get opens the blob of digest, which the caller expects to be size
	// bytes: a store that knows the stored size refuses another one
	// before reading; a missing blob is an error wrapping
	// wtxt.ErrBlobNotFound. The caller checks the bytes it reads
	// (wtxt.AssembleNamed checks every blob's length and digest).
	Get(ctx context.Context, digest [32]byte, size int64) (io.ReadCloser, error)
	// Put stores data, whose SHA-256 is digest (a store may check it).
	// data is not retained after Put returns.
	Put(ctx context.Context, digest [32]byte, data []byte) error
}

// ErrDigest reports a blob whose bytes do not hash to the digest it was
// put or found under.
var ErrDigest = errors.New("layout: blob digest mismatch")

// blobName names a blob in errors: its path in a segments directory.
func blobName(d [32]byte) string {
	dir, name := SegName(d)
	return path.Join(dir, name)
}

// Source returns b as the wtxt.BlobSource the assembler reads.
func Source(b Blobs) wtxt.BlobSource { return blobSource{b} }

type blobSource struct{ b Blobs }

func (s blobSource) OpenBlob(ctx context.Context, seg wtxt.Segment) (io.ReadCloser, error) {
	return s.b.Get(ctx, seg.Digest, seg.Size)
}

// Memory is Blobs in memory (tests, and a staging store).
type Memory struct {
	mu sync.Mutex
	m  map[[32]byte][]byte
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{m: map[[32]byte][]byte{}} }

// Has implements Blobs.
func (m *Memory) Has(_ context.Context, d [32]byte) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.m[d]
	return ok, nil
}

// Get implements Blobs.
func (m *Memory) Get(_ context.Context, d [32]byte, size int64) (io.ReadCloser, error) {
	m.mu.Lock()
	b, ok := m.m[d]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%s: %w", blobName(d), wtxt.ErrBlobNotFound)
	}
	if int64(len(b)) != size {
		return nil, fmt.Errorf("%s: %d bytes, the seg line says %d", blobName(d), len(b), size)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Put implements Blobs; it checks the digest.
func (m *Memory) Put(_ context.Context, d [32]byte, data []byte) error {
	if sha256.Sum256(data) != d {
		return fmt.Errorf("%w: %s", ErrDigest, blobName(d))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[d] = bytes.Clone(data)
	return nil
}

// Set stores data under digest without checking it (tests: a corrupt
// or hostile store).
func (m *Memory) Set(d [32]byte, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[d] = bytes.Clone(data)
}

// Delete removes a blob (tests: a missing blob).
func (m *Memory) Delete(d [32]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, d)
}

// GitBlobs is Blobs over the blob objects of a go-git object storer:
// a blob put is written as an object and entered under
// seg/<hh>/<hex64>.seg (SegName) of the tree Tree writes, the same
// names the Segments layout commits. Blobs of a previous tree (NewGitBlobs'
// prev, the seg/ tree of the previous generation) are found by name. It
// stores every segment as one blob (gitops' commit path also stores large
// ones as trees of pieces, which layout.ReadSegments reads).
type GitBlobs struct {
	st   storer.EncodedObjectStorer
	prev *object.Tree
	mu   sync.Mutex
	put  map[[32]byte]plumbing.Hash
}

// NewGitBlobs returns GitBlobs writing to st, reusing the blobs of prev
// (a seg/ tree; nil: none).
func NewGitBlobs(st storer.EncodedObjectStorer, prev *object.Tree) *GitBlobs {
	return &GitBlobs{st: st, prev: prev, put: map[[32]byte]plumbing.Hash{}}
}

// find returns the object ID of digest's blob.
func (g *GitBlobs) find(d [32]byte) (plumbing.Hash, bool) {
	g.mu.Lock()
	h, ok := g.put[d]
	g.mu.Unlock()
	if ok || g.prev == nil {
		return h, ok
	}
	dir, name := SegName(d)
	e, err := g.prev.FindEntry(path.Join(path.Base(dir), name))
	if err != nil || e.Mode != filemode.Regular {
		return plumbing.ZeroHash, false
	}
	return e.Hash, true
}

// Has implements Blobs.
func (g *GitBlobs) Has(_ context.Context, d [32]byte) (bool, error) {
	_, ok := g.find(d)
	return ok, nil
}

// Get implements Blobs: the object's size is checked before it is read.
func (g *GitBlobs) Get(_ context.Context, d [32]byte, size int64) (io.ReadCloser, error) {
	h, ok := g.find(d)
	if !ok {
		return nil, fmt.Errorf("%s: %w", blobName(d), wtxt.ErrBlobNotFound)
	}
	o, err := g.st.EncodedObject(plumbing.BlobObject, h)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return nil, fmt.Errorf("%s: object %s: %w", blobName(d), h, wtxt.ErrBlobNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: object %s: %w", blobName(d), h, err)
	}
	if o.Size() != size {
		return nil, fmt.Errorf("%s: %d bytes, the seg line says %d", blobName(d), o.Size(), size)
	}
	return o.Reader()
}

// Put implements Blobs; it checks the digest and writes the object
// unless the storer has it.
func (g *GitBlobs) Put(_ context.Context, d [32]byte, data []byte) error {
	if sha256.Sum256(data) != d {
		return fmt.Errorf("%w: %s", ErrDigest, blobName(d))
	}
	h := plumbing.ComputeHash(plumbing.BlobObject, data)
	if g.st.HasEncodedObject(h) != nil {
		o := g.st.NewEncodedObject()
		o.SetType(plumbing.BlobObject)
		o.SetSize(int64(len(data)))
		w, err := o.Writer()
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
		if _, err := g.st.SetEncodedObject(o); err != nil {
			return fmt.Errorf("%s: write object: %w", blobName(d), err)
		}
	}
	g.mu.Lock()
	g.put[d] = h
	g.mu.Unlock()
	return nil
}

// Tree writes the seg/ tree of the blobs put (fanned out by the first
// two hex digits) and returns its object ID; ZeroHash when none was put.
func (g *GitBlobs) Tree() (plumbing.Hash, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.put) == 0 {
		return plumbing.ZeroHash, nil
	}
	fan := map[string][]object.TreeEntry{}
	for d, h := range g.put {
		hx := hex.EncodeToString(d[:])
		fan[hx[:2]] = append(fan[hx[:2]], object.TreeEntry{Name: hx + ".seg", Mode: filemode.Regular, Hash: h})
	}
	var top []object.TreeEntry
	for dir, es := range fan {
		h, err := writeTree(g.st, es)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		top = append(top, object.TreeEntry{Name: dir, Mode: filemode.Dir, Hash: h})
	}
	return writeTree(g.st, top)
}

// writeTree stores a tree of entries in Git's order.
func writeTree(st storer.EncodedObjectStorer, es []object.TreeEntry) (plumbing.Hash, error) {
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sortEntries(es, key)
	o := st.NewEncodedObject()
	if err := (&object.Tree{Entries: es}).Encode(o); err != nil {
		return plumbing.ZeroHash, err
	}
	return st.SetEncodedObject(o)
}

func sortEntries(es []object.TreeEntry, key func(object.TreeEntry) string) {
	sort.Slice(es, func(i, j int) bool { return key(es[i]) < key(es[j]) })
}
