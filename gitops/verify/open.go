package verify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// ErrOpen is wrapped by Open's errors (the repository could not be opened
// or cloned: an I/O or usage problem, not a failed check).
var ErrOpen = errors.New("verify: open repository")

// scpLike matches user@host:path remote addresses.
var scpLike = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:`)

// IsURL reports whether target names a remote (scheme://... or
// user@host:path) rather than a local directory.
func IsURL(target string) bool {
	return strings.Contains(target, "://") || scpLike.MatchString(target)
}

// OpenOptions configure Open.
type OpenOptions struct {
	// Branch is fetched when cloning (default "snapshots"); all tags are
	// fetched too, since every generation's tag is checked.
	Branch string
	// TempDir is where a URL is cloned (default os.TempDir()).
	TempDir string
	// Username and Token give HTTP(S) Basic auth (Username default "git");
	// empty Token means anonymous.
	Username, Token string
}

// Open opens target: a local repository (bare or with a work tree; a
// subdirectory of a work tree is accepted) or, for a URL, a bare clone made
// with go-git into a fresh temporary directory holding only the branch and
// the tags. cleanup removes the clone (a no-op for a local repository) and
// must be called when done.
func Open(ctx context.Context, target string, o OpenOptions) (r *git.Repository, cleanup func(), err error) {
	if o.Branch == "" {
		o.Branch = "snapshots"
	}
	if !IsURL(target) {
		st, err := os.Stat(target)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrOpen, err)
		}
		if !st.IsDir() {
			return nil, nil, fmt.Errorf("%w: %s is not a directory", ErrOpen, target)
		}
		r, err := git.PlainOpenWithOptions(target, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
		if errors.Is(err, git.ErrRepositoryNotExists) {
			// A subdirectory of a work tree.
			r, err = git.PlainOpenWithOptions(target, &git.PlainOpenOptions{DetectDotGit: true, EnableDotGitCommonDir: true})
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %w", ErrOpen, target, err)
		}
		return r, func() {}, nil
	}
	dir, err := os.MkdirTemp(o.TempDir, "snapd-verify-repo-*")
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrOpen, err)
	}
	cleanup = func() { os.RemoveAll(dir) }
	var auth transport.AuthMethod
	if o.Token != "" && (strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://")) {
		user := o.Username
		if user == "" {
			user = "git"
		}
		auth = &githttp.BasicAuth{Username: user, Password: o.Token}
	}
	r, err = git.PlainInit(dir, true)
	if err == nil {
		_, err = r.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{target}})
	}
	if err == nil {
		ref := plumbing.NewBranchReferenceName(o.Branch)
		err = r.FetchContext(ctx, &git.FetchOptions{
			RemoteName: "origin",
			RefSpecs:   []config.RefSpec{config.RefSpec(fmt.Sprintf("+%s:%s", ref, ref)), "+refs/tags/*:refs/tags/*"},
			Auth:       auth,
			Tags:       git.NoTags, // the refspec above fetches every tag
		})
		if errors.Is(err, git.NoErrAlreadyUpToDate) {
			err = nil
		}
	}
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("%w: clone %s (branch %s): %w", ErrOpen, redact(target), o.Branch, err)
	}
	return r, cleanup, nil
}

// redact hides a password in a URL.
func redact(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		rest := s[i+3:]
		if at := strings.IndexByte(rest, '@'); at >= 0 && !strings.Contains(rest[:at], "/") {
			if c := strings.IndexByte(rest[:at], ':'); c >= 0 {
				return s[:i+3] + rest[:c] + ":***" + rest[at:]
			}
		}
	}
	return s
}
