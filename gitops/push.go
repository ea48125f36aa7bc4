package gitops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"

	"github.com/snapd-ml/snapd/keys"
)

// PushRequest names one generation to publish.
type PushRequest struct {
	Branch string        // branch name, the same locally and on the remote
	Commit plumbing.Hash // the generation's commit (a descendant of the remote branch)
	Tag    string        // optional: refs/tags/<Tag> of the local repository, pushed too
	// Added, when > 0, is what Repo.Commit wrote for Commit over its
	// parent (Result.BytesWritten). When the remote branch is at that
	// parent, Push takes it (plus the trees' share) as the bytes to
	// send instead of walking both histories with git rev-list (a dense
	// 1 GiB generation's 300k objects: about 3 s before every push).
	Added int64
	// Progress, if set, is called (from the goroutine running Push, which
	// it must not block for long) at the start of each phase and at each
	// new state of git push's progress (PushProgress).
	Progress func(PushProgress)
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
	// Timeout bounds one Push: Timeout + (bytes to send) / MinRate, where
	// the bytes are the on-disk size of the objects the remote lacks
	// (git rev-list --disk-usage). Defaults DefaultPushTimeout and
	// DefaultPushMinRate.
	Timeout time.Duration
	MinRate int64 // bytes per second
	// Stall: a git process that reports no progress (no new output on
	// its stderr, where --progress writes, nor on its stdout) for this
	// long is killed and the push fails with ErrTimeout. Default
	// DefaultPushStall.
	Stall time.Duration
	// Git is the git executable; default "git" from PATH.
	Git string
	// Logger receives one line per killed git process (reason, elapsed);
	// nil discards.
	Logger *slog.Logger
}

// Push defaults.
const (
	DefaultPushTimeout = 5 * time.Minute
	DefaultPushMinRate = 1 << 20 // 1 MiB/s
	DefaultPushStall   = 2 * time.Minute
)

// GitPusher pushes from a local repository by running the git CLI (git
// ls-remote, git push) in its own process group: git streams objects with
// bounded memory, and a timeout or a stall kills the whole group, so no
// orphaned git index-pack or remote helper can hold a pipe open. go-git
// reads the local history (ancestry checks) only.
type GitPusher struct {
	repoDir string
	remote  Remote
	url     string // the URL handed to git (SSH user filled in)
	proto   string
	display string
	getenv  func(string) string
	log     *slog.Logger

	// known is the remote's branch heads as this pusher last saw them
	// (its own successful pushes, or a listing): a push of a child of the
	// known head goes without listing the remote first.
	mu       sync.Mutex
	known    map[string]plumbing.Hash
	noAtomic bool // the remote refused --atomic: always list first
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
		rm.Timeout = DefaultPushTimeout
	}
	if rm.MinRate <= 0 {
		rm.MinRate = DefaultPushMinRate
	}
	if rm.Stall <= 0 {
		rm.Stall = DefaultPushStall
	}
	if rm.Git == "" {
		rm.Git = "git"
	}
	if strings.HasPrefix(rm.URL, "-") || strings.ContainsAny(rm.URL, "\x00\n") {
		return nil, fmt.Errorf("%w: remote URL %s: must not start with '-' or hold control characters", ErrConfig, redactURL(rm.URL))
	}
	ep, err := transport.NewEndpoint(rm.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: remote URL %s: %v", ErrConfig, redactURL(rm.URL), err)
	}
	if ep.Password != "" {
		return nil, fmt.Errorf("%w: remote URL %s carries a password; remove it and use a token file or environment variable (git.token_file, git.token_env)", ErrConfig, redactURL(rm.URL))
	}
	p := &GitPusher{repoDir: repoDir, remote: rm, url: rm.URL, proto: ep.Protocol, display: redactURL(rm.URL), getenv: getenv, log: rm.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	httpAuth := rm.Username != "" || rm.TokenFile != "" || rm.TokenEnv != ""
	sshAuth := rm.SSHKeyFile != "" || rm.SSHKnownHostsFile != "" || rm.SSHPassphraseEnv != ""
	switch ep.Protocol {
	case "file":
		if httpAuth || sshAuth {
			return nil, fmt.Errorf("%w: remote %s: a local remote takes no credentials", ErrConfig, p.display)
		}
	case "http", "https":
		if sshAuth {
			return nil, fmt.Errorf("%w: remote %s: SSH settings on an HTTP remote", ErrConfig, p.display)
		}
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
		if p.url, err = sshURLWithUser(rm.URL, user); err != nil {
			return nil, fmt.Errorf("%w: remote %s: %v", ErrConfig, p.display, err)
		}
	default:
		return nil, fmt.Errorf("%w: remote %s: unsupported protocol %q", ErrConfig, p.display, ep.Protocol)
	}
	return p, nil
}

