package gittest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHRemote is a bare repository reachable over SSH on 127.0.0.1: a small
// SSH server (golang.org/x/crypto/ssh) that runs the real git-receive-pack /
// git-upload-pack for exec requests and accepts one client key.
type SSHRemote struct {
	Dir        string // the bare repository
	URL        string // ssh://git@127.0.0.1:port/remote.git
	KnownHosts string // known_hosts file with the server's host key
	ClientKey  string // OpenSSH private key file the server accepts

	l     net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

// NewKeyFile writes a new OpenSSH Ed25519 private key file and returns its
// path and public key.
func NewKeyFile(t testing.TB, dir, name string) (string, ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	p := WriteFile(t, dir, name, pem.EncodeToMemory(blk))
	// OpenSSH ignores private keys others can read.
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, sp
}

// NewSSHRemote creates an empty bare repository and serves it over SSH.
func NewSSHRemote(t testing.TB) *SSHRemote {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "remote.git")
	Git(t, root, "init", "-q", "--bare", dir)
	keyFile, clientPub := NewKeyFile(t, root, "client_key")
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostSigner, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
			if bytes.Equal(k.Marshal(), clientPub.Marshal()) {
				return nil, nil
			}
			return nil, errors.New("key not authorized")
		},
	}
	cfg.AddHostKey(hostSigner)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	kh := knownhosts.Line([]string{knownhosts.Normalize(addr)}, hostSigner.PublicKey())
	r := &SSHRemote{
		Dir:        dir,
		URL:        "ssh://git@" + addr + "/remote.git",
		KnownHosts: WriteFile(t, root, "known_hosts", []byte(kh+"\n")),
		ClientKey:  keyFile,
		l:          l,
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns = append(r.conns, c)
			r.mu.Unlock()
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.serve(c, cfg, root)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *SSHRemote) serve(c net.Conn, cfg *ssh.ServerConfig, root string) {
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		c.Close()
		return
	}
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		r.session(ch, creqs, root)
	}
}

// session runs one exec request: git-receive-pack or git-upload-pack
// '<path>' inside root.
func (r *SSHRemote) session(ch ssh.Channel, reqs <-chan *ssh.Request, root string) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			req.Reply(req.Type == "env", nil)
			continue
		}
		var p struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &p); err != nil {
			req.Reply(false, nil)
			return
		}
		prog, arg, _ := strings.Cut(p.Command, " ")
		arg = strings.Trim(arg, "'")
		if (prog != "git-receive-pack" && prog != "git-upload-pack") || strings.Contains(arg, "..") {
			req.Reply(false, nil)
			return
		}
		req.Reply(true, nil)
		cmd := exec.Command("git", strings.TrimPrefix(prog, "git-"), filepath.Join(root, arg))
		cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=" + root, "PATH=/usr/bin:/bin:/usr/local/bin"}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
		cmd.WaitDelay = 2 * time.Second
		status := uint32(0)
		if err := cmd.Run(); err != nil {
			status = 1
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				status = uint32(ee.ExitCode())
			}
			fmt.Fprintf(ch.Stderr(), "%v\n", err)
		}
		ch.CloseWrite()
		ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
		io.Copy(io.Discard, ch)
		return
	}
}
