package review

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"

	"github.com/google/go-github/v60/github"
)

// ErrNotFound is returned by a Fetcher when the path does not exist at the
// commit (the file was added or removed by the change).
var ErrNotFound = errors.New("not found at that commit")

// ErrUnavailable is returned by a Fetcher that cannot serve the commit at
// all (no git checkout, or a shallow one without it); Fallback then tries
// the next fetcher.
var ErrUnavailable = errors.New("commit not available")

// Fetcher reads a file as of a commit.
type Fetcher interface {
	// Fetch writes the content of path at commit sha to w. It returns
	// ErrNotFound when the path does not exist there.
	Fetch(ctx context.Context, sha, path string, w io.Writer) error
}

// GitFetcher reads blobs from a local git repository with the git CLI
// (`git cat-file blob SHA:PATH`, the raw blob without textconv or
// filters), streaming.
type GitFetcher struct {
	Dir string // working tree or bare repository
	// Git is the git executable ("" = "git" on PATH).
	Git string
}

func (g GitFetcher) git() string {
	if g.Git == "" {
		return "git"
	}
	return g.Git
}

// Fetch implements Fetcher. It returns ErrUnavailable when Dir is not a git
// repository or does not hold the commit.
func (g GitFetcher) Fetch(ctx context.Context, sha, path string, w io.Writer) error {
	if !isHexSHA(sha) {
		return fmt.Errorf("git: %q is not a commit sha", sha)
	}
	if strings.HasPrefix(path, "-") || strings.Contains(path, "\n") {
		return fmt.Errorf("git: refusing path %q", path)
	}
	run := func(args ...string) error {
		cmd := exec.CommandContext(ctx, g.git(), append([]string{"-C", g.Dir}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Stdout = io.Discard
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
		}
		return nil
	}
	if err := run("cat-file", "-e", sha+"^{commit}"); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("git %s: commit %s: %w (%v)", g.Dir, sha, ErrUnavailable, err)
	}
	if err := run("cat-file", "-e", sha+":"+path); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("git: %s at %s: %w", path, sha, ErrNotFound)
	}
	cmd := exec.CommandContext(ctx, g.git(), "-C", g.Dir, "cat-file", "blob", sha+":"+path)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("git cat-file blob %s:%s: %w: %s", sha, path, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func isHexSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ContentsFetcher reads files through the GitHub contents API
// (GET /repos/{owner}/{repo}/contents/{path}?ref=SHA with the raw media
// type, which serves files up to 100 MB), streaming.
type ContentsFetcher struct {
	Client      *Client
	Owner, Repo string
}

// Fetch implements Fetcher.
func (f ContentsFetcher) Fetch(ctx context.Context, sha, path string, w io.Writer) error {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	u := fmt.Sprintf("repos/%s/%s/contents/%s?ref=%s", url.PathEscape(f.Owner), url.PathEscape(f.Repo), strings.Join(segs, "/"), url.QueryEscape(sha))
	req, err := f.Client.gh.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/vnd.github.raw")
	_, err = f.Client.gh.Do(ctx, req, w)
	var er *github.ErrorResponse
	if errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusNotFound {
		return fmt.Errorf("github contents: %s at %s: %w", path, sha, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("github contents: %s at %s: %w", path, sha, err)
	}
	return nil
}

// Fallback tries each fetcher in turn, moving on only when one returns
// ErrUnavailable.
type Fallback []Fetcher

// Fetch implements Fetcher.
func (fs Fallback) Fetch(ctx context.Context, sha, path string, w io.Writer) error {
	var last error = ErrUnavailable
	for _, f := range fs {
		err := f.Fetch(ctx, sha, path, w)
		if !errors.Is(err, ErrUnavailable) {
			return err
		}
		last = err
	}
	return last
}

// LocalPatch runs `git diff --no-index` on two local files (base, head)
// with settings that make the output independent of the user's git
// configuration, and parses its output as it streams. Equal files give an
// empty Patch.
func LocalPatch(ctx context.Context, git, base, head string) (*Patch, error) {
	if git == "" {
		git = "git"
	}
	cmd := exec.CommandContext(ctx, git, "-c", "core.quotePath=false", "-c", "diff.noprefix=false",
		"diff", "--no-index", "--no-color", "--no-ext-diff", "--no-textconv", "--unified=3", "--diff-algorithm=myers", "--", base, head)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("git diff --no-index: %w", err)
	}
	p, perr := ReadPatch(out)
	io.Copy(io.Discard, out)
	err = cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("git diff --no-index %s %s: %w: %s", base, head, err, strings.TrimSpace(stderr.String()))
	}
	if perr != nil {
		return nil, fmt.Errorf("git diff --no-index %s %s: %w", base, head, perr)
	}
	return p, nil
}