// sshURLWithUser sets the user of an ssh:// or scp-like URL.
func sshURLWithUser(raw, user string) (string, error) {
	if strings.ContainsAny(user, "@:/ \t'\"\\") {
		return "", fmt.Errorf("SSH user %q", user)
	}
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			return "", err
		}
		u.User = url.User(user)
		return u.String(), nil
	}
	host, rest, ok := strings.Cut(raw, ":")
	if !ok {
		return "", errors.New("not host:path")
	}
	if i := strings.LastIndexByte(host, '@'); i >= 0 {
		host = host[i+1:]
	}
	return user + "@" + host + ":" + rest, nil
}

// String describes the pusher without credentials.
func (p *GitPusher) String() string { return "git remote " + p.display }

// token returns the HTTP token ("" when none is configured).
func (p *GitPusher) token() (string, error) {
	switch {
	case p.remote.TokenFile != "":
		b, err := keys.ReadSecretFile(p.remote.TokenFile)
		if err != nil {
			// The error names the file, never its content.
			return "", fmt.Errorf("read token file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("token file %s is empty", p.remote.TokenFile)
		}
		return tok, nil
	case p.remote.TokenEnv != "":
		tok := strings.TrimSpace(p.getenv(p.remote.TokenEnv))
		if tok == "" {
			return "", fmt.Errorf("environment variable %s is empty", p.remote.TokenEnv)
		}
		return tok, nil
	}
	return "", nil
}

// Environment variables snapd sets for its git children; secrets travel
// only here (a child's environment is readable by its owner only), never
// on a command line or in a log.
const (
	envUser     = "SNAPD_GIT_USERNAME"
	envPassword = "SNAPD_GIT_PASSWORD"
	envSSHPass  = "SNAPD_GIT_SSH_PASSPHRASE"
)

// credentialHelper answers git's credential "get" from the environment.
const credentialHelper = `!f() { test "$1" = get || exit 0; printf 'username=%s\npassword=%s\n' "$` + envUser + `" "$` + envPassword + `"; }; f`

// droppedEnv names the variables of snapd's environment a git child
// talking to the remote does not inherit, besides every GIT_* one
// (internal/gitexec drops those): nothing of the daemon's own git or ssh
// setup leaks in (GIT_DIR, GIT_SSH_COMMAND, askpass programs that could
// prompt), nor a stray value of the variables gitEnv sets.
var droppedEnv = []string{"SSH_ASKPASS*", envUser, envPassword, envSSHPass}

// gitEnv returns the command-line options (-c ...) and the variables set
// for a git child talking to the remote (over snapd's environment
// without GIT_* and droppedEnv), and a cleanup for temporary files.
func (p *GitPusher) gitEnv() (args, env []string, cleanup func(), err error) {
	cleanup = func() {}
	env = append(env, "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=", "GCM_INTERACTIVE=never", "LC_ALL=C")
	// The credential helpers of the user's configuration are reset.
	args = []string{"-c", "credential.helper=", "-c", "core.askPass=", "-c", "protocol.ext.allow=never"}
	switch p.proto {
	case "http", "https":
		tok, err := p.token()
		if err != nil {
			return nil, nil, cleanup, err
		}
		if tok != "" {
			user := p.remote.Username
			if user == "" {
				user = "git"
			}
			args = append(args, "-c", "credential.helper="+credentialHelper)
			env = append(env, envUser+"="+user, envPassword+"="+tok)
		}
	case "ssh":
		// Same rule as every credential file: private to its owner, a
		// regular file (ssh would also refuse a readable key, less clearly).
		if _, err := keys.ReadSecretFile(p.remote.SSHKeyFile); err != nil {
			return nil, nil, cleanup, fmt.Errorf("SSH key: %w", err)
		}
		ssh := []string{"ssh", "-F", "/dev/null", "-i", shellQuote(p.remote.SSHKeyFile), "-o", "IdentitiesOnly=yes",
			"-o", "IdentityAgent=none", "-o", "StrictHostKeyChecking=yes", "-o", "PasswordAuthentication=no",
			"-o", "KbdInteractiveAuthentication=no", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"}
		if p.remote.SSHKnownHostsFile != "" {
			ssh = append(ssh, "-o", "UserKnownHostsFile="+shellQuote(p.remote.SSHKnownHostsFile), "-o", "GlobalKnownHostsFile=/dev/null")
		}
		if p.remote.SSHPassphraseEnv != "" {
			// ssh reads the passphrase from an askpass program that prints
			// it from the environment.
			dir, err := os.MkdirTemp("", "snapd-askpass-")
			if err != nil {
				return nil, nil, cleanup, err
			}
			cleanup = func() { os.RemoveAll(dir) }
			prog := filepath.Join(dir, "askpass")
			if err := os.WriteFile(prog, []byte("#!/bin/sh\nprintf '%s\\n' \"$"+envSSHPass+"\"\n"), 0o700); err != nil {
				cleanup()
				return nil, nil, func() {}, err
			}
			env = append(env, "SSH_ASKPASS="+prog, "SSH_ASKPASS_REQUIRE=force", "DISPLAY=snapd:0", envSSHPass+"="+p.getenv(p.remote.SSHPassphraseEnv))
		} else {
			ssh = append(ssh, "-o", "BatchMode=yes")
		}
		env = append(env, "GIT_SSH_COMMAND="+strings.Join(ssh, " "), "GIT_SSH_VARIANT=ssh")
	}
	return args, env, cleanup, nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// knownHead returns the remote's head of branch as this pusher last saw it.
func (p *GitPusher) knownHead(branch string) (plumbing.Hash, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.known[branch]
	return h, ok && !p.noAtomic
}

func (p *GitPusher) setKnown(branch string, h plumbing.Hash) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.known == nil {
		p.known = map[string]plumbing.Hash{}
	}
	p.known[branch] = h
}

func (p *GitPusher) forget(branch string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.known, branch)
}

func (p *GitPusher) fail(branch string, kind, err error) error {
	return &PushError{Remote: p.display, Branch: branch, Kind: kind, Err: err}
}

// Push implements Pusher. It lists the remote (git ls-remote), decides
// what to send from the local history, then runs one git push of
// <commit>:refs/heads/<branch> (and the tag) without force. When the
// commit's first parent is the branch head this pusher last saw on the
// remote (its own previous push), it pushes without listing first: one
// connection instead of two. A remote that moved meanwhile refuses that
// push as not a fast-forward (nothing is forced), and Push then lists it
// and decides as above. Each git child runs in its own process group
// under the size-scaled timeout and the stall watchdog; on any failure
// the group is killed and, for a local remote, the quarantine
// directories the attempt left are removed.
func (p *GitPusher) Push(ctx context.Context, req PushRequest) error {
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
	args, env, cleanup, err := p.gitEnv()
	defer cleanup()
	if err != nil {
		return p.fail(req.Branch, ErrAuth, err)
	}

	rep := &progressReporter{fn: req.Progress}
	branchSpec := req.Commit.String() + ":" + branchRef.String()
	var tagSpec string
	if tagRef != nil {
		tagSpec = tagRef.Name().String() + ":" + tagRef.Name().String()
	}
	if head, ok := p.knownHead(req.Branch); ok && len(commit.ParentHashes) > 0 && commit.ParentHashes[0] == head {
		specs := []string{branchSpec}
		if tagRef != nil {
			specs = append(specs, tagSpec)
		}
		// Atomic: a refused branch must not leave the tag behind on the
		// remote, as the listing path never pushes to a diverged one.
		err := p.send(ctx, req, commit, head, true, map[plumbing.ReferenceName]plumbing.Hash{branchRef: head}, specs, true, rep, args, env)
		if err == nil {
			p.setKnown(req.Branch, req.Commit)
			return nil
		}
		p.forget(req.Branch)
		var ge *GitError
		switch {
		case errors.Is(err, ErrDiverged):
			p.log.Info("the remote moved since the last push; listing it", "remote", p.display, "branch", req.Branch)
		case errors.As(err, &ge) && strings.Contains(ge.Stderr, "support --atomic"):
			p.log.Info("the remote does not take atomic pushes; listing it before every push", "remote", p.display)
			p.mu.Lock()
			p.noAtomic = true
			p.mu.Unlock()
		default:
			return err
		}
	}

	// Look first: the remote may already have the commit (lost ack) or
	// may have diverged.
	patterns := []string{branchRef.String()}
	if tagRef != nil {
		patterns = append(patterns, tagRef.Name().String())
	}
	lsArgs := append(append(append([]string{}, args...), "ls-remote", "--", p.url), patterns...)
	rep.phase(PhaseListRemote, p.remote.Timeout, p.remote.Stall)
	out, err := p.run(ctx, "ls-remote", lsArgs, env, p.remote.Timeout)
	if err != nil {
		return p.fail(req.Branch, kindOf(err), err)
	}
	remoteRefs := map[plumbing.ReferenceName]plumbing.Hash{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		h, name, ok := strings.Cut(l, "\t")
		if ok && plumbing.IsHash(h) {
			remoteRefs[plumbing.ReferenceName(name)] = plumbing.NewHash(h)
		}
	}
	var specs []string
	head, has := remoteRefs[branchRef]
	// after is the remote's branch head once the push is done (zero: no
	// branch).
	after := head
	switch {
	case !has:
		specs, after = append(specs, branchSpec), req.Commit
	case head == req.Commit:
		// Already there.
	default:
		remoteCommit, err := repo.CommitObject(head)
		if err != nil {
			return p.fail(req.Branch, ErrDiverged, fmt.Errorf("remote %s is at %s, which is not in the local history", branchRef, head))
		}
		if ok, err := remoteCommit.IsAncestor(commit); err == nil && ok {
			specs, after = append(specs, branchSpec), req.Commit
		} else if ok, err := commit.IsAncestor(remoteCommit); err == nil && ok {
			// The remote is ahead with our own later commits: this
			// generation arrived with them.
		} else {
			return p.fail(req.Branch, ErrDiverged, fmt.Errorf("remote %s is at %s, not an ancestor of %s", branchRef, head, req.Commit))
		}
	}
	if tagRef != nil {
		switch h, has := remoteRefs[tagRef.Name()]; {
		case !has:
			specs = append(specs, tagSpec)
		case h != tagRef.Hash():
			return p.fail(req.Branch, ErrDiverged, fmt.Errorf("remote tag %s is %s, local is %s", req.Tag, h, tagRef.Hash()))
		}
	}
	if len(specs) > 0 {
		if err := p.send(ctx, req, commit, head, has, remoteRefs, specs, false, rep, args, env); err != nil {
			p.forget(req.Branch)
			return err
		}
	}
	if !after.IsZero() {
		p.setKnown(req.Branch, after)
	}
	return nil
}

// send runs the git push of specs (atomic: git push --atomic): the
// remote's branch is at head (has false: the remote has no such branch)
// and its listed refs are remoteRefs.
func (p *GitPusher) send(ctx context.Context, req PushRequest, commit *object.Commit, head plumbing.Hash, has bool,
	remoteRefs map[plumbing.ReferenceName]plumbing.Hash, specs []string, atomic bool, rep *progressReporter, args, env []string) error {
	// The time allowed grows with what has to be sent.
	rep.phase(PhaseCount, p.remote.Timeout, p.remote.Stall)
	var send int64
	if req.Added > 0 && has && len(commit.ParentHashes) > 0 && commit.ParentHashes[0] == head {
		send = addedSendBytes(req.Added)
	} else {
		send = p.sendBytes(ctx, req.Commit, remoteRefs, env)
	}
	timeout := p.remote.Timeout + time.Duration(float64(send)/float64(p.remote.MinRate)*float64(time.Second))
	rep.cur.SendBytes = send
	sweep := p.quarantineSweeper()
	limits := pushLimits(send)
	pushArgs := append(append(append(append([]string{}, args...), limits...), pushPackOptions...), "push", "--porcelain", "--progress", "--no-verify")
	if p.proto == "file" {
		// A local remote's receive-pack (and its index-pack) run here, as
		// the daemon's descendants: the same limits, on their command line
		// since git does not pass GIT_CONFIG_PARAMETERS to them.
		rp := []string{shellQuote(p.remote.Git)}
		for _, a := range append(append([]string{}, limits...), localReceiveOptions...) {
			rp = append(rp, shellQuote(a))
		}
		pushArgs = append(pushArgs, "--receive-pack="+strings.Join(append(rp, "receive-pack"), " "))
	}
	if atomic {
		pushArgs = append(pushArgs, "--atomic")
	}
	pushArgs = append(append(pushArgs, "--", p.url), specs...)
	rep.phase(PhasePush, timeout, p.remote.Stall)
	if _, err := p.runObserved(ctx, "push", pushArgs, env, timeout, rep.observer()); err != nil {
		if n := sweep(); n > 0 {
			p.log.Info("removed temporary objects a failed push left in the local remote", "remote", p.display, "dirs", n)
		}
		return p.fail(req.Branch, kindOf(err), err)
	}
	return nil
}

// pushMemoryLimits bound the memory of the git children that read the
// packs (push and the pack-objects it starts, repack), independently of
// the generation's size: one packing thread, no delta search memory
// beyond 32 MiB, blobs over 16 MiB streamed instead of loaded whole
// (core.bigFileThreshold), pack files mapped in 16 MiB windows, at most
// 128 MiB of them at once (a push raises that bound to what it sends:
// pushLimits). They travel in
// GIT_CONFIG_PARAMETERS, which git clears for a local (file://) remote's
// receive-pack, so that one gets them through --receive-pack; a server's
// receiving side is bounded by its own configuration.
var pushMemoryLimits = []string{
	"-c", "pack.threads=1",
	"-c", "pack.windowMemory=32m",
	"-c", "pack.deltaCacheSize=16m",
	"-c", "core.deltaBaseCacheLimit=16m",
	"-c", "core.bigFileThreshold=16m",
	"-c", "core.packedGitWindowSize=16m",
	"-c", "core.packedGitLimit=128m",
}

// pushMappedSlack is what a push may map of the packs beyond the bytes
// it sends (the trees and commits it walks on both sides).
const pushMappedSlack = 128 << 20

// pushLimits returns pushMemoryLimits for a push that sends about send
// bytes: core.packedGitLimit raised to send + pushMappedSlack. The pack
// objects of a generation are read in the order of its trees (by path,
// so by segment digest), not in the order they lie in the local pack; a
// mapping bound below the pack being sent made git unmap and map a
// 16 MiB window for nearly every object (a dense 1 GiB generation: about
// 5 s more system and user time in pack-objects and the receiving
// index-pack, about a third of the push). What is mapped is the pack
// files' page cache, clean and reclaimable, which reading them through
// smaller windows loads just the same.
func pushLimits(send int64) []string {
	limit := int64(128 << 20)
	if send > 0 && send <= math.MaxInt64-pushMappedSlack-(1<<20) {
		limit = max(limit, (send+pushMappedSlack+(1<<20)-1)>>20<<20)
	}
	out := append([]string{}, pushMemoryLimits...)
	for i := 1; i < len(out); i += 2 {
		if strings.HasPrefix(out[i], "core.packedGitLimit=") {
			out[i] = "core.packedGitLimit=" + strconv.FormatInt(limit>>20, 10) + "m"
		}
	}
	return out
}

// localReceiveOptions are the receiving side's settings for a local
// (file://) remote, whose receive-pack the daemon runs: the pack it is
// sent is kept as it came (receive.unpackLimit=1: index-pack only),
// where git's default for a push of fewer than 100 objects, unpack-objects,
// deflates every object again into a loose file: for a dense single-file
// generation (one 58 MB WTXT blob) that was about half of the push's CPU.
// receive.autogc=false: git gc --auto would repack the whole remote
// (with its own delta search) once 50 such packs exist, in the
// background of a training job; a local remote is the archive its owner
// maintains (git gc, git maintenance), as a server's operator does.
var localReceiveOptions = []string{
	"-c", "receive.unpackLimit=1",
	"-c", "receive.autogc=false",
}

// pushPackOptions shape the pack git push sends. pack.useSparse=false:
// git's default "sparse" walk (git >= 2.27) only looks for objects the
// remote has at the same paths, and a segment stored as pieces
// (Config.SegmentPiece) lives under a new path named by its new digest,
// so the sparse walk sent every unchanged piece of a changed segment
// again and the receiver stored the copies (2% uniform change on the
// 50 MB bench model: 951 blobs pushed for 728 new objects, remote growth
// 14.8 MiB instead of about 4). The full walk marks every object of the
// remote's tree as present.
var pushPackOptions = []string{"-c", "pack.useSparse=false"}

// addedSendBytes is the send estimate of a commit that added blobs of
// added bytes over the remote's head: its trees, commit and tag, and the
// pack entries' headers come to about 1% more (a dense 1 GiB generation
// of 16 KiB pieces: 16.6k trees of 6.4 MB beside 1.09 GB of blobs).
func addedSendBytes(added int64) int64 {
	if added > math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return added + added/50 + 1<<20
}

// sendBytes estimates the bytes a push sends: the on-disk size of the
// objects reachable from commit and not from the remote's refs we have
// locally. 0 when git cannot say (the base timeout then applies).
func (p *GitPusher) sendBytes(ctx context.Context, commit plumbing.Hash, remote map[plumbing.ReferenceName]plumbing.Hash, env []string) int64 {
	args := []string{"rev-list", "--objects", "--disk-usage", commit.String(), "--not"}
	repo, err := git.PlainOpen(p.repoDir)
	if err != nil {
		return 0
	}
	for _, h := range remote {
		if _, err := repo.Storer.EncodedObject(plumbing.AnyObject, h); err == nil {
			args = append(args, h.String())
		}
	}
	out, err := p.run(ctx, "rev-list", args, env, p.remote.Timeout)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// quarantineSweeper records the temporary object directories of a local
// remote and returns a function that removes those created since (what a
// killed git receive-pack / index-pack leaves: objects/incoming-*,
// objects/tmp_objdir-incoming-*, objects/pack/tmp_pack_*). For other
// remotes it does nothing: receive-pack on a server deletes its
// quarantine itself when the connection drops.
func (p *GitPusher) quarantineSweeper() func() int {
	if p.proto != "file" {
		return func() int { return 0 }
	}
	dir := strings.TrimPrefix(p.remote.URL, "file://")
	objects := filepath.Join(dir, "objects")
	if st, err := os.Stat(objects); err != nil || !st.IsDir() {
		objects = filepath.Join(dir, ".git", "objects")
	}
	list := func() map[string]bool {
		m := map[string]bool{}
		for _, pat := range []string{"incoming-*", "tmp_objdir-*", filepath.Join("pack", "tmp_pack_*"), filepath.Join("pack", "tmp_idx_*")} {
			ms, _ := filepath.Glob(filepath.Join(objects, pat))
			for _, x := range ms {
				m[x] = true
			}
		}
		return m
	}
	before := list()
	return func() int {
		n := 0
		for x := range list() {
			if !before[x] && os.RemoveAll(x) == nil {
				n++
			}
		}
		return n
	}
}

// kindOf returns the kind a failed git run was classified as.
func kindOf(err error) error {
	var ge *GitError
	if errors.As(err, &ge) {
		return ge.Kind
	}
	return ErrRetryable
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
