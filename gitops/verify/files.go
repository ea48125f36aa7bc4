package verify

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout"
)

// storedFile is fetchFile of a file stored whole or as parts
// (layout.Stored); both forms present is a layout failure.
func (v *verifier) storedFile(x *gv, dir *object.Tree, entries map[string]object.TreeEntry, name, kind string) (string, *materialized, string) {
	stored, err := layout.Stored(func(n string) bool { _, ok := entries[n]; return ok }, name)
	var de *layout.DetectError
	if errors.As(err, &de) {
		x.fail(de.Path, 0, CheckLayout, "%s", de.Msg)
		return de.Path, nil, ""
	}
	return v.fetchFile(x, dir, entries, name, stored, kind)
}

// fetchFile copies name (a blob), name.parts/ (assembled, every part
// checked) or, for the WTXT, current.wtxt.segs/ (the segments layout,
// rebuilt by layout.ReadSegments, every piece and segment checked) to a
// temp file, as stored says (layout.Detect or layout.Stored; "": not
// present). It returns the repository path found ("" when none exists),
// the working copy (nil on failure) and the layout.
func (v *verifier) fetchFile(x *gv, dir *object.Tree, entries map[string]object.TreeEntry, name string, stored layout.Name, kind string) (string, *materialized, string) {
	e, single := entries[name], stored == layout.Single
	pe, split := entries[name+layout.PartsSuffix], stored == layout.Split
	se, segs := entries[layout.DirWTXTSegs], stored == layout.Segments
	if !single && !split && !segs {
		return "", nil, ""
	}
	f, err := os.CreateTemp(v.tmp, kind+"-*")
	if err != nil {
		v.ioErr = err
		return name, nil, ""
	}
	m := &materialized{path: f.Name()}
	var (
		h  hash.Hash
		fw *errWriter
		cw *countWriter
		lw *limitWriter
		bw *bufio.Writer
	)
	// reset (re)starts the working copy: empty file, fresh hash, counters
	// and budget (a blob read again by copyBlob starts over). The segments
	// layout's WTXT is not hashed on the way: its generation.txt records
	// no wtxt_sha256 (checkSummary hashes the copy if an older one does).
	reset := func() error {
		if err := f.Truncate(0); err != nil {
			return err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		fw = &errWriter{w: f}
		cw = &countWriter{w: fw}
		if !segs {
			h = sha256.New()
			cw.w = io.MultiWriter(fw, h)
		}
		lw = &limitWriter{w: cw, left: v.o.MaxObjectBytes}
		bw = bufio.NewWriterSize(lw, 1<<20)
		return nil
	}
	if err := reset(); err != nil {
		f.Close()
		os.Remove(m.path)
		v.ioErr = err
		return name, nil, ""
	}
	var rp, lname string
	var cerr, check = error(nil), CheckObject
	failFile, failLine := "", 0 // a located failure inside a segments directory
	switch {
	case single:
		rp, lname = name, string(layout.Single)
		if e.Mode != filemode.Regular && e.Mode != filemode.Executable {
			cerr, check = fmt.Errorf("mode %s, want a regular file", e.Mode), CheckLayout
		} else if b, err := v.r.BlobObject(e.Hash); err != nil {
			cerr = fmt.Errorf("blob %s: %w", e.Hash, err)
		} else if b.Size > v.o.MaxObjectBytes {
			cerr, check = fmt.Errorf("blob %s is %d bytes, above the budget of %d (not read; raise --max-object-bytes if it is genuine)", e.Hash, b.Size, v.o.MaxObjectBytes), CheckSize
		} else {
			cerr = v.copyBlob(e.Hash, func() (io.Writer, error) {
				if err := reset(); err != nil {
					return nil, err
				}
				return bw, nil
			})
		}
	case split:
		rp, lname = name+layout.PartsSuffix, string(layout.Split)
		check = CheckParts
		if pe.Mode != filemode.Dir {
			cerr, check = fmt.Errorf("%s.parts is not a directory", name), CheckLayout
		} else if t, err := dir.Tree(name + ".parts"); err != nil {
			cerr, check = err, CheckObject
		} else {
			cerr = layout.AssembleFS(gitops.TreeFS(t), ".", bw)
		}
	default:
		rp, lname = layout.DirWTXTSegs, string(layout.Segments)
		check, failFile, failLine, cerr = v.readSegments(x, dir, se, bw)
		if cerr == nil {
			check = CheckParts
		}
	}
	if cerr == nil {
		cerr = bw.Flush()
	}
	if lw.over {
		cerr, check, failFile, failLine = fmt.Errorf("more than the budget of %d bytes (reading stopped; raise --max-object-bytes if it is genuine)", v.o.MaxObjectBytes), CheckSize, "", 0
	}
	werr := f.Close()
	if cerr == nil && werr != nil {
		cerr = werr
	}
	if fw.err != nil || werr != nil {
		os.Remove(m.path)
		v.ioErr = fmt.Errorf("verify: working copy of %s: %w", rp, errors.Join(fw.err, werr))
		return rp, nil, lname
	}
	if cerr != nil {
		os.Remove(m.path)
		if failFile == "" {
			failFile = rp
		}
		x.fail(failFile, failLine, check, "%v", cerr)
		return rp, nil, lname
	}
	m.size = cw.n
	if h != nil {
		m.sha256 = hex.EncodeToString(h.Sum(nil))
	}
	m.head = cw.head
	return rp, m, lname
}

// copyBlob copies blob want to the writer out returns (called again to start
// over), checking the Git object ID of the bytes copied. go-git's
// streaming of large objects stored as deltas (LargeObjectThreshold) has
// returned wrong bytes for such a blob (a 2.6 MB skeleton stored as a
// delta in a fetched pack, found by scripts/bench-oci.sh at 1 GiB); a
// mismatch is read again, in memory, through the repository without
// streaming, and fails with ErrBlobID if it still does not match.
func (v *verifier) copyBlob(want plumbing.Hash, out func() (io.Writer, error)) error {
	copyFrom := func(r *git.Repository) error {
		w, err := out()
		if err != nil {
			return err
		}
		bb, err := r.BlobObject(want)
		if err != nil {
			return fmt.Errorf("blob %s: %w", want, err)
		}
		rd, err := bb.Reader()
		if err != nil {
			return fmt.Errorf("blob %s: %w", want, err)
		}
		defer rd.Close()
		id := plumbing.NewHasher(plumbing.BlobObject, bb.Size)
		n, err := io.Copy(io.MultiWriter(w, id), rd)
		if err != nil {
			return err
		}
		if n != bb.Size || id.Sum() != want {
			return fmt.Errorf("blob %s: %d bytes read of %d: %w", want, n, bb.Size, ErrBlobID)
		}
		return nil
	}
	err := copyFrom(v.r)
	if errors.Is(err, ErrBlobID) && v.plain != nil && v.plain != v.r {
		err = copyFrom(v.plain)
	}
	return err
}

// smallFile reads an optional small file (WSUM, seal), at most limit bytes.
func (v *verifier) smallFile(x *gv, dir *object.Tree, entries map[string]object.TreeEntry, name string, limit int64) ([]byte, *materialized) {
	e, ok := entries[name]
	if _, split := entries[name+".parts"]; split {
		x.fail(name+".parts", 0, CheckLayout, "%s is split into parts; a file this small is never split", name)
	}
	if !ok {
		return nil, nil
	}
	data, size, err := v.blobBytes(e.Hash, limit)
	switch {
	case err != nil:
		x.fail(name, 0, CheckObject, "blob %s: %v", e.Hash, err)
		return nil, nil
	case data == nil:
		x.fail(name, 0, CheckLayout, "%d bytes, limit %d", size, limit)
		return nil, nil
	}
	sum := sha256.Sum256(data)
	return data, &materialized{size: int64(len(data)), sha256: hex.EncodeToString(sum[:])}
}

// blobBytes reads blob h when it is at most limit bytes: its bytes, or
// nil and its size when it is larger; err when it cannot be read.
func (v *verifier) blobBytes(h plumbing.Hash, limit int64) ([]byte, int64, error) {
	b, err := v.r.BlobObject(h)
	if err != nil {
		return nil, 0, err
	}
	if b.Size > limit {
		return nil, b.Size, nil
	}
	rd, err := b.Reader()
	if err != nil {
		return nil, 0, err
	}
	defer rd.Close()
	data, err := io.ReadAll(io.LimitReader(rd, limit+1))
	if err != nil {
		return nil, 0, err
	}
	if data == nil {
		data = []byte{}
	}
	return data, int64(len(data)), nil
}

// fileSHA256 hashes a working copy that was not hashed as it was written
// (the segments layout's WTXT, for an older generation.txt that records
// its wtxt_sha256); "" when it cannot be read (an I/O error, reported).
func (v *verifier) fileSHA256(m *materialized) string {
	f, err := os.Open(m.path)
	if err != nil {
		v.ioErr = fmt.Errorf("verify: working copy: %w", err)
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		v.ioErr = fmt.Errorf("verify: working copy: %w", err)
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// countWriter counts bytes and keeps the first 64.
type countWriter struct {
	w    io.Writer
	n    int64
	head []byte
}

func (c *countWriter) Write(p []byte) (int, error) {
	if len(c.head) < 64 {
		c.head = append(c.head, p[:min(len(p), 64-len(c.head))]...)
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// limitWriter passes at most left bytes on and fails (over) beyond.
type limitWriter struct {
	w    io.Writer
	left int64
	over bool
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		l.over = true
		return 0, errOverBudget
	}
	l.left -= int64(len(p))
	return l.w.Write(p)
}

// repoDir returns the directory of r's object store ("" when r is not on
// disk).
func repoDir(r *git.Repository) string {
	fst, ok := r.Storer.(*filesystem.Storage)
	if !ok {
		return ""
	}
	if d, ok := fst.Filesystem().(interface{ Root() string }); ok {
		return d.Root()
	}
	return ""
}

// streamingRepo returns r over a filesystem storage that streams objects
// above largeObjectThreshold from their pack or loose file instead of
// decoding them into memory (go-git's default holds a whole blob in a
// MemoryObject while it is read). Other storages are returned as they are.
func streamingRepo(r *git.Repository) *git.Repository {
	fst, ok := r.Storer.(*filesystem.Storage)
	if !ok {
		return r
	}
	st := filesystem.NewStorageWithOptions(fst.Filesystem(), cache.NewObjectLRU(objectCacheSize), filesystem.Options{LargeObjectThreshold: largeObjectThreshold})
	sr, err := git.Open(st, nil)
	if err != nil {
		return r
	}
	return sr
}

// errWriter records the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil && e.err == nil {
		e.err = err
	}
	return n, err
}

// compareWriter compares what is written with want.
type compareWriter struct {
	want     *bufio.Reader
	n        int64
	mismatch int64
	buf      []byte
}

func (c *compareWriter) Write(p []byte) (int, error) {
	if cap(c.buf) < len(p) {
		c.buf = make([]byte, len(p))
	}
	b := c.buf[:len(p)]
	m, _ := io.ReadFull(c.want, b)
	if m < len(p) || !bytes.Equal(b, p) {
		i := 0
		for i < m && b[i] == p[i] {
			i++
		}
		c.mismatch = c.n + int64(i)
		return 0, errMismatch
	}
	c.n += int64(len(p))
	return len(p), nil
}
