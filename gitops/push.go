package gitops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/snapd-ml/snapd/keys"
)

// PushRequest names one generation to publish.
type PushRequest struct {
	Branch string        // branch name, the same locally and on the remote
	Commit plumbing.Hash // the generation's commit (a descendant of the remote branch)
	Tag    string        // optional: refs/tags/<Tag> of the local repository, pushed too
}

// Pusher publishes commits of the local repository to one remote. Push
// never force-updates a ref. When the remote already has the commit on the
// branch (e.g. the acknowledgement of an earlier push was lost) Push only
// completes the tag and returns nil. Errors are *PushError values; use
// NeedsAttention / errors.Is with the Err* kinds to branch.
type Pusher interface {
	Push(ctx context.Context, req PushRequest) error
}

// Push error kinds (sentinels, matched by errors.Is on a *PushError).
var (
	// ErrRetryable: network failure, timeout, HTTP 5xx/408/429, server
	// unpack failure; trying again later may succeed.
	ErrRetryable = errors.New("retryable")
	// ErrAuth: credentials missing, unreadable or refused (HTTP 401/403,
	// SSH authentication or host key failure).
	ErrAuth = errors.New("authentication failed")
	// ErrDiverged: the remote branch (or tag) holds a commit that is not an
	// ancestor of ours; pushing would need a force push, which gitops never does.
	ErrDiverged = errors.New("remote diverged")
	// ErrRejected: the remote refused the update for another reason (hook,
	// protected branch, repository not found, other HTTP 4xx).
	ErrRejected = errors.New("rejected by remote")
	// ErrLocal: the local repository or configuration is at fault (commit or
	// tag missing, bad key file).
	ErrLocal = errors.New("local problem")
)

// PushError is the error every GitPusher.Push failure returns.
type PushError struct {
	Remote string // the remote URL without credentials
	Branch string
	Kind   error // one of ErrRetryable, ErrAuth, ErrDiverged, ErrRejected, ErrLocal
	Err    error
}

func (e *PushError) Error() string {
	return fmt.Sprintf("push %s to %s: %v: %v", e.Branch, e.Remote, e.Kind, e.Err)
}

// Unwrap exposes both the kind sentinel and the cause.
func (e *PushError) Unwrap() []error { return []error{e.Kind, e.Err} }

// NeedsAttention reports whether err is a push failure that retrying will
// not fix: anything classified other than ErrRetryable.
func NeedsAttention(err error) bool {
	return err != nil && (errors.Is(err, ErrAuth) || errors.Is(err, ErrDiverged) || errors.Is(err, ErrRejected) || errors.Is(err, ErrLocal))
}

// Remote configures a GitPusher.
type Remote struct {
	// URL: a local path, file://, http(s):// or ssh:// / scp-like
	// user@host:path. It must not carry a password.
	URL string
	// HTTP(S): the password/token is read at every push (so a fixed
	// credential takes effect without a restart) from TokenFile, else from
	// the environment variable TokenEnv. Username defaults to "git".
	Username  string
	TokenFile string
	TokenEnv  string
	// SSH: private key file (OpenSSH or PEM), optional passphrase env var,
	// known_hosts file (default: the user's, as ssh does). The SSH user is
	// Username, else the URL's, else "git".
	SSHKeyFile        string
	SSHPassphraseEnv  string
	SSHKnownHostsFile string
	// Timeout bounds one Push (listing + upload); default 5 minutes.
	Timeout time.Duration
}

// GitPusher pushes from a local repository with go-git.
type GitPusher struct {
	repoDir string
	remote  Remote
	display string
	getenv  func(string) string
	auth    func() (transport.AuthMethod, error)
}

// NewPusher returns a pusher for the repository at repoDir (as written by
// Repo) and the remote; the transport follows the URL scheme.
func NewPusher(repoDir string, rm Remote) (*GitPusher, error) {
	return newPusher(repoDir, rm, os.Getenv)
}

func newPusher(repoDir string, rm Remote, getenv func(string) string) (*GitPusher, error) {
	if rm.URL == "" {
		return nil, fmt.Errorf("%w: remote URL is empty", ErrConfig)
	}
	if rm.Timeout <= 0 {
		rm.Timeout = 5 * time.Minute
	}
	ep, err := transport.NewEndpoint(rm.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: remote URL %s: %v", ErrConfig, redactURL(rm.URL), err)
	}
	if ep.Password != "" {
		return nil, fmt.Errorf("%w: remote URL %s carries a password; use TokenFile or TokenEnv", ErrConfig, redactURL(rm.URL))
	}
	p := &GitPusher{repoDir: repoDir, remote: rm, display: redactURL(rm.URL), getenv: getenv}
	httpAuth := rm.Username != "" || rm.TokenFile != "" || rm.TokenEnv != ""
	sshAuth := rm.SSHKeyFile != "" || rm.SSHKnownHostsFile != "" || rm.SSHPassphraseEnv != ""
	switch ep.Protocol {
	case "file":
		if httpAuth || sshAuth {
			return nil, fmt.Errorf("%w: remote %s: a local remote takes no credentials", ErrConfig, p.display)
		}
		p.auth = func() (transport.AuthMethod, error) { return nil, nil }
	case "http", "https":
		if sshAuth {
			return nil, fmt.Errorf("%w: remote %s: SSH settings on an HTTP remote", ErrConfig, p.display)
		}
		p.auth = p.httpAuth
	case "ssh":
		if rm.TokenFile != "" || rm.TokenEnv != "" {
			return nil, fmt.Errorf("%w: remote %s: token settings on an SSH remote", ErrConfig, p.display)
		}
		if rm.SSHKeyFile == "" {
			return nil, fmt.Errorf("%w: remote %s: SSH remote needs SSHKeyFile", ErrConfig, p.display)
		}
		user := ep.User
		if rm.Username != "" {
			user = rm.Username
		}
		if user == "" {
			user = "git"
		}
		p.auth = func() (transport.AuthMethod, error) { return p.sshAuth(user) }
	default:
		return nil, fmt.Errorf("%w: remote %s: unsupported protocol %q", ErrConfig, p.display, ep.Protocol)
	}
	return p, nil
}

