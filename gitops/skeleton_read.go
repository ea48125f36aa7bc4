package gitops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/gitops/layout"
)

// Reading a skeleton-layout generation (FileSkeleton, its parts, and the
// registry keys of generation.txt) from a repository; the WTXT is then
// rebuilt from the skeleton and the registry (gitops/layout/oci, wtxt.Assemble).

// MaxSummaryBytes bounds generation.txt as the readers accept it.
const MaxSummaryBytes = 64 << 10

// genDir returns the generation directory (Config.Path) of rev's commit.
func (r *Repo) genDir(rev string) (*object.Tree, error) {
	h, err := r.r.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return nil, fmt.Errorf("gitops: revision %q: %w", rev, err)
	}
	c, err := r.r.CommitObject(*h)
	if err != nil {
		return nil, fmt.Errorf("gitops: revision %q: %w", rev, err)
	}
	root, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("gitops: tree of %s: %w", c.Hash, err)
	}
	dir, err := root.Tree(r.cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("gitops: %s:%s: %w", rev, r.cfg.Path, err)
	}
	return dir, nil
}

// Layout returns the layout rev's generation is stored in
// (layout.Detect over its directory).
func (r *Repo) Layout(rev string) (Layout, error) {
	dir, err := r.genDir(rev)
	if err != nil {
		return "", err
	}
	n, err := layout.Detect(layout.TreeHas(dir))
	if err != nil {
		return "", fmt.Errorf("gitops: %s:%s: %w", rev, r.cfg.Path, err)
	}
	return n, nil
}

// WriteSkeleton writes the skeleton of rev's generation to w: FileSkeleton
// as committed, or its parts assembled with every part's size and SHA-256
// checked against their MANIFEST (AssembleFS).
func (r *Repo) WriteSkeleton(rev string, w io.Writer) error {
	dir, err := r.genDir(rev)
	if err != nil {
		return err
	}
	// Blobs stream from their loose files or git cat-file (blobFS), not
	// whole through go-git.
	ctx := context.Background()
	form, err := layout.Stored(layout.TreeHas(dir), FileSkeleton)
	if err != nil {
		return fmt.Errorf("gitops: %s:%s: %w", rev, r.cfg.Path, err)
	}
	if e, err := dir.FindEntry(FileSkeleton); form == layout.Single && err == nil && e.Mode.IsFile() {
		fsys, done := r.blobFS(ctx, dir)
		defer done()
		return copyBlob(fsys, FileSkeleton, w)
	}
	parts, err := dir.Tree(FileSkeleton + partsSuffix)
	if form != layout.Split || err != nil {
		return fmt.Errorf("gitops: %s:%s has neither %s nor %s%s", rev, r.cfg.Path, FileSkeleton, FileSkeleton, partsSuffix)
	}
	fsys, done := r.blobFS(ctx, parts)
	defer done()
	if err := layout.AssembleFS(fsys, ".", w); err != nil {
		return fmt.Errorf("gitops: %s%s: %w", FileSkeleton, partsSuffix, err)
	}
	return nil
}

// ErrSummary reports a generation.txt that cannot be read as key=value
// lines.
var ErrSummary = errors.New("gitops: malformed " + FileSummary)

// Summary returns rev's generation.txt (FileSummary) as key → value. It
// reads at most MaxSummaryBytes; a line without '=' or a repeated key is
// an error naming the line (its content is not echoed).
func (r *Repo) Summary(rev string) (map[string]string, error) {
	dir, err := r.genDir(rev)
	if err != nil {
		return nil, err
	}
	f, err := dir.File(FileSummary)
	if err != nil {
		return nil, fmt.Errorf("gitops: %s:%s/%s: %w", rev, r.cfg.Path, FileSummary, err)
	}
	if f.Size > MaxSummaryBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrSummary, f.Size, MaxSummaryBytes)
	}
	rd, err := f.Reader()
	if err != nil {
		return nil, fmt.Errorf("gitops: %s: %w", FileSummary, err)
	}
	defer rd.Close()
	b, err := io.ReadAll(io.LimitReader(rd, MaxSummaryBytes+1))
	if err != nil {
		return nil, fmt.Errorf("gitops: %s: %w", FileSummary, err)
	}
	return ParseSummary(b)
}

// ParseSummary parses generation.txt: one key=value per line.
func ParseSummary(b []byte) (map[string]string, error) {
	if len(b) > MaxSummaryBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrSummary, len(b), MaxSummaryBytes)
	}
	kv := map[string]string{}
	for i, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: line %d is not key=value", ErrSummary, i+1)
		}
		if _, dup := kv[k]; dup {
			return nil, fmt.Errorf("%w: line %d: key %s appears twice", ErrSummary, i+1, safeKey(k))
		}
		kv[k] = v
	}
	return kv, nil
}

// safeKey returns k when it is a short plain key, else a placeholder (an
// error never echoes file content).
func safeKey(k string) string {
	if len(k) > 32 {
		return "(long key)"
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return "(non-plain key)"
		}
	}
	return k
}
