package gitops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// TrailerBase names, on the first generation commit of a branch started
// from Config.BaseBranch, the base commit it was started from (its only
// parent). History walks (verify-repo) stop there: what lies below is the
// base branch's history, not generations.
const TrailerBase = "Snapd-Base"

// BaseRefPrefix is where FetchBase stores the base branch's tip in the
// daemon's repository (refs/snapd/base/<branch>), apart from its branches.
const BaseRefPrefix = "refs/snapd/base/"

// maxAttributesBytes bounds the base branch's .gitattributes snapd reads to
// merge its own rules into.
const maxAttributesBytes = 1 << 20

// attributesMarker starts snapd's block in a .gitattributes.
const attributesMarker = "# Written by snapd."

// ErrBase reports that the base branch could not be resolved.
var ErrBase = errors.New("gitops: base branch")

// baseCommit returns the commit the branch's first generation commit
// starts from: nil without Config.BaseBranch. With Config.FetchBase set it
// is fetched first (into BaseRefPrefix+branch); otherwise the local
// refs/heads/<base> (a repository that already holds it) or an earlier
// fetch's ref is used.
func (r *Repo) baseCommit(ctx context.Context) (*object.Commit, error) {
	b := r.cfg.BaseBranch
	if b == "" {
		return nil, nil
	}
	if r.cfg.FetchBase != nil {
		if err := r.cfg.FetchBase(ctx, b); err != nil {
			return nil, fmt.Errorf("%w %s: fetch: %w", ErrBase, b, err)
		}
	}
	for _, name := range []plumbing.ReferenceName{plumbing.ReferenceName(BaseRefPrefix + b), plumbing.NewBranchReferenceName(b)} {
		ref, err := r.r.Reference(name, true)
		if errors.Is(err, plumbing.ErrReferenceNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w %s: read %s: %w", ErrBase, b, name, err)
		}
		c, err := r.r.CommitObject(ref.Hash())
		if err != nil {
			return nil, fmt.Errorf("%w %s: %s is %s: %w", ErrBase, b, name, ref.Hash(), err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("%w %s: neither %s%s nor refs/heads/%s exists in %s (is the branch on the remote?)", ErrBase, b, BaseRefPrefix, b, b, r.dir)
}

// startFrom turns the base commit into the head Commit builds on: the
// base's root tree (its files stay, so a pull request into the base shows
// only the snapshot directory), its hash as the parent, and no trailers (a
// base commit is not a generation). The snapshot directory, if the base
// has one, is not reused.
func startFrom(c *object.Commit) (*headInfo, error) {
	t, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("%w: tree of %s: %w", ErrBase, c.Hash, err)
	}
	return &headInfo{commit: c, tree: t, trail: map[string]string{}, base: true}, nil
}

// baseMessage adds the TrailerBase line to a first commit's message.
func baseMessage(msg string, base plumbing.Hash) string {
	return msg + TrailerBase + ": " + base.String() + "\n"
}

// BaseOf returns the base commit a generation commit declares with
// TrailerBase, when it has exactly that commit as its only parent.
func BaseOf(c *object.Commit) (plumbing.Hash, bool) {
	v := ParseTrailers(c.Message)[TrailerBase]
	if v == "" || !plumbing.IsHash(v) || len(c.ParentHashes) != 1 {
		return plumbing.ZeroHash, false
	}
	h := plumbing.NewHash(v)
	return h, c.ParentHashes[0] == h
}

// attributes returns the root .gitattributes for a commit whose previous
// root tree is root: snapd's rules (Gitattributes), after whatever rules
// the tree had before snapd's block (a base branch's own), which are kept.
func (r *Repo) attributes(root *object.Tree) ([]byte, error) {
	if root == nil {
		return []byte(Gitattributes), nil
	}
	f, err := root.File(FileAttributes)
	if errors.Is(err, object.ErrFileNotFound) {
		return []byte(Gitattributes), nil
	}
	if err != nil {
		return nil, fmt.Errorf("gitops: %s: %w", FileAttributes, err)
	}
	if f.Size > maxAttributesBytes {
		return nil, fmt.Errorf("gitops: %s is %d bytes, limit %d", FileAttributes, f.Size, maxAttributesBytes)
	}
	rd, err := f.Reader()
	if err != nil {
		return nil, fmt.Errorf("gitops: %s: %w", FileAttributes, err)
	}
	defer rd.Close()
	old, err := io.ReadAll(io.LimitReader(rd, maxAttributesBytes+1))
	if err != nil {
		return nil, fmt.Errorf("gitops: %s: %w", FileAttributes, err)
	}
	own := old
	if i := bytes.Index(old, []byte(attributesMarker)); i >= 0 {
		own = old[:i]
	}
	if len(bytes.TrimSpace(own)) == 0 {
		return []byte(Gitattributes), nil
	}
	s := string(own)
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return []byte(s + Gitattributes), nil
}

// FetchBase fetches branch from the remote into the repository as
// BaseRefPrefix+branch (its tip only: --depth 1, no tags), with the
// remote's credentials, under the push timeout and stall watchdog. It is
// meant for Config.FetchBase.
func (p *GitPusher) FetchBase(ctx context.Context, branch string) error {
	src := plumbing.NewBranchReferenceName(branch)
	if err := src.Validate(); err != nil {
		return fmt.Errorf("branch name %q: %w", branch, err)
	}
	args, env, cleanup, err := p.gitEnv()
	defer cleanup()
	if err != nil {
		return err
	}
	spec := "+" + src.String() + ":" + BaseRefPrefix + branch
	args = append(append([]string{}, args...), "fetch", "--depth", "1", "--no-tags", "--no-write-fetch-head", "--progress", "--", p.url, spec)
	if _, err := p.run(ctx, "fetch", args, env, p.remote.Timeout); err != nil {
		return err
	}
	return nil
}

// HistoryFetcher fetches back from the remote what Repo.Retain cut from
// the local repository; GitPusher implements it (Config.History).
type HistoryFetcher interface {
	// Deepen fetches commits more of branch's history, beyond the
	// repository's shallow boundary.
	Deepen(ctx context.Context, branch string, commits int) error
	// FetchTags fetches the remote's tags whose names keep accepts and
	// whose commits the repository holds (a tag of any other commit is
	// left on the remote: fetching it would fetch that commit's history).
	FetchTags(ctx context.Context, keep func(name string) bool) error
	// RemoteTags lists the remote's tags named prefix or prefix-rK, each
	// with the commit it names.
	RemoteTags(ctx context.Context, prefix string) (map[string]plumbing.Hash, error)
}

// Deepen implements HistoryFetcher: git fetch --deepen (git moves the
// boundary in the shallow file), with the remote's credentials, under the
// push timeout and stall watchdog. No ref changes and no tags are
// fetched; the commits are reachable from the branch again.
func (p *GitPusher) Deepen(ctx context.Context, branch string, commits int) error {
	src := plumbing.NewBranchReferenceName(branch)
	if err := src.Validate(); err != nil {
		return fmt.Errorf("branch name %q: %w", branch, err)
	}
	if commits < 1 {
		return fmt.Errorf("deepen by %d commits: want >= 1", commits)
	}
	args, env, cleanup, err := p.gitEnv()
	defer cleanup()
	if err != nil {
		return err
	}
	args = append(append([]string{}, args...), "fetch", "--deepen="+strconv.Itoa(commits), "--no-tags", "--no-write-fetch-head", "--progress", "--", p.url, src.String())
	_, err = p.run(ctx, "fetch", args, env, p.remote.Timeout)
	return err
}

// FetchTags implements HistoryFetcher: git ls-remote --tags, then one git
// fetch of the accepted tags whose peeled commits the repository holds.
func (p *GitPusher) FetchTags(ctx context.Context, keep func(name string) bool) error {
	args, env, cleanup, err := p.gitEnv()
	defer cleanup()
	if err != nil {
		return err
	}
	peeled, err := p.lsTags(ctx, args, env)
	if err != nil {
		return err
	}
	repo, err := git.PlainOpen(p.repoDir)
	if err != nil {
		return fmt.Errorf("gitops: open %s: %w", p.repoDir, err)
	}
	var specs []string
	for name, target := range peeled {
		if !keep(name) || plumbing.NewTagReferenceName(name).Validate() != nil {
			continue
		}
		if _, err := repo.CommitObject(target); err != nil {
			continue
		}
		specs = append(specs, "+refs/tags/"+name+":refs/tags/"+name)
	}
	if len(specs) == 0 {
		return nil
	}
	sort.Strings(specs)
	args = append(append(append([]string{}, args...), "fetch", "--no-tags", "--no-write-fetch-head", "--", p.url), specs...)
	_, err = p.run(ctx, "fetch", args, env, p.remote.Timeout)
	return err
}

// RemoteTags implements HistoryFetcher: git ls-remote --tags of prefix and
// prefix-r*.
func (p *GitPusher) RemoteTags(ctx context.Context, prefix string) (map[string]plumbing.Hash, error) {
	args, env, cleanup, err := p.gitEnv()
	defer cleanup()
	if err != nil {
		return nil, err
	}
	tags, err := p.lsTags(ctx, args, env, "refs/tags/"+prefix, "refs/tags/"+prefix+"-r*")
	if err != nil {
		return nil, err
	}
	for name := range tags {
		if !reuseOf(name, prefix) {
			delete(tags, name)
		}
	}
	return tags, nil
}

// lsTags lists the remote's tags (matching patterns, when given) with
// the commit each names (an annotated tag's peeled target).
func (p *GitPusher) lsTags(ctx context.Context, args, env []string, patterns ...string) (map[string]plumbing.Hash, error) {
	lsArgs := append(append(append([]string{}, args...), "ls-remote", "--tags", "--", p.url), patterns...)
	out, err := p.run(ctx, "ls-remote", lsArgs, env, p.remote.Timeout)
	if err != nil {
		return nil, err
	}
	peeled := map[string]plumbing.Hash{} // tag name -> the commit it names
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		h, ref, ok := strings.Cut(l, "\t")
		if !ok || !plumbing.IsHash(h) {
			continue
		}
		name, isTag := strings.CutPrefix(ref, "refs/tags/")
		if !isTag {
			continue
		}
		if base, ok := strings.CutSuffix(name, "^{}"); ok {
			peeled[base] = plumbing.NewHash(h)
		} else if _, seen := peeled[name]; !seen {
			peeled[name] = plumbing.NewHash(h) // a lightweight tag, unless its ^{} line follows
		}
	}
	return peeled, nil
}