// String describes the pusher without credentials.
func (p *GitPusher) String() string { return "git remote " + p.display }

func (p *GitPusher) httpAuth() (transport.AuthMethod, error) {
	var token string
	switch {
	case p.remote.TokenFile != "":
		b, err := keys.ReadSecretFile(p.remote.TokenFile)
		if err != nil {
			// The error names the file, never its content.
			return nil, fmt.Errorf("read token file: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return nil, fmt.Errorf("token file %s is empty", p.remote.TokenFile)
		}
	case p.remote.TokenEnv != "":
		token = strings.TrimSpace(p.getenv(p.remote.TokenEnv))
		if token == "" {
			return nil, fmt.Errorf("environment variable %s is empty", p.remote.TokenEnv)
		}
	default:
		return nil, nil
	}
	user := p.remote.Username
	if user == "" {
		user = "git"
	}
	return &githttp.BasicAuth{Username: user, Password: token}, nil
}

func (p *GitPusher) sshAuth(user string) (transport.AuthMethod, error) {
	pass := ""
	if p.remote.SSHPassphraseEnv != "" {
		pass = p.getenv(p.remote.SSHPassphraseEnv)
	}
	pem, err := keys.ReadSecretFile(p.remote.SSHKeyFile)
	if err != nil {
		return nil, fmt.Errorf("SSH key: %w", err)
	}
	pk, err := gitssh.NewPublicKeys(user, pem, pass)
	if err != nil {
		return nil, fmt.Errorf("SSH key %s: %w", p.remote.SSHKeyFile, err)
	}
	if p.remote.SSHKnownHostsFile != "" {
		cb, err := gitssh.NewKnownHostsCallback(p.remote.SSHKnownHostsFile)
		if err != nil {
			return nil, fmt.Errorf("known_hosts %s: %w", p.remote.SSHKnownHostsFile, err)
		}
		pk.HostKeyCallback = cb
	}
	return pk, nil
}

func (p *GitPusher) fail(branch string, kind, err error) error {
	return &PushError{Remote: p.display, Branch: branch, Kind: kind, Err: err}
}

// Push implements Pusher.
func (p *GitPusher) Push(ctx context.Context, req PushRequest) error {
	ctx, cancel := context.WithTimeout(ctx, p.remote.Timeout)
	defer cancel()
	branchRef := plumbing.NewBranchReferenceName(req.Branch)
	if err := branchRef.Validate(); err != nil {
		return p.fail(req.Branch, ErrLocal, fmt.Errorf("branch name: %w", err))
	}
	repo, err := git.PlainOpen(p.repoDir)
	if err != nil {
		return p.fail(req.Branch, ErrLocal, fmt.Errorf("open %s: %w", p.repoDir, err))
	}
	commit, err := repo.CommitObject(req.Commit)
	if err != nil {
		return p.fail(req.Branch, ErrLocal, fmt.Errorf("commit %s: %w", req.Commit, err))
	}
	var tagRef *plumbing.Reference
	if req.Tag != "" {
		if tagRef, err = repo.Reference(plumbing.NewTagReferenceName(req.Tag), false); err != nil {
			return p.fail(req.Branch, ErrLocal, fmt.Errorf("tag %s: %w", req.Tag, err))
		}
	}
	auth, err := p.auth()
	if err != nil {
		return p.fail(req.Branch, ErrAuth, err)
	}
	// The remote sees only the references this push needs, held in
	// memory: the pusher never reads the branch ref the committer is
	// rewriting and never writes to the local repository.
	refs := memory.ReferenceStorage{}
	st := &pushStorer{Storer: repo.Storer, refs: refs}
	remote := git.NewRemote(st, &config.RemoteConfig{Name: "snapd", URLs: []string{p.remote.URL}})

	// Look first: the remote may already have the commit (lost ack) or
	// may have diverged.
	listed, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth})
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return p.classify(req.Branch, err)
	}
	remoteRefs := map[plumbing.ReferenceName]plumbing.Hash{}
	for _, r := range listed {
		remoteRefs[r.Name()] = r.Hash()
	}
	var specs []config.RefSpec
	pushBranch := func() error {
		// refs/snapd/push/<branch> (in memory) names the commit; the
		// local branch head may already be newer.
		local := plumbing.ReferenceName("refs/snapd/push/" + req.Branch)
		refs[local] = plumbing.NewHashReference(local, req.Commit)
		specs = append(specs, config.RefSpec(local.String()+":"+branchRef.String()))
		return nil
	}
	head, has := remoteRefs[branchRef]
	switch {
	case !has:
		if err := pushBranch(); err != nil {
			return err
		}
	case head == req.Commit:
		// Already there.
	default:
		remoteCommit, err := repo.CommitObject(head)
		if err != nil {
			return p.fail(req.Branch, ErrDiverged, fmt.Errorf("remote %s is at %s, which is not in the local history", branchRef, head))
		}
		if ok, err := remoteCommit.IsAncestor(commit); err == nil && ok {
			if err := pushBranch(); err != nil {
				return err
			}
		} else if ok, err := commit.IsAncestor(remoteCommit); err == nil && ok {
			// The remote is ahead with our own later commits: this
			// generation arrived with them.
		} else {
			return p.fail(req.Branch, ErrDiverged, fmt.Errorf("remote %s is at %s, not an ancestor of %s", branchRef, head, req.Commit))
		}
	}
	if tagRef != nil {
		refs[tagRef.Name()] = tagRef
		switch h, has := remoteRefs[tagRef.Name()]; {
		case !has:
			specs = append(specs, config.RefSpec(tagRef.Name()+":"+tagRef.Name()))
		case h != tagRef.Hash():
			return p.fail(req.Branch, ErrDiverged, fmt.Errorf("remote tag %s is %s, local is %s", req.Tag, h, tagRef.Hash()))
		}
	}
	if len(specs) == 0 {
		return nil
	}
	err = remote.PushContext(ctx, &git.PushOptions{RemoteName: "snapd", RefSpecs: specs, Auth: auth})
	if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil
	}
	return p.classify(req.Branch, err)
}

