package gitops

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"time"

	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/gitops/layout"
)

// WriteWTXT writes the WTXT stored at revision rev (a tag such as
// "gen-000123", a branch, or a commit hash) to w, assembling it from its
// parts when the generation was stored split (with every size and SHA-256
// in the MANIFEST checked). On error, what was written must be discarded.
// It does not lock the repository against a concurrent Commit: call it
// where nothing commits (snapd checkout).
func (r *Repo) WriteWTXT(rev string, w io.Writer) error {
	dir, err := r.genDir(rev)
	if err != nil {
		return err
	}
	n, err := layout.Detect(layout.TreeHas(dir))
	if err != nil {
		return fmt.Errorf("gitops: %s:%s: %w", rev, r.cfg.Path, err)
	}
	// Blobs stream from their loose files or git cat-file (blobFS): go-git
	// would hold a whole blob (and its delta bases) in memory.
	ctx := context.Background()
	switch n {
	case layout.Single:
		if e, err := dir.FindEntry(FileWTXT); err != nil || !e.Mode.IsFile() {
			return fmt.Errorf("gitops: %s:%s/%s: not a regular file", rev, r.cfg.Path, FileWTXT)
		}
		fsys, done := r.blobFS(ctx, dir)
		defer done()
		return copyBlob(fsys, FileWTXT, w)
	case layout.Segments:
		t, err := dir.Tree(DirWTXTSegs)
		if err != nil {
			return fmt.Errorf("gitops: %s:%s/%s: %w", rev, r.cfg.Path, DirWTXTSegs, err)
		}
		fsys, done := GitTreeFS(ctx, r.dir, t)
		defer done()
		_, err = layout.ReadSegments(ctx, fsys, w)
		return err
	case layout.Split:
		parts, err := dir.Tree(DirWTXTParts)
		if err != nil {
			return fmt.Errorf("gitops: %s:%s/%s: %w", rev, r.cfg.Path, DirWTXTParts, err)
		}
		fsys, done := r.blobFS(ctx, parts)
		defer done()
		return layout.AssembleFS(fsys, ".", w)
	}
	return fmt.Errorf("gitops: %s:%s: the generation is in the %s layout (its tensor bytes are in an OCI registry: WriteSkeleton, then wtxt.Assemble)", rev, r.cfg.Path, n)
}

// blobFS is GitTreeFS over t whose big loose blobs are read from their
// files (openLoose), so neither this process nor git holds a whole one.
func (r *Repo) blobFS(ctx context.Context, t *object.Tree) (fsys fs.FS, done func()) {
	fsys, done = GitTreeFS(ctx, r.dir, t)
	if tf, ok := fsys.(treeFS); ok {
		fsys = looseFS{treeFS: tf, objects: objectsDir(r.dir)}
	}
	return fsys, done
}

// copyBlob copies the file name of fsys to w, with errors naming it.
func copyBlob(fsys fs.FS, name string, w io.Writer) error {
	rd, err := fsys.Open(name)
	if err != nil {
		return fmt.Errorf("gitops: %s: %w", name, err)
	}
	defer rd.Close()
	if _, err := io.Copy(w, rd); err != nil {
		return fmt.Errorf("gitops: %s: %w", name, err)
	}
	return nil
}

// TreeFS returns a read-only fs.FS over the blobs of one Git tree, e.g. to
// AssembleFS a split file straight from a commit.
func TreeFS(t *object.Tree) fs.FS { return treeFS{t: t} }

// GitTreeFS is TreeFS whose blob contents come from `git cat-file
// --batch` in the repository at dir (catfile.go: git resolves deltas in
// C and does not re-hash; readers check chunk hashes anyway), or from
// go-git when git cannot be started. done ends the git child.
func GitTreeFS(ctx context.Context, dir string, t *object.Tree) (fsys fs.FS, done func()) {
	cf, err := startCatFile(ctx, dir)
	if err != nil {
		return treeFS{t: t}, func() {}
	}
	return treeFS{t: t, cat: cf}, func() { cf.Close() }
}

// treeFS is a read-only fs.FS over the blobs of one Git tree.
type treeFS struct {
	t *object.Tree
	// cat, when set, reads blob contents (catfile.go); go-git reads them
	// otherwise, and while cat is busy with another blob.
	cat *catFile
}

func (f treeFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if f.cat != nil {
		if e, err := f.t.FindEntry(name); err == nil && e.Mode.IsFile() {
			rc, size, busy, err := f.cat.open(e.Hash)
			if err == nil && !busy {
				return &treeFile{ReadCloser: rc, name: name, size: size}, nil
			}
		}
	}
	file, err := f.t.File(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	rd, err := file.Reader()
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &treeFile{ReadCloser: rd, name: name, size: file.Size}, nil
}

type treeFile struct {
	io.ReadCloser
	name string
	size int64
}

func (f *treeFile) Stat() (fs.FileInfo, error) { return treeFileInfo{f}, nil }

type treeFileInfo struct{ f *treeFile }

func (i treeFileInfo) Name() string       { return path.Base(i.f.name) }
func (i treeFileInfo) Size() int64        { return i.f.size }
func (i treeFileInfo) Mode() fs.FileMode  { return 0o444 }
func (i treeFileInfo) ModTime() time.Time { return time.Time{} }
func (i treeFileInfo) IsDir() bool        { return false }
func (i treeFileInfo) Sys() any           { return nil }
