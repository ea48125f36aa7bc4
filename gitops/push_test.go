package gitops

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/snapd-ml/snapd/internal/gittest"
)

// chainRepo commits n small generations and returns the repo and results.
func chainRepo(t *testing.T, n int) (*Repo, []*Result) {
	t.Helper()
	dir := t.TempDir()
	r, err := OpenRepo(filepath.Join(dir, "local.git"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	chain := genChain(t, dir, n, []testArray{{name: "w", data: pseudo(1, 2000), chunk: 256}}, func(g int, a []testArray) { a[0].data[g*7] ^= byte(g) })
	var res []*Result
	for _, p := range chain.paths {
		x, err := r.Commit(context.Background(), Generation{WTXT: p})
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, x)
	}
	return r, res
}

func remoteHead(t *testing.T, dir, ref string) string {
	t.Helper()
	out, err := gitRun(dir, "rev-parse", "--verify", "-q", ref)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

func req(r *Repo, res *Result) PushRequest {
	return PushRequest{Branch: r.Config().Branch, Commit: res.Commit, Tag: res.Tag}
}

func TestPushLocalAndFileURL(t *testing.T) {
	r, res := chainRepo(t, 3)
	remote := filepath.Join(t.TempDir(), "r.git")
	gitCmd(t, filepath.Dir(remote), "init", "-q", "--bare", remote)
	ctx := context.Background()
	byPath, err := NewPusher(r.Dir(), Remote{URL: remote})
	if err != nil {
		t.Fatal(err)
	}
	byURL, err := NewPusher(r.Dir(), Remote{URL: "file://" + remote})
	if err != nil {
		t.Fatal(err)
	}
	if err := byPath.Push(ctx, req(r, res[0])); err != nil {
		t.Fatal(err)
	}
	if got := remoteHead(t, remote, "refs/heads/snapshots"); got != res[0].Commit.String() {
		t.Fatalf("remote head %s, want %s", got, res[0].Commit)
	}
	for _, x := range res[1:] {
		if err := byURL.Push(ctx, req(r, x)); err != nil {
			t.Fatal(err)
		}
	}
	// Repeats and older generations are no-ops, never rewinds.
	for _, x := range res {
		if err := byPath.Push(ctx, req(r, x)); err != nil {
			t.Fatalf("re-push %s: %v", x.Tag, err)
		}
	}
	if got := remoteHead(t, remote, "refs/heads/snapshots"); got != res[2].Commit.String() {
		t.Fatalf("remote head %s, want %s", got, res[2].Commit)
	}
	for _, x := range res {
		if got := remoteHead(t, remote, "refs/tags/"+x.Tag+"^{commit}"); got != x.Commit.String() {
			t.Fatalf("tag %s → %s", x.Tag, got)
		}
	}
	gitCmd(t, remote, "fsck", "--strict", "--no-dangling")
	// A missing commit is a local problem.
	err = byPath.Push(ctx, PushRequest{Branch: "snapshots", Commit: plumbing.NewHash(strings.Repeat("ab", 20))})
	if !errors.Is(err, ErrLocal) || !NeedsAttention(err) {
		t.Fatalf("missing commit: %v", err)
	}
}

func TestPushHTTP(t *testing.T) {
	r, res := chainRepo(t, 4)
	srv := gittest.NewHTTPRemote(t)
	ctx := context.Background()
	const secret = "s3cr3t-token-value"
	srv.RequireToken(secret)
	tokenFile := writeFile(t, t.TempDir(), "token", []byte("wrong-token-value\n"))
	p, err := NewPusher(r.Dir(), Remote{URL: srv.URL, TokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	// 401: needs a person; the token never appears in the error.
	err = p.Push(ctx, req(r, res[0]))
	if !errors.Is(err, ErrAuth) || !NeedsAttention(err) {
		t.Fatalf("bad token: %v", err)
	}
	if strings.Contains(err.Error(), "wrong-token-value") || strings.Contains(err.Error(), secret) {
		t.Fatalf("error leaks the token: %v", err)
	}
	// The fixed credential is read on the next push.
	writeFile(t, filepath.Dir(tokenFile), "token", []byte(secret+"\n"))
	if err := p.Push(ctx, req(r, res[0])); err != nil {
		t.Fatal(err)
	}
	// Token from the environment.
	pe, err := newPusher(r.Dir(), Remote{URL: srv.URL, TokenEnv: "SNAPD_TEST_TOKEN"}, func(k string) string {
		if k == "SNAPD_TEST_TOKEN" {
			return secret
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	// 503: retryable.
	srv.SetMode(gittest.Down)
	if err := pe.Push(ctx, req(r, res[1])); !errors.Is(err, ErrRetryable) || NeedsAttention(err) {
		t.Fatalf("503: %v", err)
	}
	// Lost ack: the remote applies the push but the client sees 502; the
	// retry finds the commit there and sends nothing.
	srv.SetMode(gittest.LoseAck)
	if err := pe.Push(ctx, req(r, res[1])); !errors.Is(err, ErrRetryable) {
		t.Fatalf("lost ack: %v", err)
	}
	applied := srv.Applied.Load()
	srv.SetMode(gittest.Up)
	if err := pe.Push(ctx, req(r, res[1])); err != nil {
		t.Fatal(err)
	}
	if srv.Applied.Load() != applied {
		t.Fatalf("retry after a lost ack pushed again (%d → %d)", applied, srv.Applied.Load())
	}
	if got := remoteHead(t, srv.Dir, "refs/tags/"+res[1].Tag+"^{commit}"); got != res[1].Commit.String() {
		t.Fatalf("tag after lost ack: %q", got)
	}
	// A foreign commit on the remote: diverged, nothing overwritten.
	foreign := foreignCommit(t, srv.Dir, "snapshots")
	err = pe.Push(ctx, req(r, res[2]))
	if !errors.Is(err, ErrDiverged) || !NeedsAttention(err) {
		t.Fatalf("diverged: %v", err)
	}
	if got := remoteHead(t, srv.Dir, "refs/heads/snapshots"); got != foreign {
		t.Fatalf("remote head %s, want the foreign %s", got, foreign)
	}
	if _, err := gitRun(srv.Dir, "rev-parse", "--verify", "-q", "refs/tags/"+res[2].Tag); err == nil {
		t.Fatal("tag pushed although the branch diverged")
	}
	srv.Fsck(t)
	// Unreachable remote: retryable.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	pd, _ := NewPusher(r.Dir(), Remote{URL: "http://" + addr + "/x.git"})
	if err := pd.Push(ctx, req(r, res[0])); !errors.Is(err, ErrRetryable) {
		t.Fatalf("connection refused: %v", err)
	}
	// Missing repository on the server: needs a person.
	p404, _ := NewPusher(r.Dir(), Remote{URL: strings.TrimSuffix(srv.URL, "remote.git") + "nothere.git", TokenFile: tokenFile})
	if err := p404.Push(ctx, req(r, res[0])); !NeedsAttention(err) {
		t.Fatalf("404: %v", err)
	}
}

// foreignCommit adds a commit by someone else on top of branch in the bare
// repository dir and returns its hash.
func foreignCommit(t *testing.T, dir, branch string) string {
	t.Helper()
	tree := strings.TrimSpace(gitCmd(t, dir, "rev-parse", branch+"^{tree}"))
	parent := strings.TrimSpace(gitCmd(t, dir, "rev-parse", branch))
	c := strings.TrimSpace(gitCmd(t, dir, "-c", "user.name=other", "-c", "user.email=o@example.com", "commit-tree", tree, "-p", parent, "-m", "foreign"))
	gitCmd(t, dir, "update-ref", "refs/heads/"+branch, c)
	return c
}

func TestClassify(t *testing.T) {
	cases := []struct {
		err  error
		kind error
	}{
		{fmt.Errorf("x: %w", transport.ErrAuthenticationRequired), ErrAuth},
		{transport.ErrAuthorizationFailed, ErrAuth},
		{errors.New("ssh: handshake failed: ssh: unable to authenticate, attempted methods [none publickey]"), ErrAuth},
		{errors.New("ssh: handshake failed: knownhosts: key mismatch"), ErrAuth},
		{git.ErrForceNeeded, ErrDiverged},
		{errors.New("non-fast-forward update: refs/heads/x"), ErrDiverged},
		{errors.New("command error on refs/heads/x: fetch first"), ErrDiverged},
		{errors.New("command error on refs/heads/x: pre-receive hook declined"), ErrRejected},
		{transport.ErrRepositoryNotFound, ErrRejected},
		{context.DeadlineExceeded, ErrRetryable},
		{io.ErrUnexpectedEOF, ErrRetryable},
		{&net.OpError{Op: "dial", Err: errors.New("refused")}, ErrRetryable},
		{errors.New("unpack error: disk full"), ErrRetryable},
	}
	for _, c := range cases {
		if got := Classify(c.err); got != c.kind {
			t.Errorf("Classify(%v) = %v, want %v", c.err, got, c.kind)
		}
	}
}

func TestNewPusherConfig(t *testing.T) {
	dir := t.TempDir()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := writeFile(t, dir, "id_ed25519", pem.EncodeToMemory(blk))
	sp, _ := ssh.NewPublicKey(pub)
	known := writeFile(t, dir, "known_hosts", []byte("example.com "+string(ssh.MarshalAuthorizedKey(sp))))
	bad := []Remote{
		{},
		{URL: "https://user:pw@example.com/r.git"},
		{URL: "/local/path", TokenFile: "x"},
		{URL: "https://example.com/r.git", SSHKeyFile: keyFile},
		{URL: "git@example.com:r.git"},
		{URL: "git@example.com:r.git", SSHKeyFile: keyFile, TokenEnv: "X"},
		{URL: "ftp://example.com/r.git"},
	}
	for _, rm := range bad {
		if _, err := NewPusher(dir, rm); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", rm, err)
		} else if strings.Contains(err.Error(), ":pw@") {
			t.Errorf("error leaks the password: %v", err)
		}
	}
	for _, u := range []string{"git@example.com:r.git", "ssh://git@example.com:2222/r.git"} {
		p, err := NewPusher(dir, Remote{URL: u, SSHKeyFile: keyFile, SSHKnownHostsFile: known})
		if err != nil {
			t.Fatal(err)
		}
		_, env, cleanup, err := p.gitEnv()
		cleanup()
		if err != nil {
			t.Fatalf("%s: ssh auth: %v", u, err)
		}
		if !strings.Contains(strings.Join(env, "\n"), "GIT_SSH_COMMAND=ssh ") {
			t.Fatalf("%s: no GIT_SSH_COMMAND", u)
		}
	}
	p, _ := NewPusher(dir, Remote{URL: "git@example.com:r.git", SSHKeyFile: filepath.Join(dir, "missing")})
	if _, _, cleanup, err := p.gitEnv(); err == nil {
		t.Fatal("missing key file accepted")
	} else {
		cleanup()
	}
	if err := p.Push(context.Background(), PushRequest{Branch: "b", Commit: plumbing.ZeroHash}); !NeedsAttention(err) {
		t.Fatalf("push with a bad key: %v", err)
	}
	os.Remove(keyFile)
}

// TestPushSSH pushes over SSH (key file, known_hosts) to the real
// git-receive-pack behind a test SSH server.
func TestPushSSH(t *testing.T) {
	r, res := chainRepo(t, 3)
	srv := gittest.NewSSHRemote(t)
	ctx := context.Background()
	p, err := NewPusher(r.Dir(), Remote{URL: srv.URL, SSHKeyFile: srv.ClientKey, SSHKnownHostsFile: srv.KnownHosts, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res[:2] {
		if err := p.Push(ctx, req(r, x)); err != nil {
			t.Fatalf("push %s: %v", x.Tag, err)
		}
	}
	if got := remoteHead(t, srv.Dir, "refs/heads/snapshots"); got != res[1].Commit.String() {
		t.Fatalf("remote head %s, want %s", got, res[1].Commit)
	}
	if got := remoteHead(t, srv.Dir, "refs/tags/gen-000002^{commit}"); got != res[1].Commit.String() {
		t.Fatalf("tag: %q", got)
	}
	gitCmd(t, srv.Dir, "fsck", "--strict", "--no-dangling")
	// A key the server does not accept: authentication failure.
	otherKey, _ := gittest.NewKeyFile(t, t.TempDir(), "other")
	pk, _ := NewPusher(r.Dir(), Remote{URL: srv.URL, SSHKeyFile: otherKey, SSHKnownHostsFile: srv.KnownHosts, Timeout: 20 * time.Second})
	if err := pk.Push(ctx, req(r, res[2])); !errors.Is(err, ErrAuth) {
		t.Fatalf("unknown client key: %v", err)
	}
	// A host key that does not match known_hosts: needs a person.
	_, otherPub := gittest.NewKeyFile(t, t.TempDir(), "hostkey")
	host := strings.TrimPrefix(strings.TrimSuffix(srv.URL, "/remote.git"), "ssh://git@")
	kh := writeFile(t, t.TempDir(), "known_hosts", []byte(knownhosts.Line([]string{knownhosts.Normalize(host)}, otherPub)+"\n"))
	ph, _ := NewPusher(r.Dir(), Remote{URL: srv.URL, SSHKeyFile: srv.ClientKey, SSHKnownHostsFile: kh, Timeout: 20 * time.Second})
	if err := ph.Push(ctx, req(r, res[2])); !NeedsAttention(err) {
		t.Fatalf("host key mismatch: %v", err)
	}
	if got := remoteHead(t, srv.Dir, "refs/heads/snapshots"); got != res[1].Commit.String() {
		t.Fatal("a failed push changed the remote")
	}
}