// pushStorer is the local repository's object storage with an in-memory
// reference store.
type pushStorer struct {
	storage.Storer
	refs memory.ReferenceStorage
}

func (s *pushStorer) SetReference(r *plumbing.Reference) error { return s.refs.SetReference(r) }
func (s *pushStorer) CheckAndSetReference(n, o *plumbing.Reference) error {
	return s.refs.CheckAndSetReference(n, o)
}
func (s *pushStorer) Reference(n plumbing.ReferenceName) (*plumbing.Reference, error) {
	return s.refs.Reference(n)
}
func (s *pushStorer) IterReferences() (storer.ReferenceIter, error) { return s.refs.IterReferences() }
func (s *pushStorer) RemoveReference(n plumbing.ReferenceName) error {
	return s.refs.RemoveReference(n)
}
func (s *pushStorer) CountLooseRefs() (int, error) { return s.refs.CountLooseRefs() }
func (s *pushStorer) PackRefs() error              { return nil }

// classify wraps a transport error in a *PushError of the right kind.
func (p *GitPusher) classify(branch string, err error) error {
	return p.fail(branch, Classify(err), err)
}

// Classify returns the kind (ErrRetryable, ErrAuth, ErrDiverged,
// ErrRejected) of a go-git push or list error.
func Classify(err error) error {
	var herr *githttp.Err
	var uerr *plumbing.UnexpectedError
	if errors.As(err, &uerr) && uerr.Err != nil {
		errors.As(uerr.Err, &herr)
	} else {
		errors.As(err, &herr)
	}
	msg := err.Error()
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed),
		errors.Is(err, transport.ErrInvalidAuthMethod),
		strings.Contains(msg, "unable to authenticate"), strings.Contains(msg, "knownhosts:"),
		strings.Contains(msg, "host key"):
		return ErrAuth
	case errors.Is(err, git.ErrNonFastForwardUpdate), errors.Is(err, git.ErrForceNeeded),
		strings.Contains(msg, "non-fast-forward"), strings.Contains(msg, "fetch first"),
		strings.Contains(msg, "already exists"), strings.Contains(msg, "stale info"):
		return ErrDiverged
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return ErrRejected
	case herr != nil:
		switch c := herr.StatusCode(); {
		case c >= 500, c == 408, c == 429:
			return ErrRetryable
		case c >= 400:
			return ErrRejected
		}
		return ErrRetryable
	case strings.HasPrefix(msg, "command error on"):
		// receive-pack refused a ref: hook, protected branch, ...
		return ErrRejected
	}
	var nerr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return ErrRetryable
	}
	// Unknown: keep retrying with backoff rather than stop the queue; the
	// status shows the error.
	return ErrRetryable
}

// redactURL removes userinfo passwords and query strings from a URL for
// messages and logs.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return s
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "REDACTED")
		}
	}
	u.RawQuery = ""
	return u.String()
}
