package review

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-github/v60/github"

	"github.com/snapd-ml/snapd/internal/gitexec"
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
// filters), streaming. Git runs through internal/gitexec: in its own
// process group, without snapd's GIT_* variables (a GIT_DIR of the
// caller's would redirect it from Dir).
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
		if err := gitexec.Run(ctx, gitexec.Options{Git: g.git()}, append([]string{"-C", g.Dir}, args...)...); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			cause, stderr := gitexec.Split(err)
			return fmt.Errorf("%w: %s", cause, stderr)
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
	if err := gitexec.Run(ctx, gitexec.Options{Git: g.git(), Stdout: w}, "-C", g.Dir, "cat-file", "blob", sha+":"+path); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cause, stderr := gitexec.Split(err)
		return fmt.Errorf("git cat-file blob %s:%s: %w: %s", sha, path, cause, stderr)
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
// configuration (and, through internal/gitexec, of snapd's GIT_*
// variables), and parses its output as it streams. Equal files give an
// empty Patch.
func LocalPatch(ctx context.Context, git, base, head string) (*Patch, error) {
	if git == "" {
		git = "git"
	}
	cmd := gitexec.Command(ctx, gitexec.Options{Git: git}, "-c", "core.quotePath=false", "-c", "diff.noprefix=false",
		"diff", "--no-index", "--no-color", "--no-ext-diff", "--no-textconv", "--unified=3", "--diff-algorithm=myers", "--", base, head)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		cause, _ := gitexec.Split(err)
		return nil, fmt.Errorf("git diff --no-index: %w", cause)
	}
	p, perr := ReadPatch(out)
	io.Copy(io.Discard, out)
	err = cmd.Wait()
	var ge *gitexec.Error
	if err != nil && !(errors.As(err, &ge) && ge.ExitCode == 1 && ge.Reason == "") {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		cause, stderr := gitexec.Split(err)
		return nil, fmt.Errorf("git diff --no-index %s %s: %w: %s", base, head, cause, stderr)
	}
	if perr != nil {
		return nil, fmt.Errorf("git diff --no-index %s %s: %w", base, head, perr)
	}
	return p, nil
}
