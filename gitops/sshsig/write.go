package sshsig

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/snapd-ml/snapd/internal/atomicfile"
)

// AllowedSignersFile is the name of the allowed_signers file snapd writes
// beside its signing key: the key's public half as a git/OpenSSH entry,
// for `git -c gpg.ssh.allowedSignersFile=... verify-commit`, ssh-keygen
// -Y verify and snapd verify --pubkey.
const AllowedSignersFile = "allowed_signers"

var principalRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._@+-]{1,128}$`) })

// ValidPrincipal reports whether p is a principal snapd writes into an
// allowed_signers file: 1..128 of A-Z a-z 0-9 . _ @ + - (an email-like
// name, e.g. snapd@trainer-01).
func ValidPrincipal(p string) bool { return principalRE().MatchString(p) }

// DefaultPrincipal is snapd@host, or snapd@localhost when host is empty or
// not a valid principal's part (e.g. os.Hostname's answer).
func DefaultPrincipal(host string) string {
	if !ValidPrincipal(host) {
		host = "localhost"
	}
	return "snapd@" + host
}

// AllowedSignersLine is the entry of pub for principal:
//
//	PRINCIPAL namespaces="git,file" ssh-ed25519 AAAA...
//
// with LF. Both namespaces: git signs commits and tags with "git";
// WTXT signatures and ssh-keygen -Y sign use "file" (NamespaceFile).
func AllowedSignersLine(principal string, pub ed25519.PublicKey) ([]byte, error) {
	if !ValidPrincipal(principal) {
		return nil, fmt.Errorf("principal of %d bytes: want 1..128 of A-Z a-z 0-9 . _ @ + -", len(principal))
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, err
	}
	key := bytes.TrimSuffix(ssh.MarshalAuthorizedKey(sp), []byte("\n"))
	return fmt.Appendf(nil, "%s namespaces=\"git,file\" %s\n", principal, key), nil
}

// WriteAllowedSigners writes dir/AllowedSignersFile for pub (atomically,
// 0644; dir is made 0700 when missing) and returns its path. It leaves an
// identical file alone and replaces one naming another principal or key:
// the file is derived, never edited by hand.
func WriteAllowedSigners(dir, principal string, pub ed25519.PublicKey) (string, error) {
	line, err := AllowedSignersLine(principal, pub)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	p := filepath.Join(dir, AllowedSignersFile)
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, line) {
		return p, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return p, atomicfile.WriteFile(p, line, 0o644)
}
